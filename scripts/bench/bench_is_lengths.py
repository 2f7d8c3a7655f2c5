"""How vLLM's importance-sampling (IS) correction treats long pages, measured with the real engine on CPU.

    .venv-vllm/bin/python scripts/bench/bench_is_lengths.py [--work DIR] [--steps 3] [--generations 8]

Builds a tiny Qwen2.5-VL and warm-starts it on one page whose reference is every ``bench_data_sample`` reference
concatenated (8 times, each in its own shuffled order: about 4,100 tokens), so that it writes long pages by itself: no logits
processor forces a length, the completions only stop at EOS or at ``--max_length``. Then it runs the training CLI
with colocated vLLM twice, the engine in bfloat16 and (the control) in float32, the trainer in float32 both times,
and records, per generation batch, the tensors TRL forms its IS ratio from (the trainer's and vLLM's per-token
log-probs and the loss mask) through the run's own telemetry hook.

A causal model's completion cut at N tokens is its first N tokens, so each recorded completion is also read at the
prefix lengths 64 ... 3,000: every row of the table is the same batches at that length. Per row: the mean |per-token
log difference| and its signed mean (trainer - vLLM), the spread of the sequence log ratio (the sum over the
sequence: TRL's ``sequence_*`` modes use its exp), and what each ``--vllm_importance_sampling_mode`` masks or
truncates at cap 3.0 (olmOCR's) and at the larger caps, with the cap that would keep 90% / all sequences, and the
effective sample size of the weights each leaves (sequence_mask's per sequence, token_truncate's per token). Then the
growth of the sequence log ratio's spread with length is fitted (std ~ N^alpha: 0.5 = independent per-token
errors of a fixed size, 1 = errors that add up), beside the spread independent errors of the measured sizes would
give (``iid``). Prints the tables; ``--json`` also writes them. About 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench_data_sample"
PAGE_PDF = "simple_lines.pdf"
PREFIXES = (64, 128, 256, 512, 1000, 1500, 2000, 2500, 3000)
CAPS = (3.0, 10.0, 100.0)


def long_reference(copies: int = 8, seed: int = 0) -> str:
    """The simple_lines page's front matter, then every sample reference's text, ``copies`` times in shuffled orders."""
    from olmocr_rl.data.front_matter import parse_page_response  # noqa: F401 (the result must parse: checked on load)

    sources = sorted((BENCH / "claude_original").rglob("*.md"))
    bodies = []
    for path in sources:
        text = path.read_text(encoding="utf-8")
        body = text.split("---", 2)[2].strip() if text.startswith("---") else text.strip()
        if body:
            bodies.append(body)
    front = (BENCH / "claude_original" / "simple_lines_page1_pg1_repeat1.md").read_text(encoding="utf-8")
    front_matter = "---" + front.split("---", 2)[1] + "---\n"
    rng = random.Random(seed)
    parts = []
    for _ in range(copies):
        order = bodies[:]
        rng.shuffle(order)
        parts.extend(order)
    return front_matter + "\n\n".join(parts) + "\n"


def long_page_bench(folder: Path) -> Path:
    """A one-page bench folder: simple_lines.pdf page 1, one test, and the long reference."""
    (folder / "claude_original").mkdir(parents=True, exist_ok=True)
    if not (folder / "pdfs").exists():
        (folder / "pdfs").symlink_to(BENCH / "pdfs", target_is_directory=True)
    test = {"pdf": PAGE_PDF, "page": 1, "id": "long_page_present", "type": "present", "text": "The quick brown fox"}
    (folder / "long.jsonl").write_text(json.dumps(test) + "\n")
    (folder / "claude_original" / "simple_lines_page1_pg1_repeat1.md").write_text(long_reference(), encoding="utf-8")
    return folder


def build_long_model(work: Path, sft_steps: int) -> Path:
    """The tiny model (seed 0, tokenizer also trained on the references), warm-started on the long page."""
    from olmocr_rl.model.warm_start import warm_start
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    model = work / "long-model"
    if (model / "olmocr_rl_tiny_model.json").is_file() and "sft_steps" in (model / "olmocr_rl_tiny_model.json").read_text():
        return model
    bench = long_page_bench(work / "long-bench")
    build_tiny_model(model, seed=0, extra_corpus=read_corpus_dir(BENCH / "claude_original"))
    warm_start(model, bench, seed=0, steps=sft_steps, learning_rate=3e-3, image_dim=448)
    return model


def record_worker(out_path: str, flags: list[str]) -> int:
    """Run the training CLI, saving the tensors the IS telemetry reads at every generation batch."""
    import torch

    from olmocr_rl import grpo_train
    from olmocr_rl.trainer import is_telemetry

    records = []
    base = is_telemetry.ImportanceSamplingTelemetry.log

    def log_and_record(self, trainer, output):
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        records.append({k: v.detach().cpu() for k, v in (("old", output["old_per_token_logps"]),
                        ("sampling", output["sampling_per_token_logps"]), ("mask", mask))})
        torch.save(records, out_path)
        return base(self, trainer, output)

    is_telemetry.ImportanceSamplingTelemetry.log = log_and_record
    return grpo_train.main(flags)


def run_arm(work: Path, model: Path, dtype: str, args) -> tuple[Path, dict]:
    out = work / f"run-{dtype}"
    tensors = work / f"is-{dtype}.pt"
    if tensors.is_file() and (out / "metrics.jsonl").is_file() and not args.rerun:
        return tensors, {"seconds": None}
    shutil.rmtree(out, ignore_errors=True)  # metrics.jsonl is appended to: start clean
    tensors.unlink(missing_ok=True)
    flags = [
        "--train_bench_data_folder", str(work / "long-bench"), "--model_name", str(model), "--output_dir", str(out),
        "--reward_bench", "--num_generations", str(args.generations),
        "--per_device_train_batch_size", str(args.generations), "--gradient_accumulation_steps", "1",
        "--max_steps", str(args.steps), "--max_completion_length", str(args.max_length),
        "--vllm_mode", "colocate", "--vllm_dtype", dtype, "--report_to", "none", "--no-log_completions",
        "--logging_steps", "1", "--target_longest_image_dim", "448", "--learning_rate", "1e-6",
        "--warmup_steps", "0", "--save_steps", "100000", "--seed", "0",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start = time.time()
    result = subprocess.run([sys.executable, __file__, "--worker", str(tensors), "--", *flags], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        sys.exit(f"error: the {dtype} run failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return tensors, {"seconds": time.time() - start}


def _rows(batches: list[dict], length: int | None, cap: float):
    """Per-sequence rows (olmocr_rl.telemetry.importance_sampling.sequence_rows) of the batches cut at ``length``."""
    import torch

    from olmocr_rl.telemetry.importance_sampling import sequence_rows

    rows = []
    for batch in batches:
        mask = batch["mask"] if length is None else batch["mask"][:, :length]
        width = mask.shape[1]
        applied = torch.ones(mask.shape[0], 1)  # what-if only: the counts below come from the log ratios
        rows.append(sequence_rows(batch["old"][:, :width], batch["sampling"][:, :width], mask, applied,
                                  "sequence_mask", None, cap))
    return torch.cat(rows)


def _ess(weights) -> float:
    total = float((weights ** 2).sum())
    return float(weights.sum()) ** 2 / (weights.numel() * total) if total > 0 else 0.0


def prefix_stats(batches: list[dict], length: int | None) -> dict:
    """The IS statistics of the recorded batches cut at ``length`` tokens (None: as generated)."""
    import torch

    from olmocr_rl.telemetry.importance_sampling import per_token_log_diff, summarize

    diffs, squares = [], []
    for batch in batches:
        mask = batch["mask"] if length is None else batch["mask"][:, :length]
        width = mask.shape[1]
        d = per_token_log_diff(batch["old"][:, :width], batch["sampling"][:, :width], mask).double()
        diffs.append(d[mask.bool()])
        squares.append((d ** 2).sum(dim=1))
    diff = torch.cat(diffs)
    # What the sequence log ratio's spread would be if its tokens' differences were independent and centred.
    independent_std = math.sqrt(float(torch.cat(squares).mean()))
    rows = _rows(batches, length, CAPS[0])
    log_ratio = rows[:, 3]
    # The weights the correction leaves, and their effective sample size (sum w)^2 / (n sum w^2): 1 when every
    # weight is equal, the share of the batch the gradient is really averaged over when they scatter.
    seq_weights = torch.exp(log_ratio).masked_fill(torch.exp(log_ratio) > CAPS[0], 0.0)
    token_weights = torch.exp(diff).clamp(max=CAPS[0])
    out = {"length": length, "sequences": int(rows.shape[0]), "mean_tokens": float(rows[:, 0].mean()),
           "max_tokens": int(rows[:, 0].max()), "mean_abs_diff": float(diff.abs().mean()),
           "mean_diff": float(diff.mean()), "log_ratio_std": float(log_ratio.std(unbiased=False)),
           "independent_std": independent_std,
           "log_ratio_mean": float(log_ratio.mean()), "ratio_min": math.exp(float(log_ratio.min())),
           "ratio_max": math.exp(float(log_ratio.max())),
           "cap_keep_90": math.exp(float(torch.quantile(log_ratio, 0.9))), "cap_keep_all": math.exp(float(log_ratio.max())),
           "shrunk_below_third": float((log_ratio < -math.log(3.0)).double().mean()),
           "ess_sequence_mask": _ess(seq_weights), "ess_token_truncate": _ess(token_weights)}
    for cap in CAPS:
        what_if = summarize(_rows(batches, length, cap), "sequence_mask", None, cap)["what_if"]
        out[f"cap{cap:g}"] = {mode: list(v) for mode, v in what_if.items()}
    return out


def fit_growth(stats: list[dict]) -> float:
    """Least-squares slope of log(std of the sequence log ratio) on log(mean tokens)."""
    points = [(math.log(s["mean_tokens"]), math.log(s["log_ratio_std"])) for s in stats if s["log_ratio_std"] > 0]
    if len(points) < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def format_tables(name: str, stats: list[dict], alpha: float) -> str:
    lines = [f"\n{name}: spread std(sum of per-token log differences) ~ N^{alpha:.2f}",
             f"{'tokens':>7} {'max':>5} {'seqs':>5} {'mean|d|':>9} {'mean d':>10} {'std S':>7} {'iid':>6} {'ratio min..max':>19} "
             f"{'<1/3':>5} {'cap 90%':>8} {'cap all':>9}   masked/truncated at cap 3: seq_mask  seq_trunc  "
             f"tok_mask  tok_trunc | seq_mask at cap 10, 100 | ESS seq_mask, tok_trunc"]
    for s in stats:
        c3 = s["cap3"]
        lines.append(
            f"{s['mean_tokens']:7.0f} {s['max_tokens']:5d} {s['sequences']:5d} {s['mean_abs_diff']:9.2e} {s['mean_diff']:+10.2e} "
            f"{s['log_ratio_std']:7.3f} {s['independent_std']:6.3f} {s['ratio_min']:9.3g}..{s['ratio_max']:<9.3g} {100 * s['shrunk_below_third']:4.0f}% "
            f"{s['cap_keep_90']:8.3g} {s['cap_keep_all']:9.3g}   "
            f"{100 * c3['sequence_mask'][0]:28.0f}% {100 * c3['sequence_truncate'][0]:9.0f}% "
            f"{100 * c3['token_mask'][1]:8.2f}% {100 * c3['token_truncate'][1]:9.2f}% | "
            f"{100 * s['cap10']['sequence_mask'][0]:.0f}%, {100 * s['cap100']['sequence_mask'][0]:.0f}% | "
            f"{s['ess_sequence_mask']:.2f}, {s['ess_token_truncate']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        return record_worker(argv[1], argv[argv.index("--") + 1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default=None, help="work folder (model, runs, tensors; reused when present)")
    parser.add_argument("--steps", type=int, default=3, help="training steps per engine dtype (default 3)")
    parser.add_argument("--generations", type=int, default=8, help="completions per step (default 8)")
    parser.add_argument("--max_length", type=int, default=3200, help="--max_completion_length (default 3200)")
    parser.add_argument("--sft_steps", type=int, default=100,
                        help="warm-start steps on the long page (default 100: a per-token loss of about 0.2, an OCR model's order, not memorised)")
    parser.add_argument("--rerun", action="store_true", help="run the CLI again even if its tensors are there")
    parser.add_argument("--json", default=None, help="also write the tables as JSON here")
    args = parser.parse_args(argv)
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("error: vLLM is not importable; run this with .venv-vllm/bin/python (bash scripts/setup_env.sh --vllm)",
              file=sys.stderr)
        return 2
    import torch

    work = Path(args.work or tempfile.mkdtemp(prefix="olmocr_rl_is_lengths_"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    start = time.time()
    model = build_long_model(work, args.sft_steps)
    long_page_bench(work / "long-bench")
    print(f"[is_lengths] model {model} ready ({time.time() - start:.0f}s)", flush=True)
    results = {}
    for dtype in ("bfloat16", "float32"):
        tensors, info = run_arm(work, model, dtype, args)
        batches = torch.load(tensors)
        stats = [prefix_stats(batches, n) for n in PREFIXES] + [prefix_stats(batches, None)]
        stats = [s for i, s in enumerate(stats) if i == len(stats) - 1 or s["mean_tokens"] < stats[-1]["mean_tokens"] - 1]
        alpha = fit_growth(stats)
        metrics = [json.loads(line) for line in (work / f"run-{dtype}" / "metrics.jsonl").read_text().splitlines()]
        logged = [m.get("sampling/is_masked_sequence_fraction") for m in metrics if "reward" in m]
        results[dtype] = {"stats": stats, "alpha": alpha, "logged_masked_sequence_fraction": logged, **info}
        print(format_tables(f"engine {dtype}, trainer float32, {len(batches)} batches x {args.generations}", stats, alpha))
        print(f"  logged by the run (sequence_mask, cap 3.0) per step: sampling/is_masked_sequence_fraction {logged}")
    print(f"\n[is_lengths] total {time.time() - start:.0f}s; work folder {work}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
