"""The suite's reaper: when the pytest that started it is gone -- ended, or killed part-way, even by SIGKILL -- every
process still carrying that session's mark in its environment is stopped (SIGTERM, then SIGKILL after a grace
period): trainers, torchrun's workers (in sessions of their own), the vLLM lane's server and its engine, reward
workers, the preloaded interpreter and its runs.

``tests/conftest.py`` starts it once per session (:func:`start`), in a session of its own so that a signal to
pytest's process group does not reach it, with a pipe on its stdin that only pytest holds: end of file on that pipe
is pytest's end, whatever the cause. Every process the suite starts inherits the mark (conftest puts it in
``os.environ`` before anything starts), which is how the reaper finds a grandchild that left pytest's process tree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 5.0


def marked_processes(mark: bytes, exclude: set[int]) -> list[int]:
    """Pids of the running processes whose environment holds ``mark`` (``NAME=value``), less ``exclude``."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        pid = int(environ.parent.name)
        if pid in exclude:
            continue
        try:
            if mark in environ.read_bytes().split(b"\0"):
                state = (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(pid)
        except OSError:  # gone, or another user's
            continue
    return found


def ignores(pid: int, sig: int) -> bool:
    """Whether the process ignores ``sig`` (its SigIgn mask in /proc): multiprocessing's resource tracker ignores
    SIGTERM and SIGINT, and would hold the reaper for its whole grace period."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def reap(mark: bytes) -> list[int]:
    """Stop every marked process but this one: SIGTERM, up to GRACE_S seconds, then SIGKILL (at once for a process
    that ignores SIGTERM). Returns who was found."""
    me = {os.getpid()}
    found = marked_processes(mark, me)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in marked_processes(mark, me):
            try:
                os.kill(pid, signal.SIGKILL if ignores(pid, sig) else sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE_S
        while marked_processes(mark, me) and time.monotonic() < deadline:
            time.sleep(0.1)
    return found


def start(mark_name: str) -> subprocess.Popen | None:
    """Start the reaper for this session (Linux only: it reads /proc). Keep the returned object for as long as the
    session runs; :func:`stop` (or pytest's end, however it comes) sets it to work."""
    if not Path("/proc/self/environ").is_file():
        return None
    return subprocess.Popen([sys.executable, __file__, f"{mark_name}={os.environ[mark_name]}"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)


def stop(reaper: subprocess.Popen | None, timeout: float = 30.0) -> None:
    """Let the reaper run now (pytest is ending) and wait for it."""
    if reaper is None:
        return
    reaper.stdin.close()
    try:
        reaper.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        reaper.kill()


if __name__ == "__main__":
    sys.stdin.buffer.read()  # until pytest closes the pipe or dies
    reap(sys.argv[1].encode())
