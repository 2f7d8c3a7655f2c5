"""Shared fixtures: the tiny local models (Qwen2.5-VL and the other families, built once per session), the
release-layout Qwen3-VL folders, and sample-data paths; the session's last check: no olmocr_rl process the
suite started is left running (an orphaned reward worker after a SIGKILL test, a trainer a test forgot); and the
session's reaper (tests/reaper.py), which stops every process the session started once pytest is gone, even when
pytest itself is killed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

# Nothing in the test suite may reach a model hub or W&B's servers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Every process the suite starts inherits this mark (a test's subprocess gets os.environ): how the last check
# tells this session's processes from those of other sessions on the machine.
SESSION_MARK = "OLMOCR_RL_TEST_SESSION"
if os.environ.get("PYTEST_XDIST_WORKER"):
    # A pytest-xdist worker (the fast lane's `-n 2`) is a session of its own: its own mark, so that its reaper,
    # run when it ends, stops what it started and never the other worker (whose environment holds the mark the
    # controlling pytest handed both).
    os.environ[SESSION_MARK] = f"{os.getpid()}-{time.time_ns()}"
else:
    os.environ.setdefault(SESSION_MARK, f"{os.getpid()}-{time.time_ns()}")

REPO_ROOT = Path(__file__).resolve().parents[1]
_reaper = None


def pytest_configure(config):
    """Start the session's reaper before any test starts a process."""
    global _reaper
    import reaper

    _reaper = reaper.start(SESSION_MARK)


def pytest_collection_finish(session):
    """Everything imported so far (torch, transformers, TRL: millions of objects) moved out of the garbage
    collector's sight: transformers' Trainer runs a full collection at each train() (accelerate's free_memory),
    0.5 s a call with them in sight, and the suite trains a few dozen times in-process."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_terminal_summary(terminalreporter):
    """How the session's command-line runs started: forked from the preloaded interpreter, or as processes of their
    own (and why)."""
    import warm_python

    stats = warm_python.stats()
    if stats["forked"] or stats["fallback"]:
        terminalreporter.write_line(
            f"warm_python: {stats['forked']} runs forked from {stats['servers_started']} preloaded interpreter(s), "
            f"{stats['fallback']} started as processes of their own {stats['fallback_reasons']}")


def pytest_unconfigure(config):
    import reaper
    import warm_python

    warm_python.shutdown()
    reaper.stop(_reaper)
SHARED_SAMPLE = REPO_ROOT.parent / "shared" / "olmocr-bench-sample"
BENCH_DATA_SAMPLE = REPO_ROOT / "bench_data_sample"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A freshly built tiny Qwen2.5-VL folder (seed 0), shared by the whole session; do not modify it."""
    from olmocr_rl.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model") / "model", seed=0)


@pytest.fixture(scope="session")
def warm_tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny model (seed 0, tokenizer also trained on the sample's transcriptions) warm-started for 40
    steps on one page (simple_lines), as the learning-signal demo starts; shared, do not modify it."""
    from olmocr_rl.model.warm_start import warm_start
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    out = tmp_path_factory.mktemp("warm_tiny_model") / "tiny-sft"
    build_tiny_model(out, seed=0, extra_corpus=read_corpus_dir(BENCH_DATA_SAMPLE / "claude_original"))
    warm_start(out, BENCH_DATA_SAMPLE, seed=0, steps=40, pages="simple_lines")
    return out


def released_qwen25_vl_config(size: str):
    """The released Qwen2.5-VL-3B or -7B architecture as a config (no weights), for size and FLOP arithmetic."""
    from olmocr_rl.model.families import preset_config

    return preset_config("qwen2_5_vl", size)


@pytest.fixture(scope="session")
def tiny_family_dir(tmp_path_factory):
    """``tiny_family_dir(model_type)``: the tiny model of that family (tiny_model --family), built once per session
    (seed 0); shared, do not modify it."""
    from olmocr_rl.tiny_model import build_tiny_model

    built: dict[str, Path] = {}

    def build(model_type: str) -> Path:
        if model_type not in built:
            built[model_type] = build_tiny_model(tmp_path_factory.mktemp(f"tiny_{model_type}") / "model", seed=0,
                                                 family=model_type)
        return built[model_type]

    return build


@pytest.fixture(scope="session")
def release_folder(tmp_path_factory):
    """``release_folder("dense" | "moe")``: a random-weight Qwen3-VL / Qwen3-VL-MoE folder in the released layout,
    built without the project's builder (tests/release_layout.py), once per session; do not modify it."""
    from release_layout import write_release_folder

    built: dict[str, Path] = {}

    def build(kind: str) -> Path:
        if kind not in built:
            built[kind] = write_release_folder(tmp_path_factory.mktemp(f"release_{kind}") / "model", moe=kind == "moe")
        return built[kind]

    return build


@pytest.fixture(scope="session")
def shared_sample() -> Path:
    """../shared/olmocr-bench-sample, or a skip where it is absent (a user's fresh clone)."""
    if not SHARED_SAMPLE.is_dir():
        pytest.skip(f"real olmOCR-bench sample absent: {SHARED_SAMPLE} (it lives beside the repo in ../shared)")
    return SHARED_SAMPLE


def leftover_processes() -> list[tuple[int, str]]:
    """(pid, command line) of every running olmocr_rl process of this session that is not below pytest: what
    outlived the process that started it."""
    from fault_helpers import alive, descendants

    mark = f"{SESSION_MARK}={os.environ[SESSION_MARK]}".encode()
    ours = {os.getpid(), *descendants(os.getpid())}
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        pid = int(environ.parent.name)
        try:
            marked = mark in environ.read_bytes().split(b"\0")
            command = (environ.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or another user's
            continue
        if marked and pid not in ours and "olmocr_rl" in command and alive(pid):
            found.append((pid, command.strip()))
    return found


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when an olmocr_rl process it started still runs (each one is killed, and named)."""
    if not Path("/proc").is_dir():
        return
    import warm_python

    forgotten = warm_python.live_runs()  # forked from the preloaded interpreter, so below pytest: named here
    warm_python.shutdown()
    deadline = time.monotonic() + 10  # a process that is ending gets a moment
    left = leftover_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftover_processes()
    left += forgotten
    if not left:
        return
    for pid, _command in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} olmocr_rl process(es) of this session outlived the test that started them (killed now):"]
    lines += [f"  pid {pid}: {command[:200]}" for pid, command in left]
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
