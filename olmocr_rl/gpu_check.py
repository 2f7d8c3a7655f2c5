"""One-command check and measurement of the training path: ``bash scripts/gpu_check.sh``.

On a CUDA machine: builds a random-weight model with the real Qwen2.5-VL-3B architecture (the tiny
tokenizer's vocabulary; ``--family qwen3_vl --shape 8b`` or ``--family qwen3_vl_moe`` for Qwen3-VL's), then runs the training CLI for a few steps on ``bench_data_sample/`` in
bf16 — vLLM colocate when vLLM is importable, HF generation otherwise — with 1288 px pages, G = 8 and
a fixed completion length, once with plain GRPO, once with ``--olmorl`` and once with LoRA (``--use_peft``, its
defaults: r 16 on the language model, the frozen vision tower's features computed once per step). vLLM runs to
the length with ``ignore_eos`` (it only stops stopping: the sampled distribution and the log-probs TRL's
importance-sampling correction compares are the model's own); ``min_tokens`` would mask EOS out of the logits, and
vLLM's processed log-probs would then differ from the trainer's on every token (measured: sequence IS ratios 1e-4
to 0.02 at 256 tokens, a loss scaled to almost nothing). HF generation uses ``min_new_tokens`` (no correction
there). On CPU the same runs use the tiny model and tiny sizes (under a minute), so CI checks it.

Prints one table and writes it as JSON (``--out``): seconds per step split into generation / reward /
training (log-probs, forward/backward, optimizer), generated and trained tokens per second, a model
FLOP utilisation (below), peak memory, and the
reward time share. The first step of each run is warm-up and is left out of the means.

Three MFU columns: ``mfu_6n`` is the usual 6 · N · trained tokens estimate; ``mfu`` counts the step's
real training FLOPs (language model, vision tower on its patches, attention; ``olmocr_rl.model.flops``)
against the whole step's time, and ``train_mfu`` the same FLOPs against the training phase alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Dense bf16 peak FLOP/s by GPU name fragment (vendor datasheets; used for the MFU estimate).
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12}

#: The runs: plain GRPO, OlmoRL, plain GRPO training LoRA adapters (--use_peft).
ARMS = ("grpo", "olmorl", "lora")
COLUMNS = ["arm", "step_s", "generate_s", "reward_s", "train_s", "gen_tok_per_s", "train_tok_per_s",
           "mfu_6n", "mfu", "train_mfu", "peak_mem_gb", "reward_share"]


#: A nominal CPU peak for the CPU run's MFU column: 64 fp32 FLOP per cycle per core (2 AVX-512 FMA units)
#: at 3 GHz. Only there so the column exists; CPU numbers are a smoke test, not a measurement.
CPU_PEAK_FLOPS_PER_CORE = 64 * 3e9


def _peak_flops(device_name: str) -> float:
    if device_name == "cpu":
        return CPU_PEAK_FLOPS_PER_CORE * (os.cpu_count() or 1)
    for fragment, flops in PEAK_BF16_FLOPS.items():
        if fragment in device_name:
            return flops
    return 989e12


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def summarise(metrics_file: Path, *, params: int, peak_flops: float, peak_mem_gb: float, arm: str) -> dict:
    """Per-step means over the logged steps after the first (warm-up) one."""
    records = {}
    for line in metrics_file.read_text().splitlines():
        rec = json.loads(line)
        if "timing/step_s" in rec:
            records[rec["step"]] = rec
    steps = sorted(records)
    if len(steps) < 2:
        raise RuntimeError(f"{metrics_file}: fewer than 2 logged training steps; cannot measure")
    measured = [records[s] for s in steps[1:]]
    # TRL's num_tokens counts prompt + completion tokens seen so far; its per-step increase is what trained.
    trained = [records[b]["num_tokens"] - records[a]["num_tokens"] for a, b in zip(steps, steps[1:])
               if "num_tokens" in records[a] and "num_tokens" in records[b]]
    step_s = _mean(r["timing/step_s"] for r in measured)
    generate_s = _mean(r["timing/generate_s"] for r in measured)
    reward_s = _mean(r["timing/reward_s"] for r in measured)
    train_s = _mean(r["timing/train_s"] for r in measured)
    gen_tokens = _mean(r["timing/generated_tokens"] for r in measured)
    trained_tokens = _mean(trained)
    flops = _mean(r.get("timing/model_flops") for r in measured)  # true training FLOPs (olmocr_rl.model.flops)
    return {
        "arm": arm,
        "step_s": step_s,
        "generate_s": generate_s,
        "reward_s": reward_s,
        "train_s": train_s,
        "gen_tok_per_s": gen_tokens / generate_s if generate_s > 0 else float("nan"),
        "train_tok_per_s": trained_tokens / train_s if train_s > 0 else float("nan"),
        "mfu_6n": 6 * params * trained_tokens / step_s / peak_flops if step_s > 0 else float("nan"),
        "mfu": flops / step_s / peak_flops if step_s > 0 else float("nan"),
        "train_mfu": flops / train_s / peak_flops if train_s > 0 else float("nan"),
        "model_flops": flops,
        "peak_mem_gb": peak_mem_gb,
        "reward_share": reward_s / step_s if step_s > 0 else float("nan"),
        "steps_measured": len(measured),
        "mean_reward": _mean(r.get("reward") for r in measured),
    }


def format_table(rows: list[dict]) -> str:
    lines = ["  ".join(f"{c:>15}" for c in COLUMNS)]
    for row in rows:
        cells = []
        for c in COLUMNS:
            v = row[c]
            cells.append(f"{v:>15}" if isinstance(v, str) else f"{v:>15.4g}")
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _run_arm(cli: list[str]) -> tuple[int, float]:
    """Run the training CLI in this process; (exit code, peak GiB: GPU allocated, or process RSS on CPU)."""
    import torch

    from olmocr_rl import grpo_train

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    code = grpo_train.main(cli)
    if torch.cuda.is_available():
        return code, torch.cuda.max_memory_allocated() / 2**30
    return code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def _arm_process(cli: list[str], results) -> None:
    results.put(_run_arm(cli))


def _run_arm_in_own_process(cli: list[str]) -> tuple[int, float]:
    """:func:`_run_arm` in a fresh spawned process (its engine and memory go away with it)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_arm_process, args=(cli, results))
    process.start()
    process.join()
    if process.exitcode != 0 or results.empty():
        return process.exitcode or 1, float("nan")
    return results.get()


def _arm_cli(arm: str, bench: str, model_dir: Path, out_dir: Path, G: int, length: int, steps: int,
             image_dim: int, backend: str, length_kwargs: dict) -> list[str]:
    """The trainer flags of one arm: fixed-length completions, one log per step, no saves."""
    cli = [
        "--train_bench_data_folder", bench, "--model_name", str(model_dir), "--output_dir", str(out_dir),
        "--reward_bench", "--reward_front_matter", "--reward_eos",
        "--num_generations", str(G), "--per_device_train_batch_size", str(G), "--gradient_accumulation_steps", "1",
        "--max_completion_length", str(length), "--generation_kwargs", json.dumps(length_kwargs),
        "--max_steps", str(steps), "--logging_steps", "1", "--save_steps", "100000", "--warmup_steps", "0",
        "--learning_rate", "1e-6", "--temperature", "1.0", "--target_longest_image_dim", str(image_dim),
        "--dataloader_num_workers", "0", "--report_to", "none", "--seed", "0",
        "--vllm_mode", "colocate" if backend == "vllm-colocate" else "none",
    ]
    if arm == "olmorl":
        cli.append("--olmorl")
    elif arm == "lora":
        cli.append("--use_peft")
    return cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m olmocr_rl.gpu_check", description=__doc__.split("\n\n")[0])
    from olmocr_rl.model.families import FAMILIES

    parser.add_argument("--family", choices=list(FAMILIES), default="qwen2_5_vl",
                        help="model family (config.json model_type; default qwen2_5_vl)")
    presets = "; ".join(f"{t}: {', '.join(f.shapes)}" for t, f in FAMILIES.items())
    parser.add_argument("--shape", default=None,
                        help="model architecture, a preset of the family (" + presets + "); default: the family's "
                             "smallest released shape on CUDA (Qwen2.5-VL: 3b), tiny on CPU")
    parser.add_argument("--steps", type=int, default=None, help="training steps per arm (default 4 GPU, 3 CPU)")
    parser.add_argument("--completion_length", type=int, default=None, help="fixed completion tokens (256 GPU, 16 CPU)")
    parser.add_argument("--num_generations", type=int, default=None, help="G (default 8 GPU, 4 CPU)")
    parser.add_argument("--image_dim", type=int, default=None, help="page size, longest side (default: the trainer's --target_longest_image_dim on GPU, 448 on CPU)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--work_dir", default=None, help="where the model and run outputs go (default a temp dir)")
    parser.add_argument("--out", default="gpu_check.json", help="JSON file for the table")
    parser.add_argument("--bench", default=str(REPO_ROOT / "bench_data_sample"), help="bench folder")
    return parser


def _shape(args, cuda: bool) -> str | None:
    """The preset to build: --shape, or the family's smallest released one on CUDA, tiny on CPU; None if unknown."""
    from olmocr_rl.model.families import FAMILIES

    presets = list(FAMILIES[args.family].shapes)
    shape = args.shape or (next(name for name in presets if name != "tiny") if cuda else "tiny")
    return shape if shape in presets else None


def _model(work: Path, family: str, shape: str, cuda: bool) -> tuple[Path, int]:
    """The random-weight model folder of the preset in ``work`` (built once) and its parameter count."""
    from olmocr_rl.tiny_model import build_tiny_model

    model_dir = work / f"model-{family}-{shape}"
    if not (model_dir / "config.json").is_file():
        build_tiny_model(model_dir, seed=0, family=family, shape=shape, dtype="bfloat16" if cuda else "float32",
                         device="cuda" if cuda else "cpu")
    return model_dir, json.loads((model_dir / "olmocr_rl_tiny_model.json").read_text())["parameters"]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    import torch

    from olmocr_rl.config import probe_environment
    from olmocr_rl.config.flags import DEFAULT_TARGET_LONGEST_IMAGE_DIM
    from olmocr_rl.model.families import FAMILIES

    environment = probe_environment()
    cuda = environment.cuda
    shape = _shape(args, cuda)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if shape is None or unknown:  # before anything is built
        print(f"error: --arms {unknown[0]}: choose from {', '.join(ARMS)}" if unknown else
              f"error: --shape {args.shape}: {FAMILIES[args.family].label} has {', '.join(FAMILIES[args.family].shapes)}",
              file=sys.stderr)
        return 2
    steps = args.steps or (4 if cuda else 3)
    length = args.completion_length or (256 if cuda else 16)
    G = args.num_generations or (8 if cuda else 4)
    image_dim = args.image_dim or (DEFAULT_TARGET_LONGEST_IMAGE_DIM if cuda else 448)
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="olmocr_rl_gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)

    start = time.time()
    model_dir, params = _model(work, args.family, shape, cuda)
    print(f"[gpu_check] device {device_name}; model {FAMILIES[args.family].label} {shape} ({params / 1e6:.1f}M params) "
          f"built in {time.time() - start:.0f}s", flush=True)

    if environment.vllm:  # not imported here: each arm's process starts its engine
        backend, length_kwargs = "vllm-colocate", {"ignore_eos": True}  # runs to max_tokens, distribution untouched
    else:
        backend, length_kwargs = "hf-generate", {"min_new_tokens": length}
    print(f"[gpu_check] generation backend: {backend}", flush=True)

    rows = []
    for arm in arms:
        out_dir = work / f"run-{arm}"
        cli = _arm_cli(arm, args.bench, model_dir, out_dir, G, length, steps, image_dim, backend, length_kwargs)
        print(f"[gpu_check] arm {arm}: python -m olmocr_rl.grpo_train {' '.join(cli)}", flush=True)
        if backend == "vllm-colocate":
            # A colocated engine holds GPU memory and torch.distributed state until its process ends: two
            # arms' engines in one process would measure the second next to the first's leftovers.
            code, peak = _run_arm_in_own_process(cli)
        else:
            code, peak = _run_arm(cli)
        if code != 0:
            print(f"[gpu_check] arm {arm} failed with exit code {code}", file=sys.stderr)
            return code
        rows.append(summarise(out_dir / "metrics.jsonl", params=params, peak_flops=_peak_flops(device_name),
                              peak_mem_gb=peak, arm=arm))
        if cuda:
            torch.cuda.empty_cache()

    result = {
        "date": time.strftime("%Y-%m-%d"), "device": device_name, "family": args.family, "shape": shape,
        "parameters": params,
        "backend": backend, "num_generations": G, "completion_length": length, "image_dim": image_dim,
        "steps": steps, "peak_flops": _peak_flops(device_name),
        "memory": "GPU peak allocated" if cuda else "process peak RSS", "total_s": time.time() - start,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n[gpu_check] {device_name}, {shape}, {backend}, G={G}, {length} tokens/completion, "
          f"{image_dim}px pages, {steps} steps (first excluded); total {result['total_s']:.0f}s")
    print(format_table(rows))
    print(f"[gpu_check] wrote {args.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
