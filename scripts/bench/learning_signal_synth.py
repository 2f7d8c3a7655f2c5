"""The learning-signal row for a folder made by ``python -m olmocr_rl.synth``: the CPU demo's model, warm-started
briefly on the folder's page, trained with the demo's config on that folder; the bench pass rate of the first and
last 10 steps, and the same run with the reward's sign flipped as the control.

    python scripts/bench/learning_signal_synth.py --work_dir /tmp/ls_synth [--steps 50] [--sft_steps 40]

The page is tests/fixtures/synth/learning/memo.html (short enough for the demo's 64-token answers). The tiny
model's tokenizer is trained on the folder's reference, as the demo's is on bench_data_sample's. Needs the browser
set-up (bash scripts/setup_browser.sh). Prints one JSON line per arm and a summary table (docs/synth.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
PAGES = REPO / "tests" / "fixtures" / "synth" / "learning"


def _pass_rates(bench: Path, model: Path, out: Path, steps: int, extra: list[str]) -> list[float]:
    from olmocr_rl import grpo_train

    code = grpo_train.main(["--config", str(REPO / "configs" / "tiny-cpu.yaml"), "--train_bench_data_folder",
                            str(bench), "--pages", "memo", "--model_name", str(model), "--output_dir", str(out),
                            "--max_steps", str(steps), "--save_steps", "100000", *extra])
    if code != 0:
        raise SystemExit(f"training failed with exit code {code}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["bench_reward/overall_pass_rate"] for r in records if "bench_reward/overall_pass_rate" in r]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sft_steps", type=int, default=40, help="warm-start steps on the page (default 40)")
    parser.add_argument("--steps", type=int, default=50, help="GRPO steps per arm (default 50)")
    parser.add_argument("--arms", default="plain,flipped", help="comma list of plain, flipped")
    parser.add_argument("--work_dir", required=True, help="where the folder, the model and the runs go")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from olmocr_rl.model.warm_start import warm_start
    from olmocr_rl.synth import cli
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    work = Path(args.work_dir)
    bench = work / "bench"
    if not (bench / "synth_manifest.json").is_file():
        if cli.main(["--html", str(PAGES), "--out", str(bench)]) != 0:
            raise SystemExit("synth failed")
    model = work / f"tiny-sft-{args.sft_steps}"
    if not (model / "config.json").is_file():
        build_tiny_model(model, seed=0, extra_corpus=read_corpus_dir(bench / "claude_original"))
        warm_start(model, bench, seed=0, steps=args.sft_steps, pages="memo")
    extras = {"plain": [], "flipped": ["--reward_bench", "-1"]}
    rows = []
    for arm in args.arms.split(","):
        start = time.time()
        rates = _pass_rates(bench, model, work / f"run-{args.sft_steps}-{arm}", args.steps, extras[arm])
        first, last = sum(rates[:10]) / len(rates[:10]), sum(rates[-10:]) / len(rates[-10:])
        row = {"arm": arm, "steps": len(rates), "first10": round(first, 3), "last10": round(last, 3),
               "gain": round(last - first, 3), "seconds": round(time.time() - start, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'arm':<8} {'first 10':>9} {'last 10':>8} {'gain':>7}")
    for row in rows:
        print(f"{row['arm']:<8} {row['first10']:>9.3f} {row['last10']:>8.3f} {row['gain']:>+7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
