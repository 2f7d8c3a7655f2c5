"""``python -m olmocr_rl.evaluate --backend vllm`` stopped by SIGTERM, SIGINT or SIGKILL, as real processes: the
engine's processes die with the command (none is left seconds later), SIGTERM and SIGINT print one line and keep
the pages done, and the same command then continues to the uninterrupted run's result with JSON alone on stdout.

The engine here is a stand-in with vLLM's process shape -- an engine-core process forked with multiprocessing and a
worker started as a program -- whose ``close`` leaves them running, as an engine that hangs or a SIGKILL would; the
evaluation's watcher (olmocr_rl.evaluation.lifetime) must stop them. The real engine is the vLLM lane's
(tests/vllm_lane/test_vllm_evaluate.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_python

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "bench_data_sample"
PAGES = r"^(counting|simple_lines|table|paragraphs)"  # 5 pages

ENGINE = r'''
import importlib.machinery, multiprocessing, subprocess, sys, time, types
sys.modules["vllm"] = types.ModuleType("vllm")  # "installed", for --backend vllm's check
sys.modules["vllm"].__spec__ = importlib.machinery.ModuleSpec("vllm", None)
from olmocr_rl.evaluation import setup
from olmocr_rl.evaluation.common import Completion


def forever():
    time.sleep(600)


class StandInEngine:
    name = "vllm"

    def __init__(self, model, **settings):
        self.core = multiprocessing.get_context("fork").Process(target=forever)
        self.core.start()
        self.worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"ENGINE {self.core.pid} {self.worker.pid} kv={settings['kv_cache_bytes']}", file=sys.stderr, flush=True)
        print("a line an engine prints on stdout", flush=True)

    def generate(self, requests, done=None):
        out = []
        for i, request in enumerate(requests):
            time.sleep(0.3)
            out.append([Completion(f"page {request.key} seed {request.seed}", 4, "stop")] * request.n)
            if done:
                done(i, out[-1])
        return out

    def close(self):
        pass  # leaves its processes to the evaluation's watcher


setup.VLLMBackend = StandInEngine
from olmocr_rl.evaluate import main
sys.exit(main(sys.argv[1:]))
'''


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def start(model: Path, out: Path) -> subprocess.Popen:
    return warm_python.popen([sys.executable, "-c", ENGINE, "--model", str(model), "--bench", str(SAMPLE),
                              "--outputs", str(out), "--pages", PAGES, "--backend", "vllm", "--json",
                              "--bootstrap", "50"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(model: Path, out: Path) -> tuple[dict, str]:
    process = start(model, out)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return json.loads(stdout), stderr  # JSON alone on stdout: the engine's own line went to stderr


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory) -> dict:
    result, stderr = finish(tiny_model_dir, tmp_path_factory.mktemp("whole") / "out")
    assert "a line an engine prints on stdout" in stderr
    return result


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_the_engine_dies_with_the_command_and_the_run_continues(tiny_model_dir, tmp_path, uninterrupted, sig):
    out = tmp_path / "out"
    process = start(tiny_model_dir, out)
    engine, lines = None, []
    for line in process.stderr:
        lines.append(line.rstrip())
        if line.startswith("ENGINE "):
            engine = [int(pid) for pid in line.split()[1:3]]
            assert int(line.split("kv=")[1]) > 0  # the CPU KV cache sized by the evaluation, not left to vLLM
        if " 2/5 pages" in line:
            break
    assert engine and all(map(alive, engine)), "\n".join(lines)
    process.send_signal(sig)
    stdout, rest = process.communicate(timeout=60)
    assert process.returncode == (-9 if sig == signal.SIGKILL else 128 + sig), rest
    deadline = time.monotonic() + 20  # the watcher: SIGTERM, then SIGKILL after 5 s
    while any(map(alive, engine)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(alive, engine)), f"left running: {[pid for pid in engine if alive(pid)]}"
    if sig != signal.SIGKILL:
        said = [line for line in rest.splitlines() if line.strip()]
        assert stdout == "" and len(said) == 1, rest
        assert said[0].startswith(f"python -m olmocr_rl.evaluate: stopped by {sig.name}: ")
        assert f"of 5 pages done and kept in {out}; the same command continues with the others" in said[0]
    done = len((out / "pages.jsonl").read_text().splitlines())
    assert 2 <= done < 5
    result, _ = finish(tiny_model_dir, out)
    assert result["resumed_pages"] == done
    assert result["tests"] == uninterrupted["tests"] and result["leaderboard"] == uninterrupted["leaderboard"]


def test_the_watcher_stops_what_a_killed_process_started(tmp_path):
    """The mechanism alone: a process starts a child under ChildGuard and is SIGKILLed; the child goes."""
    code = ("import subprocess, sys, time\n"
            "from olmocr_rl.evaluation.lifetime import ChildGuard\n"
            "with ChildGuard():\n"
            "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "    print(child.pid, flush=True)\n"
            "    time.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    child = int(process.stdout.readline())
    time.sleep(1.0)  # the watcher notes its parent's children every 0.5 s
    assert alive(child)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 20
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(child)
