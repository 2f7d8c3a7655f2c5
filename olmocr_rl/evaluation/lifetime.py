"""How an evaluation ends: stop signals, the processes it started, and what reaches stdout.

- :func:`stop_signals`: SIGTERM and SIGINT raise :class:`Stopped` in the main thread, so the run closes its backend
  (the vLLM engine) and keeps what is done (each finished page is already on disk); a second one while it closes
  ends the process at once.
- :class:`ChildGuard`: a watcher process of its own session (``python -m olmocr_rl.evaluation.lifetime``) that notes
  every process the evaluation starts (its descendants, and anything carrying its mark in the environment: a
  process re-parented away from it still has it) and stops them (SIGTERM, then SIGKILL) once the evaluation is gone,
  however it went: a normal end, an exception, or SIGKILL, which no handler sees. vLLM's engine core and its
  workers are such processes.
- :func:`stdout_to_stderr`: during the run everything written to stdout -- vLLM's log lines, a child process's
  output -- goes to stderr, so the report (or ``--json``) is alone on stdout.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The environment variable that marks the processes an evaluation starts.
MARK = "OLMOCR_RL_EVALUATE_RUN"
#: How often the watcher notes the evaluation's descendants, and how long stopped processes get before SIGKILL.
POLL_S = 0.5
GRACE_S = 5.0


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived (a BaseException, as KeyboardInterrupt: ``except Exception`` does not catch it)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Stopped` (once; a second signal exits at once with 128 + its number) until
    the block ends; in a process forked meanwhile they do what they do by default. Outside the main thread, a
    no-op."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised, owner = [], os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked child (an engine's process) that kept this handler: the default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if raised:  # already stopping (closing the engine): the user insists
            os._exit(128 + signum)
        raised.append(signum)
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 (and ``sys.stdout``) point at stderr inside the block: what libraries and child processes
    print there goes to stderr. Where stdout has no descriptor (a captured stream), ``sys.stdout`` alone is
    redirected."""
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    sys.stdout.flush()
    saved = os.dup(out_fd)
    os.dup2(err_fd, out_fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os.dup2(saved, out_fd)
        os.close(saved)


# --- the watcher ------------------------------------------------------------------------------------------------


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every live process (Linux /proc), zombies left out."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), fields[19])  # ppid, starttime (stat fields 4 and 22)
    return table


def _descendants(roots: set[int], table: dict[int, tuple[int, str]]) -> set[int]:
    found, frontier = set(), set(roots)
    while frontier:
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier and pid not in found}
        found |= frontier
    return found


def _marked(mark: bytes) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.add(int(entry))
            except OSError:
                continue
    return found


def watch(parent: int, mark: str, stream, known: set[tuple[int, str]] | None = None) -> list[int]:
    """The watcher's loop: note ``parent``'s new descendants every :data:`POLL_S` until ``stream`` has something
    to read (the parent's word, or the end of the pipe) or the parent is gone, then stop every noted process still
    alive, its descendants and every process carrying ``mark``: SIGTERM, then SIGKILL after :data:`GRACE_S`.
    ``known``: ``(pid, start time)`` of the parent's descendants from before it started the watcher (not its to
    stop). Returns the pids it signalled."""
    me = os.getpid()
    before = _process_table()
    known = known or set()
    born = before.get(parent, (0, None))[1]
    noted: dict[int, str] = {}
    while True:
        ready, _, _ = select.select([stream], [], [], POLL_S)
        table = _process_table()
        if table.get(parent, (0, None))[1] != born:
            break  # the parent is gone (a forked child may still hold the pipe open: no end of file then)
        for pid in _descendants({parent}, table) - {me}:
            if (pid, table[pid][1]) not in known:
                noted[pid] = table[pid][1]
        if ready:
            break  # the parent's word (or the pipe's end): it is done
    mark_bytes = mark.encode()

    def targets() -> set[int]:
        table = _process_table()
        alive = {pid for pid, start in noted.items() if pid in table and table[pid][1] == start}
        return (alive | _descendants(alive, table) | _marked(mark_bytes)) - {me, parent}

    signalled: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                signalled.append(pid)
        deadline = time.monotonic() + GRACE_S
        while targets() and time.monotonic() < deadline:
            time.sleep(0.1)
    return signalled


class ChildGuard:
    """Starts the watcher (Linux; elsewhere nothing) and marks this process's future children; :meth:`close` (or the
    end of this process, however it comes) lets it stop them."""

    def __init__(self):
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> ChildGuard:
        if not Path("/proc/self/stat").is_file():
            return self
        table = _process_table()
        known = ",".join(f"{pid}:{table[pid][1]}" for pid in _descendants({os.getpid()}, table))
        os.environ[MARK] = f"{os.getpid()}.{time.time_ns()}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "olmocr_rl.evaluation.lifetime", str(os.getpid()), os.environ[MARK], known],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, timeout: float = 2 * GRACE_S + 5) -> None:
        """Stop what this process started and is still running, and wait for the watcher (up to ``timeout``)."""
        if self.process is None:
            return
        os.environ.pop(MARK, None)
        with contextlib.suppress(OSError):
            self.process.stdin.write(b"done\n")
            self.process.stdin.close()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.process = None


if __name__ == "__main__":
    watch(int(sys.argv[1]), f"{MARK}={sys.argv[2]}", sys.stdin,
          {(int(pid), start) for pid, start in (item.split(":") for item in sys.argv[3].split(",") if item)})
