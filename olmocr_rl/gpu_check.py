"""One-command check and measurement of the training path: ``bash scripts/gpu_check.sh``.

On a CUDA machine: builds a random-weight model with the real Qwen2.5-VL-3B architecture (the tiny tokenizer's
vocabulary; ``--family qwen3_vl --shape 8b`` or ``--family qwen3_vl_moe`` for Qwen3-VL's), then runs the training CLI
for a few steps on ``bench_data_sample/`` in bf16 — vLLM colocate when vLLM is importable, HF generation otherwise —
with 1288 px pages, G = 8 and a fixed completion length, one run per *arm*: an objective (plain GRPO, ``--olmorl``, or
LoRA: ``--use_peft`` with its defaults, r 16 on the language model, the frozen vision tower's features computed once
per step) with a set of speed-ups (``stock``: none, the step as it was before them; ``vision``: the vision-tower ones;
``all``: the trainer's defaults; ``noprefix``: the defaults but ``--shared_prefix``), each arm in its own process on a
GPU. vLLM runs to the length with ``ignore_eos`` (it only stops stopping: the sampled distribution and the log-probs
TRL's importance-sampling correction compares are the model's own); ``min_tokens`` would mask EOS out of the logits,
and vLLM's processed log-probs would then differ from the trainer's on every token (docs/gpu_check.md). HF generation
uses ``min_new_tokens`` (no correction there). On CPU the same runs use the tiny model and tiny sizes (under a minute
an arm), so CI checks it.

Prints one table and writes it as JSON (``--out``): seconds per step split into generation / reward /
training (log-probs, forward/backward, optimizer), generated and trained tokens per second, a model
FLOP utilisation (below), peak memory, and the reward time share. The first step of each run is warm-up
and is left out of the means. ``--profile`` adds torch.profiler's view of one step per phase
(``olmocr_rl.telemetry.profile``), ``--with_7b`` a 7B row, ``--time_budget_s`` bounds the run (arms that
would start later are listed as not measured), and ``--write_docs`` appends the dated table to a
markdown file (docs/gpu_check.md). ``scripts/device_gpu_check.sh`` is the one prepared run for a lent GPU.

Three MFU columns: ``mfu_6n`` is the usual 6 · N · trained tokens estimate; ``mfu`` counts the step's
real training FLOPs (language model, vision tower on its patches, attention; ``olmocr_rl.model.flops``)
against the whole step's time, and ``train_mfu`` the same FLOPs against the training phase alone.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import shutil
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


def summarise(metrics_file: Path, *, params: int, peak_flops: float, peak_mem_gb: float, arm: str,
              profiled: int | None = None) -> dict:
    """Per-step means over the logged steps after the first (warm-up) one, the ``profiled`` step left out too
    when another step remains."""
    records = {}
    for line in metrics_file.read_text().splitlines():
        rec = json.loads(line)
        if "timing/step_s" in rec:
            records[rec["step"]] = rec
    steps = sorted(records)
    if len(steps) < 2:
        raise RuntimeError(f"{metrics_file}: fewer than 2 logged training steps; cannot measure")
    kept = [s for s in steps[1:] if s != profiled] or steps[1:]
    measured = [records[s] for s in kept]
    # TRL's num_tokens counts prompt + completion tokens seen so far; its per-step increase is what trained.
    trained = [records[b]["num_tokens"] - records[a]["num_tokens"] for a, b in zip(steps, steps[1:])
               if b in kept and "num_tokens" in records[a] and "num_tokens" in records[b]]
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
        "step_seconds": [r["timing/step_s"] for r in measured],  # the spread behind the means
        # the training forwards' real tokens the language model forwarded (--shared_prefix; NaN with it off)
        "shared_prefix_tokens": _mean(r.get("timing/shared_prefix_tokens") for r in measured),
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


def _run_arm_in_own_process(cli: list[str], on_result=None, exit_grace_s: float = 30.0) -> tuple[int, float]:
    """:func:`_run_arm` in a fresh spawned process (its engine and memory go away with it). ``on_result(code,
    peak)`` is called as soon as the process has sent its result, before it has exited; it then gets
    ``exit_grace_s`` to exit, and one that does not is killed with one line saying so (on an H200 an arm's process
    that had finished stayed up for minutes), its result standing."""
    import multiprocessing
    import queue

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_arm_process, args=(cli, results))
    process.start()
    result = None
    while result is None:
        try:
            result = results.get(timeout=5)
        except queue.Empty:
            if not process.is_alive():
                try:  # it may have put its result just before it exited
                    result = results.get(timeout=1)
                except queue.Empty:
                    break
    if result is not None and on_result is not None:
        on_result(*result)
    process.join(exit_grace_s)
    if process.is_alive():
        print(f"[gpu_check] the arm's process was still running {exit_grace_s:.0f}s after it finished; killed",
              file=sys.stderr, flush=True)
        process.kill()
        process.join()
    if result is None:
        result = (process.exitcode or 1, float("nan"))
        if on_result is not None:
            on_result(*result)
    return result


#: Speed-up settings of an arm: ``stock`` is the step as it ran before any speed-up (the 2026-11-30 table: every
#: flag of the speed group off, every layer recomputing), ``vision`` adds the vision-tower speed-ups, ``all`` is the
#: trainer's defaults (every exact speed-up on), ``noprefix`` the defaults but ``--shared_prefix`` (what it adds).
_STOCK_FLAGS = ["--no-share_page_encoding", "--no-batched_vision_attention", "--no-share_page_processing",
                "--no-padding_free", "--no-shared_prefix", "--no-cache_vision_features", "--gradient_checkpointing",
                "true", "--compiled_generation", "false"]
SPEEDUP_FLAGS = {
    "stock": _STOCK_FLAGS,
    "vision": [*_STOCK_FLAGS, "--share_page_encoding", "--batched_vision_attention"],  # the later flag wins
    "all": [],
    "noprefix": ["--no-shared_prefix"],
}


def parse_arm(spec: str) -> tuple[str, str]:
    """``objective/speedups`` (``grpo/stock``, ``olmorl/all``, ``lora``; a bare objective means ``/all``). Raises
    ValueError."""
    objective, _, speedups = spec.strip().partition("/")
    speedups = speedups or "all"
    if objective not in ARMS or speedups not in SPEEDUP_FLAGS:
        raise ValueError(f"arm {spec!r}: expected {'|'.join(ARMS)}[/{'|'.join(SPEEDUP_FLAGS)}]")
    return objective, speedups


def _arm_cli(arm: str, bench: str, model_dir: Path, out_dir: Path, G: int, length: int, steps: int,
             image_dim: int, backend: str, length_kwargs: dict, profile_step: int | None = None,
             batch: int | None = None) -> list[str]:
    """The trainer flags of one arm (``objective/speedups``): fixed-length completions, one log per step, no saves;
    ``batch`` completions a micro-batch (default G: one micro-step a step)."""
    objective, speedups = parse_arm(arm)
    cli = [
        "--train_bench_data_folder", bench, "--model_name", str(model_dir), "--output_dir", str(out_dir),
        "--reward_bench", "--reward_front_matter", "--reward_eos",
        "--num_generations", str(G), "--per_device_train_batch_size", str(batch or G),
        "--gradient_accumulation_steps", str(G // (batch or G)),
        "--max_completion_length", str(length), "--generation_kwargs", json.dumps(length_kwargs),
        "--max_steps", str(steps), "--logging_steps", "1", "--save_steps", "100000", "--warmup_steps", "0",
        "--learning_rate", "1e-6", "--temperature", "1.0", "--target_longest_image_dim", str(image_dim),
        "--dataloader_num_workers", "0", "--report_to", "none", "--seed", "0",
        "--vllm_mode", "colocate" if backend == "vllm-colocate" else "none", *SPEEDUP_FLAGS[speedups],
    ]
    if objective == "olmorl":
        cli.append("--olmorl")
    elif objective == "lora":
        cli.append("--use_peft")
    if profile_step is not None:
        cli += ["--profile_step", str(profile_step)]
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
    parser.add_argument("--per_device_train_batch_size", type=int, default=None,
                        help="completions a micro-batch, G / it accumulation steps (default G; olmOCR 2 trains 1)")
    parser.add_argument("--image_dim", type=int, default=None, help="page size, longest side (default: the trainer's --target_longest_image_dim on GPU, 448 on CPU)")
    parser.add_argument("--arms", default="grpo/stock,grpo/all,olmorl/stock,olmorl/all,lora/all",
                        help="comma list of objective/speedups arms: objective grpo, olmorl or lora (--use_peft); "
                             "speedups stock (none: the step before any speed-up), vision (the vision-tower ones), "
                             "all (the defaults) or noprefix (the defaults but --shared_prefix); a bare objective "
                             "means /all")
    parser.add_argument("--profile", action="store_true",
                        help="profile the last step of the first arm with every speed-up on (torch.profiler, per "
                             "phase; that step is left out of the arm's means when another remains)")
    parser.add_argument("--with_7b", action="store_true", help="then the 7B shape, grpo/all, if --time_budget_s allows")
    parser.add_argument("--time_budget_s", type=float, default=None,
                        help="start no arm after this many seconds (the arms left out are listed as not measured)")
    parser.add_argument("--write_docs", default=None, metavar="MD",
                        help="append the dated table (and profile) to this markdown file, e.g. docs/gpu_check.md")
    parser.add_argument("--work_dir", default=None, help="where the model and run outputs go (default a temp dir)")
    parser.add_argument("--out", default="gpu_check.json", help="JSON file for the table")
    parser.add_argument("--bench", default=str(REPO_ROOT / "bench_data_sample"), help="bench folder")
    return parser


def _shape(args, cuda: bool) -> str | None:
    """The preset to build: --shape, or the family's smallest released one on CUDA, tiny on CPU; None if unknown."""
    from olmocr_rl.model.families import CPU_SHAPES, FAMILIES

    presets = list(FAMILIES[args.family].shapes)
    shape = args.shape or (next(name for name in presets if name not in CPU_SHAPES) if cuda else "tiny")
    return shape if shape in presets else None


def _build_model(work: Path, family: str, shape: str, cuda: bool) -> tuple[Path, int]:
    """The random-weight model folder of the preset (built once in ``work``) and its parameter count."""
    from olmocr_rl.model.families import CPU_SHAPES
    from olmocr_rl.tiny_model import build_tiny_model

    model_dir = work / f"model-{family}-{shape}"
    if not (model_dir / "config.json").is_file():
        build_tiny_model(model_dir, seed=0, family=family, shape=shape,
                         dtype="bfloat16" if cuda and shape not in CPU_SHAPES else "float32",
                         device="cuda" if cuda else "cpu")
    return model_dir, json.loads((model_dir / "olmocr_rl_tiny_model.json").read_text())["parameters"]


def _arm_finished(state: dict, report, settings: dict, name: str, out_dir: Path, params: int, profiled: int | None,
                  arm_start: float, code: int, peak: float) -> None:
    """Add an arm's row (or its failure) to ``state`` and ``report`` it at once: on a GPU, before its process has
    exited."""
    if code != 0:
        print(f"[gpu_check] arm {name} failed with exit code {code} (its log is above); going on with the next",
              file=sys.stderr, flush=True)
        state["failed"].append(f"{name}: exit code {code}")
    else:
        row = summarise(out_dir / "metrics.jsonl", params=params, peak_flops=_peak_flops(settings["device"]),
                        peak_mem_gb=peak, arm=name, profiled=profiled)
        state["rows"].append(row)
        print(f"[gpu_check] arm {name} done in {time.time() - arm_start:.0f}s: {row['step_s']:.2f} s/step, generate "
              f"{row['generate_s']:.2f} s, train {row['train_s']:.2f} s, peak {row['peak_mem_gb']:.1f} GiB", flush=True)
        if profiled is not None:
            state["profile"] = {"arm": row["arm"], **json.loads((out_dir / f"profile_step_{profiled}.json").read_text())}
    report(state)


#: What an arm leaves in its output folder that the table does not read: the end-of-run checkpoint and the saved
#: model. At the 3B shape that is ~26 GB an arm (19.2 GB the checkpoint with its optimizer state), and on 2026-12-04
#: the third arm of an H200 run failed with its disk full.
_ARM_WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth")


def _free_arm_outputs(out_dir: Path) -> None:
    """Delete an arm's checkpoints and weight files once its row is written; its metrics and profile stay."""
    if not out_dir.is_dir():
        return
    for checkpoint in out_dir.glob("checkpoint-*"):
        if checkpoint.is_dir():
            shutil.rmtree(checkpoint, ignore_errors=True)
    for pattern in _ARM_WEIGHTS:
        for weights in out_dir.glob(pattern):
            weights.unlink(missing_ok=True)


def _run_arms(plan: list[tuple[str, str]], args, settings: dict, work: Path, start: float, report) -> dict:
    """Run each (shape, arm) of ``plan`` in order, calling ``report(state)`` after each so that a run stopped
    from outside keeps the arms it finished. ``state``: rows, arms left out for time (``not_measured``), arms that
    failed (``failed``: "arm: exit code N"; the next arm still runs) and the profile (or {})."""
    import torch

    cuda = settings["cuda"]
    state = {"rows": [], "not_measured": [], "failed": [], "profile": {}}
    profile_arm = next((i for i, (_, arm) in enumerate(plan) if parse_arm(arm)[1] == "all"), None) \
        if args.profile else None
    for index, (shape, arm) in enumerate(plan):
        if args.time_budget_s is not None and time.time() - start > args.time_budget_s:
            state["not_measured"].append(f"{shape} {arm}")
            continue
        model_dir, params = _build_model(work, settings["family"], shape, cuda)
        out_dir = work / f"run-{shape}-{arm.replace('/', '-')}"
        profiled = settings["steps"] if index == profile_arm else None  # the last step: the others stay unprofiled
        cli = _arm_cli(arm, args.bench, model_dir, out_dir, settings["G"], settings["length"], settings["steps"],
                       settings["image_dim"], settings["backend"], settings["length_kwargs"], profile_step=profiled,
                       batch=settings.get("batch"))
        print(f"[gpu_check] arm {shape} {arm}: python -m olmocr_rl.grpo_train {' '.join(cli)}", flush=True)
        # On a GPU each arm gets its own process: a colocated engine, compiled graphs and the allocator's
        # cache would otherwise carry into the next arm's numbers.
        name = f"{shape} {arm}" if shape != settings["shape"] else arm
        finished = functools.partial(_arm_finished, state, report, settings, name, out_dir, params, profiled,
                                     time.time())
        if cuda:
            _run_arm_in_own_process(cli, on_result=finished)
        else:
            finished(*_run_arm(cli))
        _free_arm_outputs(out_dir)
        if cuda:
            torch.cuda.empty_cache()
    return state


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    import torch

    from olmocr_rl.config import probe_environment
    from olmocr_rl.data.render import DEFAULT_TARGET_LONGEST_IMAGE_DIM
    from olmocr_rl.model.families import FAMILIES

    try:
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        for arm in arms:
            parse_arm(arm)
    except ValueError as exc:
        print(f"error: --arms: {exc}", file=sys.stderr)
        return 2
    environment = probe_environment()
    cuda = environment.cuda
    shape = _shape(args, cuda)
    if shape is None:  # before anything is built
        print(f"error: --shape {args.shape}: {FAMILIES[args.family].label} has "
              f"{', '.join(FAMILIES[args.family].shapes)}", file=sys.stderr)
        return 2
    length = args.completion_length or (256 if cuda else 16)
    backend = "vllm-colocate" if environment.vllm else "hf-generate"  # vLLM is not imported here: each arm's process
    settings = {
        "cuda": cuda, "family": args.family, "shape": shape, "steps": args.steps or (4 if cuda else 3), "length": length,
        "G": args.num_generations or (8 if cuda else 4), "backend": backend, "batch": args.per_device_train_batch_size,
        "image_dim": args.image_dim or (DEFAULT_TARGET_LONGEST_IMAGE_DIM if cuda else 448),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        # vLLM runs to max_tokens with its distribution untouched; HF generation holds EOS off
        "length_kwargs": {"ignore_eos": True} if backend == "vllm-colocate" else {"min_new_tokens": length},
    }
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="olmocr_rl_gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    _, params = _build_model(work, args.family, shape, cuda)
    print(f"[gpu_check] device {settings['device']}; model {FAMILIES[args.family].label} {shape} "
          f"({params / 1e6:.1f}M params) built in "
          f"{time.time() - start:.0f}s; generation backend: {backend}", flush=True)
    with_7b = args.with_7b and "7b" in FAMILIES[args.family].shapes and shape != "7b"
    plan = [(shape, arm) for arm in arms] + ([("7b", "grpo/all")] if with_7b else [])
    versions = {"torch": torch.__version__, **_versions()}
    docs_base = None
    if args.write_docs:
        docs_path = Path(args.write_docs)
        docs_base = docs_path.read_text() if docs_path.is_file() else "# GPU check\n"

    def result_of(state: dict, complete: bool) -> dict:
        return {
            "date": time.strftime("%Y-%m-%d"), "device": settings["device"], "family": args.family, "shape": shape,
            "parameters": params, "backend": backend, "num_generations": settings["G"], "completion_length": length,
            "per_device_train_batch_size": args.per_device_train_batch_size or settings["G"],
            "image_dim": settings["image_dim"], "steps": settings["steps"],
            "peak_flops": _peak_flops(settings["device"]),
            "memory": "GPU peak allocated" if cuda else "process peak RSS", "total_s": time.time() - start,
            **state, "complete": complete, "versions": versions,
        }

    def write(state: dict, complete: bool = False) -> dict:
        """The JSON and the docs as they stand (after each arm: a run stopped from outside keeps what it measured)."""
        result = result_of(state, complete)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        if docs_base is not None:
            Path(args.write_docs).write_text(docs_base.rstrip("\n") + "\n\n" + markdown_section(result))
        return result

    state = _run_arms(plan, args, settings, work, start, write)
    result = write(state, complete=True)
    print(f"\n[gpu_check] {settings['device']}, {shape}, {backend}, G={settings['G']}, {length} tokens/completion, "
          f"{settings['image_dim']}px pages, {settings['steps']} steps (first excluded); total {result['total_s']:.0f}s")
    print(format_table(state["rows"]))
    if state["not_measured"]:
        print(f"[gpu_check] not measured (time budget): {', '.join(state['not_measured'])}")
    if state["failed"]:
        print(f"[gpu_check] failed: {'; '.join(state['failed'])}", file=sys.stderr)
    if args.write_docs:
        print(f"[gpu_check] appended the table to {args.write_docs}")
    print(f"[gpu_check] wrote {args.out}")
    return 1 if state["failed"] else 0


def markdown_section(result: dict) -> str:
    """The dated markdown section of a gpu_check result: the table, what was not measured, the profile."""
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    lines = [f"## Measured: {result['date']}, {result['device']}, {result['backend']} (python -m olmocr_rl.gpu_check)",
             "", f"{versions}; {result['shape']} shape, G = {result['num_generations']} x {result['completion_length']} "
             f"tokens, {result['image_dim']} px pages, {result['steps']} steps per arm (first excluded); "
             f"memory = {result['memory']}; total {result['total_s']:.0f} s.", "",
             "| arm | s/step | generate s | reward s | train s | gen tok/s | train tok/s | mfu_6n | mfu | train_mfu "
             "| peak GiB | reward share |", "|" + "---|" * 12]
    for row in result["rows"]:
        cells = [row["arm"], f"{row['step_s']:.2f}", f"{row['generate_s']:.2f}", f"{row['reward_s']:.3f}",
                 f"{row['train_s']:.2f}", f"{row['gen_tok_per_s']:,.0f}", f"{row['train_tok_per_s']:,.0f}",
                 f"{row['mfu_6n']:.2%}", f"{row['mfu']:.2%}", f"{row['train_mfu']:.2%}", f"{row['peak_mem_gb']:.1f}",
                 f"{row['reward_share']:.2%}"]
        lines.append("| " + " | ".join(cells) + " |")
    if result["rows"]:
        spread = "; ".join(f"{row['arm']} {', '.join(f'{v:.2f}' for v in row.get('step_seconds', []))}"
                           for row in result["rows"])
        lines += ["", f"Seconds of each measured step: {spread}."]
        shared = [f"{row['arm']} {row['shared_prefix_tokens']:.2f}" for row in result["rows"]
                  if not math.isnan(row.get("shared_prefix_tokens", float("nan")))]
        if shared:
            lines += ["", "The training forwards' real tokens the language model forwarded (`--shared_prefix`; 1.00: "
                      f"nothing shared): {'; '.join(shared)}."]
    if result.get("not_measured"):
        lines += ["", f"Not measured (time budget): {', '.join(result['not_measured'])}."]
    if result.get("failed"):
        lines += ["", f"Failed (see the run's log): {'; '.join(result['failed'])}."]
    if not result.get("complete", True):
        lines += ["", "The run stopped before its last arm: the rows above are the arms it finished."]
    profile = result.get("profile") or {}
    if profile:
        lines += ["", f"Profile of step {profile['step']} of `{profile['arm']}` (torch.profiler; GPU busy = kernel "
                  "time / phase wall time):", "",
                  "| phase | wall s | GPU busy | kernels | mean kernel µs | verdict | top operators |", "|" + "---|" * 7]
        for phase, f in profile["phases"].items():
            top = ", ".join(f"{op['name']} {op['gpu_s'] if profile['device'] == 'cuda' else op['cpu_s']:.2f}s"
                            for op in f["top_operators"][:4])
            lines.append(f"| {phase} | {f['wall_s']:.2f} | {f['gpu_busy']:.0%} | {f['kernels']:,} | "
                         f"{f['mean_kernel_us']:.1f} | {f['verdict']} | {top} |")
    return "\n".join(lines) + "\n"


def _versions() -> dict[str, str]:
    import importlib.metadata

    out = {}
    for name in ("transformers", "trl", "accelerate"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
