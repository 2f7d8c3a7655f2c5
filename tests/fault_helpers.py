"""Helpers for the fault tests: whole checkpoint files made by hand, real signals to real runs, process trees.

Importable from any test module (pytest puts tests/ on sys.path), like s3_server.py.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def safetensors_bytes(payload: bytes) -> bytes:
    """A whole safetensors file holding ``payload`` as one uint8 tensor (its header says how long it is)."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}).encode()
    return struct.pack("<Q", len(header)) + header + payload


def torch_zip(path: Path, payload: bytes = b"state") -> None:
    """A zip archive like torch.save's (what optimizer.pt, scheduler.pt and rng_state.pth are)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)


def real_checkpoint(root: Path, step: int, manifest: bool = True, *, max_steps: int = 8) -> Path:
    """A checkpoint-<step> folder with whole files of each kind a real one has, and its manifest (one process)."""
    from olmocr_rl.storage import Topology, verify

    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(safetensors_bytes(f"weights {step}".encode() * 50))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch_zip(folder / name, f"{name} {step}".encode())
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max_steps,
                                                           "epoch": step / max_steps, "log_history": []}, indent=2))
    if manifest:
        verify.write_manifest(folder, Topology())
    return folder


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -c code`` (dedented) in the repository, the package importable; its output captured."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0]


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by a parent that never waits, does not count)."""
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (torchrun starts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        found = _stat(int(stat.parent.name))
        if found is not None and found[1] != "Z":
            children.setdefault(found[0], []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def survivors(pids: list[int], timeout: float = 15.0) -> list[int]:
    """The processes of ``pids`` still running after up to ``timeout`` seconds (each one left is SIGKILLed, so a
    failing test leaves nothing behind either)."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if alive(pid)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def wait_for_record(proc: subprocess.Popen, metrics: Path, step: int, timeout: float = 540) -> bool:
    """Wait until the run logged step ``step`` in its metrics.jsonl (False when it exited or time ran out first)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics.is_file() and any(line.startswith(f'{{"step": {step},') for line in metrics.read_text().splitlines()):
            return True
        time.sleep(0.02)
    return False
