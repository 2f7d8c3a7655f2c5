"""Helpers for the fault tests: whole checkpoint files made by hand, real signals to real runs, process trees.

Importable from any test module (pytest puts tests/ on sys.path), like s3_server.py.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import time
from pathlib import Path


def safetensors_bytes(payload: bytes) -> bytes:
    """A whole safetensors file holding ``payload`` as one uint8 tensor (its header says how long it is)."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}).encode()
    return struct.pack("<Q", len(header)) + header + payload


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
