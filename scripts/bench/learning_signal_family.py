"""The CPU demo's learning signal for another model family: warm-start its tiny preset, run the demo config, print
the bench pass rate of the first and last 10 steps (plain GRPO, and the same run with the reward's sign flipped
as the control).

    python scripts/bench/learning_signal_family.py --family qwen3_vl --work_dir /tmp/ls_qwen3vl

Same setup as docs/learning_signal.md (configs/tiny-cpu.yaml: the simple_lines page, 16 samples a step, 64 tokens,
lr 2e-4, seed 0); the tokenizer is trained on the sample's transcriptions as the demo's is. ``--sft_steps`` sets
the warm start (the Qwen2.5-VL demo uses 40); a warm start that already passes every test leaves GRPO no signal.
Prints one JSON line per arm and a summary table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench_data_sample"


def _pass_rates(model: Path, out: Path, steps: int, extra: list[str]) -> list[float]:
    from olmocr_rl import grpo_train

    code = grpo_train.main(["--config", str(REPO / "configs" / "tiny-cpu.yaml"), "--train_bench_data_folder", str(BENCH),
                            "--model_name", str(model), "--output_dir", str(out), "--max_steps", str(steps),
                            "--save_steps", "100000", *extra])
    if code != 0:
        raise SystemExit(f"training failed with exit code {code}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["bench_reward/overall_pass_rate"] for r in records if "bench_reward/overall_pass_rate" in r]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="qwen3_vl", help="model_type of the tiny preset (default qwen3_vl)")
    parser.add_argument("--sft_steps", type=int, default=40, help="warm-start steps on simple_lines (default 40)")
    parser.add_argument("--steps", type=int, default=60, help="GRPO steps per arm (default 60, as the demo)")
    parser.add_argument("--arms", default="plain,flipped", help="comma list of plain, flipped, olmorl")
    parser.add_argument("--work_dir", required=True, help="where the model and the runs go")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from olmocr_rl.model.warm_start import warm_start
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    work = Path(args.work_dir)
    model = work / f"tiny-sft-{args.family}-{args.sft_steps}"
    if not (model / "config.json").is_file():
        build_tiny_model(model, seed=0, family=args.family, extra_corpus=read_corpus_dir(BENCH / "claude_original"))
        warm_start(model, BENCH, seed=0, steps=args.sft_steps, pages="simple_lines")
    extras = {"plain": [], "flipped": ["--reward_bench", "-1"], "olmorl": ["--olmorl"]}
    rows = []
    for arm in args.arms.split(","):
        start = time.time()
        rates = _pass_rates(model, work / f"run-{args.family}-{args.sft_steps}-{arm}", args.steps, extras[arm])
        window = min(10, len(rates))  # 10, as the demo; fewer in a run shorter than 10 steps (a smoke run)
        first, last = sum(rates[:window]) / window, sum(rates[-window:]) / window
        rows.append({"family": args.family, "arm": arm, "sft_steps": args.sft_steps, "steps": len(rates),
                     "first10": round(first, 3), "last10": round(last, 3), "gain": round(last - first, 3),
                     "seconds": round(time.time() - start)})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'arm':>8} {'first 10':>9} {'last 10':>8} {'gain':>7} {'s':>6}")
    for row in rows:
        print(f"{row['arm']:>8} {row['first10']:>9.3f} {row['last10']:>8.3f} {row['gain']:>+7.3f} {row['seconds']:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
