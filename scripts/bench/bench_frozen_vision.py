"""GRPO step time with the vision tower trained, frozen, and frozen with its per-step feature cache; one run.

    python scripts/bench/bench_frozen_vision.py                  # CPU-sized tower, 672 px page, G = 8, 2 micro-batches
    python scripts/bench/bench_frozen_vision.py --depth 32 --hidden 1280 --heads 16 --side 1288   # the 3B tower (GPU)

Builds the tiny model with a larger vision tower (random weights; the language model stays tiny, so the
tower's share of a step is what changes), then runs the training CLI for --steps steps per arm, the arms
one after another and the whole sequence --rounds times: the tower trained (the baseline), frozen without
the cache (--freeze_vision_tower --no-cache_vision_features: no tower gradients), frozen with the cache
(--freeze_vision_tower: the tower runs once per step, in generation's prefill; old log-probs and every
micro-batch reuse its features) and LoRA (--use_peft, which freezes the tower too). HF generation,
fixed-length completions. Prints the median seconds per step (``timing/step_s``) and per training phase
(``timing/train_s``: forward, backward, optimizer) after the first step, and their ratios to the baseline.
The cache is exact: tests/unit/test_frozen_vision.py compares logits and gradients bit for bit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARMS = {
    "tower trained (baseline)": [],
    "tower frozen, no cache": ["--freeze_vision_tower", "--no-cache_vision_features"],
    "tower frozen + feature cache": ["--freeze_vision_tower"],
    "LoRA (tower frozen + cache)": ["--use_peft", "--learning_rate", "2e-3"],
}


def build_model(out: Path, depth: int, hidden: int, heads: int, side: int) -> Path:
    """The tiny model with a vision tower of the given size and a processor that keeps ``side`` px pages whole."""
    import torch
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    from olmocr_rl.tiny_model import build_tiny_model

    build_tiny_model(out, seed=0)
    config = AutoConfig.from_pretrained(out)
    vision = config.vision_config
    vision.depth, vision.hidden_size, vision.num_heads, vision.intermediate_size = depth, hidden, heads, 2 * hidden
    vision.fullatt_block_indexes = [i for i in range(depth) if i % 4 == 3] or [depth - 1]
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(out)
    processor_file = out / "processor_config.json"
    processor = json.loads(processor_file.read_text())
    for part in ("image_processor", "video_processor"):
        if part in processor:
            processor[part]["size"] = {"shortest_edge": 3136, "longest_edge": (side // 28 + 1) ** 2 * 28 * 28}
    processor_file.write_text(json.dumps(processor, indent=2))
    return out


def run_arm(model: Path, out: Path, extra: list[str], args) -> tuple[list[float], list[float]]:
    from olmocr_rl import grpo_train

    G = args.num_generations
    code = grpo_train.main([
        "--train_bench_data_folder", str(REPO / "bench_data_sample"), "--pages", "simple_lines",
        "--model_name", str(model), "--output_dir", str(out), "--reward_bench", "--vllm_mode", "none",
        "--num_generations", str(G), "--per_device_train_batch_size", str(G // args.micro_batches),
        "--gradient_accumulation_steps", str(args.micro_batches), "--max_steps", str(args.steps),
        "--max_completion_length", str(args.completion), "--generation_kwargs",
        json.dumps({"min_new_tokens": args.completion}), "--target_longest_image_dim", str(args.side),
        "--learning_rate", "2e-4", "--warmup_steps", "0", "--logging_steps", "1", "--save_steps", "100000",
        "--no-gradient_checkpointing", "--no-log_completions", "--report_to", "none", "--seed", "0", *extra,
    ])
    if code != 0:
        raise SystemExit(f"arm {extra} failed with exit code {code}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if "timing/step_s" in r][1:]  # the first step warms up
    return [r["timing/step_s"] for r in timed], [r["timing/train_s"] for r in timed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=192)
    parser.add_argument("--heads", type=int, default=3)
    parser.add_argument("--side", type=int, default=672, help="page's longest side in px")
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--micro_batches", type=int, default=2, help="gradient accumulation steps per step")
    parser.add_argument("--completion", type=int, default=16, help="tokens per completion (fixed)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench_frozen_vision_"))
    model = build_model(work / "model", args.depth, args.hidden, args.heads, args.side)
    step_s = {arm: [] for arm in ARMS}
    train_s = {arm: [] for arm in ARMS}
    for round_ in range(args.rounds):
        for index, (arm, extra) in enumerate(ARMS.items()):
            steps, trains = run_arm(model, work / f"run-{round_}-{index}", extra, args)
            step_s[arm] += steps
            train_s[arm] += trains
    print(f"[bench_frozen_vision] CPU, vision tower depth {args.depth} hidden {args.hidden}, {args.side} px page, "
          f"G = {args.num_generations} in {args.micro_batches} micro-batches, {args.completion}-token completions, "
          f"median of {args.rounds} x {args.steps - 1} steps")
    base_step, base_train = statistics.median(step_s["tower trained (baseline)"]), statistics.median(
        train_s["tower trained (baseline)"])
    print(f"  {'arm':32s} {'step s':>8s} {'ratio':>6s} {'train s':>8s} {'ratio':>6s}")
    for arm in ARMS:
        step, train = statistics.median(step_s[arm]), statistics.median(train_s[arm])
        print(f"  {arm:32s} {step:8.3f} {step / base_step:6.2f} {train:8.3f} {train / base_train:6.2f}")


if __name__ == "__main__":
    main()
