"""``python -m olmocr_rl.evaluate --backend vllm`` with vLLM's real engine (its own processes, as a user runs it):
SIGKILLed after its first page, no process it started is left seconds later (the engine core and its worker
included), the page done is kept, and the KV cache it asked for on this CPU is what the pages need, not 90 % of the
machine. One engine start (about 30 s here): SIGTERM and SIGINT, the resume to the uninterrupted result and the JSON
alone on stdout are tested with an engine stand-in of vLLM's process shape
(tests/integration/test_evaluate_signals.py)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import warm_python
from vllm_lane.lane import BENCH, REPO, lane_env

PAGES = r"^(counting|table)"  # 3 pages


def tree(root: int) -> set[int]:
    """``root``'s descendants now (Linux /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_killed_vllm_evaluation_leaves_no_engine_process_and_keeps_its_pages(sft_model_dir, tmp_path):
    env = lane_env(tmp_path)
    env.pop("VLLM_CPU_KVCACHE_SPACE")  # the evaluation sizes the cache itself
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "olmocr_rl.evaluate", "--model", str(sft_model_dir), "--bench", str(BENCH),
            "--outputs", str(out), "--pages", PAGES, "--backend", "vllm", "--vllm_enforce_eager",
            "--vllm_max_model_len", "4096", "--max_new_tokens", "48",
            "--json"]
    began = time.monotonic()
    process = warm_python.popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, started = [], set()
    for line in process.stderr:
        lines.append(line)
        if " 1/3 pages" in line:
            started = tree(process.pid)
            process.send_signal(signal.SIGKILL)
            break
    killed = time.monotonic()
    process.communicate(timeout=120)
    assert process.returncode == -9, "".join(lines[-30:])
    assert len(started) >= 2, started  # the engine core and its worker (and the watcher)
    deadline = time.monotonic() + 20
    while any(map(alive, started)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(alive, started)), [Path(f"/proc/{p}/cmdline").read_bytes() for p in started if alive(p)]
    gone = time.monotonic()
    kv = [line for line in lines if "vLLM KV cache on CPU: " in line]
    assert kv and float(re.search(r"CPU: ([\d.]+) GiB", kv[0]).group(1)) < 1.0, kv

    done = [json.loads(line)["page"] for line in (out / "pages.jsonl").read_text().splitlines()]
    assert done and (out / f"{done[0].split('.pdf')[0]}_pg1_repeat1.md").is_file()  # the page done is kept
    print(f"vLLM evaluation killed after {len(done)} page(s) ({killed - began:.0f} s in), its processes gone "
          f"{gone - killed:.1f} s later; {kv[0]}")
