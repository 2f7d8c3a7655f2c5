"""Benchmark: server mode's two phases on CPU, the vLLM server on one core and the trainer on another, with and
without ``--async_generation``.

    .venv-vllm/bin/python scripts/bench/bench_server_phases.py [--lengths 64 256] [--steps 6] [--rounds 1]
        [--arms sync async] [--model DIR] [--server-port PORT] [--server-core 0] [--trainer-core 1]
    .venv-vllm/bin/python scripts/bench/bench_server_phases.py --learning-signal [--steps 60] [--model DIR]

The layout of olmOCR 2's recipe (one GPU serving vLLM, the others training) shrunk to two cores: ``trl vllm-serve``
with the gloo weight push (olmocr_rl/trainer/gloo_push.py) pinned to ``--server-core`` (``taskset``, and vLLM's own
OpenMP binding), the training CLI on the demo's config (configs/tiny-cpu.yaml) pinned to ``--trainer-core``, one
server for every run. Completions run to the length (``ignore_eos``). The arms (``sync``: generation and training
take turns; ``async``: ``--async_generation``) alternate, ``--rounds`` times per length, on the same server. Prints,
per step, ``timing/step_s``, ``timing/generate_s`` (the weight push and the trainer's wait for the server) and
``timing/train_s``, and for the async arm the batch's staleness, whether it was prefetched, the server's own time
for it and the share of sequences the importance-sampling correction masked; then per length and arm the medians
over steps 2.. and the async/sync step-time ratio (the sync arm also gives the best an overlap could do,
max(generate, train) / (generate + train)).

``--learning-signal`` runs the demo's own config (64 tokens, EOS allowed) for ``--steps`` steps per arm: sync,
async, and async with the reward's sign flipped (``--reward_bench -1``, the control), and prints the bench pass
rate of the first and the last 10 steps of each (docs/learning_signal.md).
Without ``--model`` the lane's warm-started tiny model is built in a temporary folder (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from olmocr_rl.trainer.gloo_push import server_flags  # noqa: E402

KEYS = ("timing/step_s", "timing/generate_s", "timing/train_s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _warm_model(folder: Path) -> Path:
    from olmocr_rl.model.warm_start import warm_start
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    bench = REPO / "bench_data_sample"
    build_tiny_model(folder, seed=0, extra_corpus=read_corpus_dir(bench / "claude_original"))
    warm_start(folder, bench, seed=0, steps=40, pages="simple_lines")
    return folder


def _start_server(model: Path, port: int, core: int, env: dict, log: Path) -> subprocess.Popen:
    trl = Path(sys.executable).with_name("trl")
    command = ["taskset", "-c", str(core), str(trl), "vllm-serve", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max_model_len", "4096", "--gpu_memory_utilization", "0.2",
               *server_flags()]
    process = subprocess.Popen(command, env={**env, "VLLM_CPU_OMP_THREADS_BIND": str(core)}, stdout=log.open("w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"error: trl vllm-serve exited {process.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return process
        except OSError:
            time.sleep(2)
    sys.exit(f"error: trl vllm-serve did not answer /health within 600 s; see {log}")


def _run(model: Path, port: int, out: Path, steps: int, core: int, env: dict, extra: list[str]) -> list[dict]:
    command = ["taskset", "-c", str(core), sys.executable, "-m", "olmocr_rl.grpo_train",
               "--config", str(REPO / "configs" / "tiny-cpu.yaml"), "--model_name", str(model), "--output_dir", str(out),
               "--vllm_mode", "server", "--vllm_server_host", "127.0.0.1", "--vllm_server_port", str(port),
               "--max_steps", str(steps), "--save_steps", "100000", *extra]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: the training run {' '.join(extra)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if KEYS[0] in row]


ARMS = {"sync": [], "async": ["--async_generation"]}
ASYNC_KEYS = ("async/staleness", "async/prefetched", "async/server_generate_s", "sampling/is_masked_sequence_fraction")


def _print_step(label: str, row: dict) -> None:
    line = f"{label} step {row['step']}: " + "  ".join(f"{k[7:]} {row[k]:.2f}" for k in KEYS)
    extra = [f"{k.split('/')[1]} {row[k]:.2f}" for k in ASYNC_KEYS if k in row]
    print(line + ("  |  " + "  ".join(extra) if extra else ""), flush=True)


def phases(args, model: Path, port: int, env: dict, work: Path) -> list[str]:
    summary = []
    for length in args.lengths:
        medians: dict[str, list[dict]] = {arm: [] for arm in args.arms}
        for round_ in range(args.rounds):
            for arm in args.arms:
                out = work / f"out_{length}_{arm}_{round_}"
                rows = _run(model, port, out, args.steps, args.trainer_core, env,
                            ["--max_completion_length", str(length), "--generation_kwargs",
                             json.dumps({"ignore_eos": True}), *ARMS[arm]])
                for row in rows:
                    _print_step(f"length {length} {arm} round {round_}", row)
                medians[arm].append({k: statistics.median(row[k] for row in rows[1:]) for k in KEYS})
        for arm, runs in medians.items():
            med = {k: statistics.median(run[k] for run in runs) for k in KEYS}
            generate, train = med["timing/generate_s"], med["timing/train_s"]
            line = (f"length {length} {arm}: median step {med['timing/step_s']:.2f} s = generate {generate:.2f} s + "
                    f"train {train:.2f} s")
            if arm == "sync":
                line += f"; an overlap could give {max(generate, train) / (generate + train):.2f}x"
            summary.append(line)
        if {"sync", "async"} <= set(medians):
            step = {arm: statistics.median(run["timing/step_s"] for run in medians[arm]) for arm in ("sync", "async")}
            summary.append(f"length {length}: async/sync step time {step['async'] / step['sync']:.2f}x")
    return summary


def learning_signal(args, model: Path, port: int, env: dict, work: Path) -> list[str]:
    arms = {"sync": [], "async": ["--async_generation"],
            "async, reward sign flipped": ["--async_generation", "--reward_bench", "-1"]}
    summary = []
    for label, extra in arms.items():
        started = time.time()
        out = work / f"signal_{len(summary)}"
        _run(model, port, out, args.steps, args.trainer_core, env, extra)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        rates = [r["bench_reward/overall_pass_rate"] for r in rows if "bench_reward/overall_pass_rate" in r]
        first, last = sum(rates[:10]) / len(rates[:10]), sum(rates[-10:]) / len(rates[-10:])
        line = (f"{label}: pass rate first 10 steps {first:.3f}, last 10 steps {last:.3f}, change {last - first:+.3f} "
                f"({len(rates)} steps, {time.time() - started:.0f} s")
        steps = [r for r in rows if KEYS[0] in r]
        for key in ("timing/step_s", *ASYNC_KEYS):
            values = [r[key] for r in steps[1:] if key in r]
            if values:
                line += f"; {key.split('/')[1]} median {statistics.median(values):.2f}, max {max(values):.2f}"
        summary.append(line + ")")
        print(summary[-1], flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 6; 60 with --learning-signal)")
    parser.add_argument("--rounds", type=int, default=1, help="times each arm runs per length, alternating")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--learning-signal", action="store_true")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--server-port", type=int, help="use the `trl vllm-serve` already on this loopback port "
                        "(started with the gloo flags on --model) instead of starting one")
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--trainer-core", type=int, default=1)
    args = parser.parse_args(argv)
    args.steps = args.steps or (60 if args.learning_signal else 6)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline",
           "TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": "2"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = args.model or _warm_model(work / "tiny-sft")
        port = args.server_port or _free_port()
        server = None if args.server_port else _start_server(model, port, args.server_core, env, work / "server.log")
        try:
            summary = (learning_signal if args.learning_signal else phases)(args, model, port, env, work)
        finally:
            if server is not None:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(timeout=60)
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
