"""Binary vs continuous bench reward on the CPU demo: 60 GRPO steps per arm and seed, the sign-flipped control.

    python scripts/bench/learning_signal_continuous.py --work_dir /tmp/ls_cont --seeds 0 1 2 --out results.jsonl
    python scripts/bench/learning_signal_continuous.py --work_dir /tmp/ls_cont --family qwen3_vl --sft_steps 30

Setup as docs/learning_signal.md (configs/tiny-cpu.yaml: the simple_lines page, 16 samples a step, 64 tokens,
lr 2e-4; the warm start: 40 supervised steps for Qwen2.5-VL, ``--sft_steps``). Arms (``--arms``):

- ``binary``: ``--reward_bench 1`` (the demo); ``continuous``: ``--reward_bench 0 --reward_bench_continuous 1``;
- ``both``: ``--reward_bench 1 --reward_bench_continuous 1``;
- ``flipped``: ``--reward_bench -1`` (every advantage negated: must not learn).

Recorded per run (one JSON line appended to ``--out`` as soon as the run ends): the *binary* bench pass rate of
the trained page (``bench_reward/overall_pass_rate``: the telemetry counts binary verdicts whatever the reward)
averaged over the first and the last 10 steps; the zero-signal groups (``bench_reward/frac_zero_signal_groups``,
of the first bench reward enabled, and TRL's ``frac_reward_zero_std`` of the weighted total); and, with
``--eval_samples K``, ``python -m olmocr_rl.evaluate``'s overall pass rate (K samples at temperature 1.0,
majority of samples) of the final model on the trained page and on the held-out pages (``--exclude_pages``),
plus the warm start's once. ``--summary FILE`` prints the per-arm means and spreads of an existing results file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
BENCH = REPO / "bench_data_sample"
PAGE = "simple_lines"
ARMS = {
    "binary": ["--reward_bench", "1"],
    "continuous": ["--reward_bench", "0", "--reward_bench_continuous", "1"],
    "both": ["--reward_bench", "1", "--reward_bench_continuous", "1"],
    "flipped": ["--reward_bench", "-1"],
}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def train(model: Path, out: Path, steps: int, seed: int, extra: list[str]) -> dict:
    """One GRPO run; the per-step metrics it logged, reduced to first/last 10 steps."""
    from olmocr_rl import grpo_train

    code = grpo_train.main(["--config", str(REPO / "configs" / "tiny-cpu.yaml"), "--train_bench_data_folder", str(BENCH),
                            "--model_name", str(model), "--output_dir", str(out), "--max_steps", str(steps),
                            "--save_steps", "100000", "--seed", str(seed), *extra])
    if code != 0:
        raise SystemExit(f"training failed with exit code {code}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["bench_reward/overall_pass_rate"] for r in records if "bench_reward/overall_pass_rate" in r]
    zero = [r["bench_reward/frac_zero_signal_groups"] for r in records if "bench_reward/frac_zero_signal_groups" in r]
    zero_total = [r["frac_reward_zero_std"] for r in records if "frac_reward_zero_std" in r]
    return {"steps": len(rates), "first10": _mean(rates[:10]), "last10": _mean(rates[-10:]),
            "zero_signal": _mean(zero), "zero_std_total": _mean(zero_total)}


def evaluate(model: Path, outputs: Path, samples: int, held_out: bool) -> float:
    """``python -m olmocr_rl.evaluate``'s overall pass rate on the trained page or the held-out pages."""
    from olmocr_rl.evaluate import evaluate as run_evaluate

    selection = {"exclude_pages": PAGE} if held_out else {"pages": PAGE}
    result = run_evaluate(str(model), str(BENCH), outputs=str(outputs), num_samples=samples, temperature=1.0,
                          max_new_tokens=64, device="cpu", overwrite=True, **selection)  # a retrained model
    return result["overall_pass_rate"]


def summary(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    keys = ("first10", "last10", "gain", "trained_eval", "held_out_eval", "zero_signal", "zero_std_total")
    for family in sorted({r["family"] for r in rows}):
        print(f"\n{family}: mean ± std over seeds (n)")
        print(f"{'arm':>11} " + " ".join(f"{k:>15}" for k in keys))
        for arm in [a for a in ARMS if any(r["arm"] == a and r["family"] == family for r in rows)] + ["warm_start"]:
            chosen = [r for r in rows if r["family"] == family and r["arm"] == arm]
            if not chosen:
                continue
            cells = []
            for key in keys:
                values = [r[key] for r in chosen if r.get(key) is not None]
                spread = statistics.stdev(values) if len(values) > 1 else 0.0
                cells.append(f"{_mean(values):.3f}±{spread:.3f}({len(values)})" if values else "-")
            print(f"{arm:>11} " + " ".join(f"{c:>15}" for c in cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="qwen2_5_vl")
    parser.add_argument("--sft_steps", type=int, default=40)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--arms", default="binary,continuous,both,flipped")
    parser.add_argument("--eval_samples", type=int, default=0, help="evaluate each final model (0: skip)")
    parser.add_argument("--work_dir", type=Path)
    parser.add_argument("--out", type=Path, help="results file (JSON lines, appended)")
    parser.add_argument("--summary", type=Path, help="only print the summary of this results file")
    args = parser.parse_args(argv)
    if args.summary:
        summary(args.summary)
        return 0
    if args.work_dir is None or args.out is None:
        parser.error("--work_dir and --out are required for a run")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from olmocr_rl.model.warm_start import warm_start
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    model = args.work_dir / f"tiny-sft-{args.family}-{args.sft_steps}"
    if not (model / "config.json").is_file():
        build_tiny_model(model, seed=0, family=args.family, extra_corpus=read_corpus_dir(BENCH / "claude_original"))
        warm_start(model, BENCH, seed=0, steps=args.sft_steps, pages=PAGE)
    base = {"family": args.family, "sft_steps": args.sft_steps}
    if args.eval_samples:
        row = {**base, "arm": "warm_start", "seed": None,
               "trained_eval": evaluate(model, args.work_dir / "eval-warm-trained", args.eval_samples, False),
               "held_out_eval": evaluate(model, args.work_dir / "eval-warm-held", args.eval_samples, True)}
        with args.out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
    for seed in args.seeds:
        for arm in args.arms.split(","):
            start = time.time()
            run = args.work_dir / f"run-{args.family}-{arm}-seed{seed}"
            row = {**base, "arm": arm, "seed": seed, **train(model, run, args.steps, seed, ARMS[arm])}
            row["gain"] = row["last10"] - row["first10"]
            if args.eval_samples:
                row["trained_eval"] = evaluate(run, run / "eval-trained", args.eval_samples, False)
                row["held_out_eval"] = evaluate(run, run / "eval-held", args.eval_samples, True)
            row["seconds"] = round(time.time() - start)
            with args.out.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
