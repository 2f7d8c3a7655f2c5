"""A preloaded interpreter for the suite's command-line runs: the heavy imports (torch, transformers, TRL,
datasets, accelerate) are done once, by one server process, and each ``python -m olmocr_rl.X ...`` a test starts
through :func:`run` or :class:`WarmProcess` is a fresh process forked from it, with the test's argv, environment,
working folder and standard streams. A CLI run then pays none of its ~9 s of imports (this 2-core machine).

What the forked run shares with a process started from scratch, and what it does not:

- its own pid, a real process: signals, exit statuses (``-N`` when killed by signal N), process trees and
  ``/proc`` read the same; stdout/stderr are the pipes or files the test gave; stdin is ``/dev/null``;
- ``sys.argv``, ``sys.path[0]`` (the working folder, as ``-m`` sets it), ``os.environ`` and the cwd are the
  request's, with the variables the preloaded imports set applied; Python's ``random`` and NumPy's global
  generator are reseeded from the OS, as at a fresh start;
- not printed: what the preloaded libraries print while they import (transformers' "[INFO] Running in WANDB offline
  mode", their import-time warnings), as a fresh run that exits before importing them prints none of it;
- not shared: the string-hash secret (PYTHONHASHSEED) is the server's, the same for every forked run. Tests that
  prove determinism *across processes* (bit-exact resume, one process against two) therefore keep at least one of
  their runs a process of its own (``fresh=True``), and so do tests about start-up itself (imports, start-up time).

Each server is started with the environment of the first run that needs it and serves the runs whose variables read
at import time (``PYTHONPATH``, ``HF_*``, ``TORCH*``, ``OMP_*``, ``VLLM*``, ...) are the same; a run with other ones
gets a server of its own (at most MAX_SERVERS). A request that cannot be honoured as a fresh start would -- another
Python, interpreter flags other than ``-u``, no server left -- runs as an ordinary subprocess instead, and is counted
(:func:`stats`).

Launchers: a forked ``python -m torch.distributed.run ...`` (torchrun) or ``python -m accelerate.commands.launch
...`` first forks a twin of itself as it was before it ran anything, a *zygote* (:func:`_start_zygote`), and torch
elastic's workers (``python -u -m MODULE`` / ``python -u SCRIPT``) are forked from that twin instead of started from
scratch. They stay in the launcher's process tree (launcher -> zygote -> workers), in sessions of their own as torch
elastic starts them; the zygote and its workers die with the launcher. The variables torchrun adds for its workers
(``RANK``, ``MASTER_PORT``, ``TORCHELASTIC_*``, ...) are read at run time, never while the preloaded libraries
import. A launcher started ``fresh=True`` starts its workers fresh too.

No orphans: the server dies with the process that started it (``PR_SET_PDEATHSIG``), and each forked run with the
server, so a pytest that is killed takes them all with it. ``OLMOCR_RL_WARM_PYTHON=0`` turns the whole thing off
(every run a subprocess of its own).
"""

from __future__ import annotations

import array
import atexit
import ctypes
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# What the server imports before it forks anything: the stack every CLI of the package loads. Not olmocr_rl itself
# (the tests' code, read fresh by every run), nor the engines and libraries whose import a test checks is avoided
# (peft, deepspeed, wandb).
PRELOAD = (
    "numpy", "PIL.Image", "pypdfium2", "torch", "safetensors.torch", "transformers", "datasets", "accelerate",
    "trl", "trl.trainer.grpo_trainer", "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
    "transformers.models.qwen2_vl.modeling_qwen2_vl", "transformers.models.qwen3_vl.modeling_qwen3_vl",
    "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", "transformers.models.qwen2_5_vl.processing_qwen2_5_vl",
    "transformers.models.qwen2_vl.image_processing_qwen2_vl", "yaml", "boto3", "botocore",
    # the vLLM lane's environment (absent from the main one: skipped there)
    "vllm", "vllm.v1.engine.llm_engine", "trl.generation.vllm_generation", "requests",
)
# Variables read while the preloaded libraries import: a run whose environment differs in one of them is a
# subprocess of its own.
IMPORT_TIME_PREFIXES = ("PYTHON", "HF_", "HUGGINGFACE", "TRANSFORMERS_", "TORCH", "PYTORCH", "OMP_", "MKL_",
                        "OPENBLAS", "KMP_", "TOKENIZERS_", "ACCELERATE_", "TRL_", "DATASETS_", "CUDA", "LD_",
                        "NUMEXPR", "XDG_CACHE_HOME", "VLLM", "TRITON", "TMP", "TEMP",
                        "OLMOCR_RL_TEST_")  # read by tests/sharded_cpu/sitecustomize.py at start-up
#: The launchers whose workers are forked from a zygote (see the module docstring).
LAUNCHERS = ("torch.distributed.run", "accelerate.commands.launch")
ENABLE_ENV = "OLMOCR_RL_WARM_PYTHON"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when the thread that started it exits (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _import_env(env: dict[str, str], preload_environ: dict[str, str | None]) -> dict[str, str]:
    """The variables of ``env`` read at import time, less those the preload itself sets where ``env`` leaves them
    unset or holds the value the preload would set."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES)
            and not (k in preload_environ and v == preload_environ[k])}


# ---------------------------------------------------------------------------------------------------------------
# The server (this file run as a script)


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request: a JSON line, with the run's stdin/stdout/stderr descriptors attached (SCM_RIGHTS)."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, ancdata, _flags, _addr = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * array.array("i").itemsize))
        if not chunk:
            raise ConnectionError("the client went away mid-request")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
        data += chunk
    return json.loads(data), fds


def _child(request: dict, fds: list[int], preload_environ: dict[str, str | None]) -> None:
    """In the forked run: become the requested ``python -m MODULE ARGS`` and exit as it would. Never returns."""
    code = 1
    try:
        _die_with_parent()
        if request.get("new_session"):
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for key, value in preload_environ.items():  # as the imports would have changed it (they set defaults)
            if value is None:
                os.environ.pop(key, None)
            elif key not in request["env"]:
                os.environ[key] = value
        # As a fresh start sets it: the working folder for -m, '' for -c, the script's folder for a script.
        sys.path[0] = {"module": request["cwd"], "code": ""}.get(
            request["kind"], os.path.dirname(os.path.abspath(request["target"])))
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        if request.get("unbuffered"):
            sys.stdout.reconfigure(write_through=True)
            sys.stderr.reconfigure(write_through=True)
        import random

        _keep_server_resources()
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if request["kind"] == "module" and request["target"] in LAUNCHERS:
            _start_zygote(preload_environ)
        code = _run_main(request["kind"], request["target"], request["args"])
    except BaseException:  # noqa: BLE001 - the set-up failed: said, and the run ends with 1
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _run_main(kind: str, target: str, args: list[str]) -> int:
    """Run the module, script or code as ``__main__`` and finish as the interpreter does: wait for non-daemon threads, run the
    atexit functions, flush the streams. A KeyboardInterrupt that escapes ends the process by SIGINT, as Python does."""
    import runpy
    import traceback

    code: int = 0
    interrupted = False
    sys.argv = [{"module": target, "code": "-c"}.get(kind, target), *args]
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "script":
            runpy.run_path(target, run_name="__main__")
        else:
            main = type(sys)("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)  # noqa: S102 - python -c, as asked
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt as error:
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)  # less this function's frame
        interrupted = True
    except BaseException as error:  # noqa: BLE001 - printed as an uncaught exception is
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        code = 1
    try:
        threading._shutdown()  # noqa: SLF001 - what the interpreter does at exit
        atexit._run_exitfuncs()  # noqa: SLF001
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code & 0xFF


#: The exit functions the preloaded imports registered (atexit.register called while PRELOAD imported).
_PRELOAD_EXIT_FUNCTIONS: list = []


def _recording_register(register):
    def recording(func, *args, **kwargs):
        _PRELOAD_EXIT_FUNCTIONS.append(func)
        return register(func, *args, **kwargs)

    return recording


def _keep_server_resources() -> None:
    """In a forked run: what the preloaded imports made and remove at exit -- temporary folders (wandb's media
    folder is a TemporaryDirectory made at import, removed by an atexit function) -- is the server's, shared by every
    run: a run that removed it at its own exit would pull it from under the next run."""
    import tempfile
    import weakref

    for func in _PRELOAD_EXIT_FUNCTIONS:
        if isinstance(getattr(func, "__self__", None), tempfile.TemporaryDirectory):
            atexit.unregister(func)
    for finalizer in list(weakref.finalize._registry):  # noqa: SLF001 - TemporaryDirectory's own exit clean-up
        finalizer.atexit = False


def _preload() -> dict[str, str | None]:
    """Import PRELOAD, with what the imports print (transformers prints a line when WANDB_MODE=offline, libraries warn)
    kept out of the server's own streams: a forked run prints none of it, as a fresh run that exits before those
    imports prints none of it. Returns what the imports changed in os.environ (None: removed), to be applied to every
    run's own environment, as the same imports would change it."""
    import importlib
    import warnings

    environ_before = dict(os.environ)
    register = atexit.register
    atexit.register = _recording_register(register)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        with warnings.catch_warnings(record=True):  # the filters as they are; what they let through is dropped
            for name in PRELOAD:
                try:
                    importlib.import_module(name)
                except ImportError:
                    pass  # not installed in this environment: the run imports (and fails on) it itself
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        atexit.register = register
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
    changed = {k: v for k, v in os.environ.items() if environ_before.get(k) != v}
    changed.update({k: None for k in environ_before if k not in os.environ})
    return changed


def serve(socket_path: str) -> None:
    """The server: preload, listen, fork one run per request, report each run's pid and wait status."""
    _die_with_parent()
    preload_environ = _preload()
    if threading.active_count() != 1:
        print(f"warm_python: {threading.active_count()} threads after the preload; refusing to fork", flush=True)
        sys.exit(3)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(64)
    print(f"ready {os.getpid()} {json.dumps(preload_environ)}", flush=True)
    _serve_forks(server, preload_environ, sys.stdin)


def _start_zygote(preload_environ: dict[str, str | None]) -> None:
    """In a forked launcher, before it runs: fork its zygote (a twin as it is now: the preloaded imports, nothing of
    the launcher's own state) and have torch elastic start its workers through it (:class:`WarmProcess`)."""
    try:
        from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler
    except ImportError:
        return
    folder = tempfile.mkdtemp(prefix="warm_python-zygote-")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(folder, "s"))
    listener.listen(16)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:  # the zygote: dies with the launcher; its workers die with it (_child)
        code = 0
        try:
            _die_with_parent()
            _serve_forks(listener, preload_environ, None)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    import shutil
    import types

    zygote = types.SimpleNamespace(socket_path=listener.getsockname())  # what WarmProcess needs of a server
    listener.close()
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    base = subprocess_handler.SubprocessHandler._popen

    def _popen(self, args, env):
        if isinstance(_parse_argv(list(args)), str):  # not `python (-u) -m/-c/SCRIPT`: as torch elastic would
            return base(self, args, env)
        return WarmProcess(zygote, list(args), env=env, stdout=self._stdout, stderr=self._stderr,
                           start_new_session=True)  # torch elastic starts each worker in a session of its own

    subprocess_handler.SubprocessHandler._popen = _popen


def _serve_forks(server: socket.socket, preload_environ: dict[str, str | None], control) -> None:
    """Fork one run per request on ``server``; report each run's pid and wait status. Ends when ``control`` (the
    server's stdin) is closed; a zygote (no control) ends with its launcher."""
    runs: dict[int, socket.socket] = {}
    watched = [server] + ([control] if control is not None else [])
    while True:
        readable, _, _ = select.select(watched, [], [], 0.05)
        if control is not None and control in readable and not control.buffer.read1(1):
            break  # the client closed our stdin: shut down
        if server in readable:
            conn, _ = server.accept()
            try:
                request, fds = _recv_request(conn)
            except (ConnectionError, ValueError):
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                _child(request, fds, preload_environ)
            for fd in fds:
                os.close(fd)
            _send(conn, {"pid": pid})
            runs[pid] = conn
        while runs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = runs.pop(pid, None)
            if conn is not None:
                try:
                    _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                conn.close()
    for pid in runs:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    server.close()


# ---------------------------------------------------------------------------------------------------------------
# The client (imported by tests)


class _Server:
    """One preloaded interpreter, started with ``env``: it serves the runs whose import-time variables equal its own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="warm_python-"))
        self.socket_path = str(self.folder / "s")
        self.env = dict(env)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.socket_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=None, env=self.env, start_new_session=False,
        )
        line = self.proc.stdout.readline().decode()
        if not line.startswith("ready "):
            raise RuntimeError(f"the preloaded interpreter did not start: {line!r}")
        self.preload_environ: dict[str, str | None] = json.loads(line.split(" ", 2)[2])

    def serves(self, env: dict[str, str]) -> bool:
        return _import_env(env, self.preload_environ) == _import_env(self.env, self.preload_environ)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()


#: At most this many preloaded interpreters at once (one per distinct import-time environment; the main lane needs
#: one, the vLLM lane one): a run whose environment would need another is a subprocess of its own.
MAX_SERVERS = 2
_servers: list[_Server] = []
_lock = threading.Lock()
_stats = {"forked": 0, "fallback": 0, "servers_started": 0, "fallback_reasons": {}}
_runs: list["WarmProcess"] = []


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") != "0"


def _server_for(env: dict[str, str]) -> _Server | None:
    """The server whose import-time environment is ``env``'s, started if there is none and room for one."""
    with _lock:
        for server in _servers:
            if server.serves(env):
                return server
        if len(_servers) >= MAX_SERVERS:
            return None
        server = _Server(env)
        if not _servers:
            atexit.register(shutdown)
        _servers.append(server)
        _stats["servers_started"] += 1
        return server


def server_pids() -> list[int]:
    """The pids of the preloaded interpreters now running."""
    return [server.proc.pid for server in _servers]


def shutdown() -> None:
    """Stop the servers (the runs they forked die with them)."""
    with _lock:
        while _servers:
            _servers.pop().close()
        for run in _runs:  # a run whose exit nobody read (killed and left): its connection is closed here
            run._reader.close()
            run._conn.close()


def live_runs() -> list[tuple[int, str]]:
    """(pid, command line) of every forked run still running: at the session's end, a run a test forgot."""
    return [(run.pid, "forked run: " + " ".join(map(str, run.args))) for run in _runs if run.poll() is None]


def stats() -> dict:
    """How many runs were forked from the server and how many fell back to a subprocess of their own (and why)."""
    return json.loads(json.dumps(_stats))


def _parse_argv(argv: list[str]) -> tuple[str, str, list[str], bool] | str:
    """(kind, target, args, unbuffered) of ``[python, (-u), -m MODULE | -c CODE | SCRIPT, ARGS...]`` (kind "module",
    "code" or "script"), or why it cannot be forked."""
    argv = [str(a) for a in argv]
    if not argv or os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
        return "not this interpreter"
    unbuffered, rest = False, argv[1:]
    while rest and rest[0] == "-u":
        unbuffered, rest = True, rest[1:]
    if len(rest) >= 2 and rest[0] in ("-m", "-c"):
        return ("module" if rest[0] == "-m" else "code"), rest[1], rest[2:], unbuffered
    if rest and not rest[0].startswith("-") and rest[0].endswith(".py"):
        return "script", rest[0], rest[1:], unbuffered
    return "interpreter flags other than -u, -m and -c"


def _fallback_reason(argv) -> str | None:
    if not enabled():
        return f"{ENABLE_ENV}=0"
    parsed = _parse_argv(argv)
    return parsed if isinstance(parsed, str) else None


class WarmProcess:
    """A ``subprocess.Popen`` look-alike for one forked run: ``pid``, ``poll``, ``wait``, ``communicate``,
    ``send_signal``/``terminate``/``kill``, ``returncode``, ``stdout``/``stderr`` (pipes when asked for)."""

    def __init__(self, server: _Server, argv, *, env=None, cwd=None, stdout=None, stderr=None, text=False,
                 start_new_session=False):
        self.args = list(argv)
        kind, target, args, unbuffered = _parse_argv(self.args)
        self.returncode: int | None = None
        self._text = text
        out_r, out_w = _stream(stdout, 1)
        if stderr == subprocess.STDOUT:
            err_r, err_w = None, os.dup(out_w)
        else:
            err_r, err_w = _stream(stderr, 2)
        stdin = os.open(os.devnull, os.O_RDONLY)
        request = {"kind": kind, "target": target, "args": args, "unbuffered": unbuffered, "new_session": start_new_session,
                   "cwd": str(Path(cwd or os.getcwd()).resolve()), "env": dict(env if env is not None else os.environ)}
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(server.socket_path)
        fds = [stdin, out_w, err_w]
        self._conn.sendmsg([(json.dumps(request) + "\n").encode()],
                           [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        for fd in fds:
            os.close(fd)
        self._reader = self._conn.makefile("r")
        self.pid = int(json.loads(self._reader.readline())["pid"])
        self.stdout = _open_reader(out_r, text)
        self.stderr = _open_reader(err_r, text)
        _stats["forked"] += 1
        _runs.append(self)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._read_exit()
        return self.returncode

    def _read_exit(self) -> None:
        line = self._reader.readline()
        self.returncode = int(json.loads(line)["exit"]) if line else -signal.SIGKILL  # the server died
        self._reader.close()
        self._conn.close()

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_exit()
        return self.returncode

    def communicate(self, timeout: float | None = None):
        """Read stdout/stderr to their end (the ones that are pipes), then wait for the exit."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = {stream: [] for stream in (self.stdout, self.stderr) if stream is not None}
        open_streams = list(chunks)
        while open_streams:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select(open_streams, [], [], left)[0]
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            for stream in ready:
                data = os.read(stream.fileno(), 1 << 16)
                if data:
                    chunks[stream].append(data)
                else:
                    open_streams.remove(stream)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out = [b"".join(chunks[s]) if s in chunks else None for s in (self.stdout, self.stderr)]
        for stream in chunks:
            stream.close()
        if self._text:
            out = [None if o is None else o.decode(errors="replace").replace("\r\n", "\n") for o in out]
        return out[0], out[1]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        if self.returncode is None:
            self.wait()


def _stream(target, fd: int) -> tuple[int | None, int]:
    """(read end or None, the descriptor the run writes to) for a Popen-style stdout/stderr argument."""
    if target == subprocess.PIPE:
        read_end, write_end = os.pipe()
        return read_end, write_end
    if target == subprocess.DEVNULL:
        return None, os.open(os.devnull, os.O_WRONLY)
    if target is None:
        return None, os.dup(fd)
    if isinstance(target, int):
        return None, os.dup(target)
    return None, os.dup(target.fileno())


def _open_reader(fd: int | None, text: bool):
    if fd is None:
        return None
    return open(fd, "r" if text else "rb", closefd=True)


def popen(argv, *, fresh: bool = False, env=None, **kwargs):
    """``subprocess.Popen(argv, ...)``, forked from the preloaded interpreter where it can be (see the module's
    docstring); ``fresh=True`` always starts a process of its own."""
    env = dict(env if env is not None else os.environ)
    reason = "fresh=True" if fresh else _fallback_reason(argv)
    server = None if reason else _server_for(env)
    if server is None and reason is None:
        reason = f"already {MAX_SERVERS} preloaded interpreters, for other environments"
    if server is not None and set(kwargs) <= {"cwd", "stdout", "stderr", "text", "start_new_session"}:
        return WarmProcess(server, argv, env=env, **kwargs)
    reason = reason or "arguments other than cwd, stdout, stderr, text, start_new_session"
    _stats["fallback"] += 1
    _stats["fallback_reasons"][reason] = _stats["fallback_reasons"].get(reason, 0) + 1
    return subprocess.Popen(argv, env=env, **kwargs)


def run(argv, *, fresh: bool = False, env=None, cwd=None, timeout: float | None = None, capture_output: bool = False,
        text: bool = False, check: bool = False, stdout=None, stderr=None) -> subprocess.CompletedProcess:
    """``subprocess.run`` for a ``python -m MODULE ...`` command line, forked from the preloaded interpreter."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    proc = popen(argv, fresh=fresh, env=env, cwd=cwd, stdout=stdout, stderr=stderr, text=text)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result


if __name__ == "__main__":
    serve(sys.argv[1])
