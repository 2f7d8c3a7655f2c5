"""Helpers shared by the launcher tests (tests/unit/test_launchers.py, tests/integration/test_launchers_run.py):
the scripts' paths, running them, reading a dry run's `[label] argv` lines back with shlex, fake cluster tools."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from olmocr_rl.config import parse_args

REPO = Path(__file__).resolve().parents[1]
BEAKER = REPO / "scripts" / "grpotrainer-beaker.sh"
TASK = REPO / "scripts" / "beaker" / "task.sh"
SBATCH = REPO / "scripts" / "slurm" / "grpo.sbatch"
SUBMIT = REPO / "scripts" / "slurm" / "submit.sh"
SHELL_SCRIPTS = [BEAKER, TASK, SBATCH, SUBMIT]
ACCELERATE_CONFIGS = REPO / "configs" / "accelerate"
DEFAULT_MODEL = parse_args([]).model_name


# ---------------------------------------------------------------------------------------------
# helpers


def run(cmd: list[str], env: dict | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    result = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def commands(stdout: str) -> list[tuple[str, list[str]]]:
    """Every `[label] command` line of a dry run, as (label, argv)."""
    found = []
    for line in stdout.splitlines():
        m = re.match(r"^\[([^\]]+)\] (.*)$", line)
        if m and m.group(1) != "health":
            found.append((m.group(1), shlex.split(m.group(2))))
    return found


def only(cmds: list[tuple[str, list[str]]], label_prefix: str) -> list[list[str]]:
    return [argv for label, argv in cmds if label.startswith(label_prefix)]


def trainer_args(argv) -> list[str]:
    """The arguments after `-m olmocr_rl.grpo_train`."""
    argv = list(argv)
    i = argv.index("-m")
    assert argv[i + 1] == "olmocr_rl.grpo_train"
    return argv[i + 2 :]


def flag(argv, name: str) -> str:
    """Value of the single `name VALUE` in argv (asserting it appears exactly once)."""
    argv = list(argv)
    positions = [i for i, a in enumerate(argv) if a == name]
    assert len(positions) == 1, f"{name} appears {len(positions)} times in {argv}"
    return argv[positions[0] + 1]


def visible_devices(argv: list[str]) -> str:
    assert argv[0] == "env" and argv[1].startswith("CUDA_VISIBLE_DEVICES="), argv[:3]
    return argv[1].split("=", 1)[1]


def fake_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    path.chmod(0o755)


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    fake_tool(d, "scontrol", 'echo "scontrol $*" >> "$FAKE_LOG"\n')
    return d


def slurm_env(nodelist: str, nnodes: int, job_id: int = 4242) -> dict:
    # A PATH without scontrol: comma node lists expand without it.
    return {"PATH": "/nonexistent", "SLURM_JOB_ID": str(job_id), "SLURM_JOB_NAME": "grpo-test",
            "SLURM_JOB_NODELIST": nodelist, "SLURM_NNODES": str(nnodes)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
