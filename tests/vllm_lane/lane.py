"""Helpers of the vLLM lane's tests: run the training CLI with its rollouts recorded (forked from the preloaded
interpreter, tests/warm_python.py: vLLM, TRL and torch imported once for the lane), read its metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import warm_python

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench_data_sample"
RECORDER = Path(__file__).with_name("record_rollouts.py")


def lane_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "VLLM_CPU_KVCACHE_SPACE": "2",  # GiB: vLLM's CPU engine takes its KV cache from RAM
    }


def run_recorded(tmp_path: Path, flags: list, *, timeout: int = 900, env: dict | None = None):
    """Run the training CLI through record_rollouts.py; return (process, rollout records)."""
    out = tmp_path / "rollouts.jsonl"
    command = [sys.executable, str(RECORDER), str(out), "--", *map(str, flags)]
    result = warm_python.run(command, cwd=REPO, env={**lane_env(tmp_path), **(env or {})}, capture_output=True,
                             text=True, timeout=timeout)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []
    return result, records


def read_metrics(output_dir: Path) -> list[dict]:
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "reward" in r]


def failure(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-6000:]}"
