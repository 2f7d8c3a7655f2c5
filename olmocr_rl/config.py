"""Flags of ``python -m olmocr_rl.grpo_train``: parsing, YAML merge, validation, and the GRPOConfig.

Every flag of olmOCR's trainer keeps its name, type, default and meaning, with the fixes listed in
docs/design.md ("Where olmocr_rl differs"): booleans can be switched off (``--no-X`` or ``--X false``),
``exo`` is not a loss, ``--lr_schedule constant`` changes only the scheduler, evaluation runs when ``--eval_steps`` asks.
``--config FILE.yaml`` supplies flag values (keys = flag names); the command line overrides the file.

Validation happens here, before any model loads: a bad combination raises :class:`ConfigError`
with one line that says what to write instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from olmocr_rl.rewards.registry import REWARD_FLAGS, REWARD_HELP

logger = logging.getLogger(__name__)

# TRL 1.16's loss formulations (GRPOConfig.loss_type).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
VLLM_MODES = ("auto", "colocate", "server", "none")
VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")
#: Upper bound on a page prompt's text tokens (instructions, chat markup, vision start/end).
PROMPT_TEXT_TOKENS = 512


class ConfigError(ValueError):
    """A flag or flag combination the user must change; the message says how."""


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "y", "on"):
        return True
    if text in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def parse_reward_weight(value: Any) -> float | str:
    """A reward flag's value: a weight (float), or a JSONL path (weight 1.0, tests of that file only)."""
    if isinstance(value, bool):
        return 1.0 if value else None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value)
    try:
        return float(text)
    except ValueError:
        if text.endswith(".jsonl"):
            return text
        raise argparse.ArgumentTypeError(
            f"expected a weight (e.g. 1.0) or a .jsonl path, got {value!r}"
        ) from None


class _BoolFlag(argparse.Action):
    """``--flag`` (true), ``--flag false`` / ``--flag true``, and ``--no-flag`` (false)."""

    def __init__(self, option_strings, dest, default=None, help=None, **kwargs):
        names = list(option_strings)
        for opt in option_strings:
            if opt.startswith("--"):
                names.append("--no-" + opt[2:])
        super().__init__(names, dest, nargs="?", const=True, default=default, type=parse_bool, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string.startswith("--no-"):
            values = False
        setattr(namespace, self.dest, True if values is None else values)




class _OneLineErrorParser(argparse.ArgumentParser):
    """A parse error is one ``error: ...`` line (exit 2), not argparse's usage block above it."""

    def error(self, message: str):
        hint = f" ({self.prog} --help lists every flag)" if "unrecognized" in message else ""
        self.exit(2, f"error: {message}{hint}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineErrorParser(
        prog="python -m olmocr_rl.grpo_train",
        description=(
            "GRPO fine-tuning of a vision-language OCR model (Qwen2.5-VL family) on an olmOCR-bench folder, "
            "rewarded by the unit tests of each page. Flags follow olmOCR's trainer; --config FILE.yaml "
            "supplies any of them (the command line wins)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = p.add_argument
    g = p.add_argument_group("config")
    g.add_argument("--config", default=None, help="YAML file of flag values (keys are flag names without --)")

    g = p.add_argument_group("data")
    g.add_argument("--train_bench_data_folder", default=None,
                   help="bench folder: *.jsonl unit tests + pdfs/ (+ optional claude_original/). Required.")
    g.add_argument("--eval_bench_data_folder", default=None, help="eval bench folder (default: the train folder)")
    g.add_argument("--jsonl_filter", default=None,
                   help="case-insensitive regex searched in each JSONL basename; only matching files are used")
    g.add_argument("--bench_type_filter", action="append", default=None, metavar="TYPE",
                   help="keep only tests of this type (repeatable: --bench_type_filter table --bench_type_filter math)")
    g.add_argument("--pages", default=None, metavar="REGEX",
                   help="keep only pages whose name <pdf>:<page> (e.g. counting.pdf:2) matches this regex "
                        "(train and eval sets)")
    g.add_argument("--exclude_pages", default=None, metavar="REGEX",
                   help="drop pages whose name matches this regex, e.g. to hold pages out for evaluate")
    g.add_argument("--max_train_samples", type=int, default=None, help="use only the first N pages (sorted)")
    g.add_argument("--max_eval_samples", type=int, default=10, help="use only the first N eval pages")
    g.add_argument("--target_longest_image_dim", type=int, default=1288, help="rendered page size (longest side, px)")

    g = p.add_argument_group("model")
    g.add_argument("--model_name", default="Qwen/Qwen2.5-VL-7B-Instruct",
                   help="HF hub id, local folder, or s3://bucket/prefix (downloaded to --cache_dir)")
    g.add_argument("--cache_dir", default=None, help="local cache for s3:// models (default ~/.cache/olmocr_rl/s3)")
    g.add_argument("--output_dir", default="outputs/grpo_test", help="checkpoints, final model and metrics.jsonl")

    g = p.add_argument_group("optimisation")
    g.add_argument("--learning_rate", type=float, default=2e-6, help="peak learning rate")
    g.add_argument("--lr_schedule", choices=("linear", "constant"), default="linear",
                   help="learning-rate schedule after warmup (constant changes only the scheduler)")
    g.add_argument("--warmup_steps", type=int, default=100, help="linear warmup steps")
    g.add_argument("--num_train_epochs", type=float, default=1, help="epochs over the train pages")
    g.add_argument("--max_steps", type=int, default=-1, help="stop after N optimizer steps (overrides epochs)")
    g.add_argument("--per_device_train_batch_size", type=int, default=1, help="completions per device per micro-step")
    g.add_argument("--per_device_eval_batch_size", type=int, default=1, help="eval completions per device")
    g.add_argument("--gradient_accumulation_steps", type=int, default=8,
                   help="micro-steps per optimizer step (TRL also uses it as steps_per_generation)")
    g.add_argument("--gradient_checkpointing", action=_BoolFlag, default=True,
                   help="recompute activations in backward (TRL's default)")
    g.add_argument("--seed", type=int, default=42, help="seed for data order, sampling and init")
    g.add_argument("--dataloader_num_workers", type=int, default=0,
                   help="dataloader worker processes (0: render in the trainer, where the page cache serves all G "
                        "samples of a page; workers pickle every copy back, measured slower in docs/data.md)")

    g = p.add_argument_group("speed (exact: the same numbers as the stock model)")
    g.add_argument("--share_page_encoding", action=_BoolFlag, default=True,
                   help="encode each distinct page image once per forward and reuse its features for the G "
                        "copies of the page (generation prefill and training)")
    g.add_argument("--batched_vision_attention", action=_BoolFlag, default=None,
                   help="run the vision tower's window attention as one batched call per window size instead "
                        "of transformers' per-window loop (SDPA/eager; flash attention is already batched). "
                        "Default: on with a CUDA GPU, where the loop's ~100 kernel launches per image and layer "
                        "dominate; off on CPU, where it measured no faster (scripts/bench/bench_vision.py)")

    g = p.add_argument_group("GRPO")
    g.add_argument("--num_generations", "--num_completions", dest="num_generations", type=int, default=28,
                   help="completions sampled per page (group size G); --num_completions is an alias")
    g.add_argument("--num_iterations", type=int, default=1,
                   help="GRPO's mu: policy updates per generation batch (NOT the number of training steps)")
    g.add_argument("--max_completion_length", type=int, default=8000, help="max new tokens per completion")
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    g.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling")
    g.add_argument("--generation_kwargs", type=json.loads, default=None, metavar="JSON",
                   help='extra sampling arguments for the generation backend, e.g. \'{"min_new_tokens": 256}\' (HF) '
                        'or \'{"min_tokens": 256}\' (vLLM)')
    g.add_argument("--beta", type=float, default=0.0, help="KL coefficient; > 0 builds a frozen reference model")
    g.add_argument("--loss_type", default="bnpo", help=f"TRL loss formulation: {', '.join(LOSS_TYPES)}")
    g.add_argument("--scale_rewards", default="group",
                   help="advantage scaling: group (divide by group std), batch, or none (true=group, false=none)")
    g.add_argument("--importance_sampling_level", choices=("token", "sequence"), default="token",
                   help="importance ratio per token, or per sequence (GSPO)")
    g.add_argument("--cast_lm_head_to_fp32", action=_BoolFlag, default=False, help="compute the LM head in fp32")
    g.add_argument("--vllm_importance_sampling_correction", action=_BoolFlag, default=True,
                   help="correct for vLLM-vs-trainer log-prob mismatch (vLLM only)")
    g.add_argument("--vllm_importance_sampling_mode", choices=IS_MODES, default="sequence_mask",
                   help="how the vLLM IS ratio is constrained")
    g.add_argument("--vllm_importance_sampling_cap", type=float, default=3.0, help="IS ratio cap")
    g.add_argument("--olmorl", action=_BoolFlag, default=False,
                   help="OLMo 3's OlmoRL objective: no std normalisation, zero-signal groups dropped, "
                        "clip-higher (0.2/0.272), token-level loss, beta 0")
    g.add_argument("--active_sampling", action=_BoolFlag, default=False,
                   help="OlmoRL only: generate groups from further pages of the epoch until every optimizer step "
                        "holds its full number of groups with signal (costs extra generation; docs/olmorl.md)")
    g.add_argument("--active_sampling_max_rounds", type=int, default=4, metavar="N",
                   help="at most N extra generation rounds per step for --active_sampling; a step still short "
                        "after them trains on what it has (logged)")
    g.add_argument("--macro_average", action=_BoolFlag, default=False,
                   help="use the macro-averaged bench reward (alias: turns --reward_bench into --reward_bench_macroavg)")

    g = p.add_argument_group("rewards (bare flag = weight 1.0; a .jsonl path = weight 1.0 on that file's tests)")
    for name in REWARD_FLAGS:
        g.add_argument(f"--reward_{name}", nargs="?", const=1.0, default=None, type=parse_reward_weight,
                       metavar="W", help=REWARD_HELP[name])
    g.add_argument("--bench_raw_completion", action=_BoolFlag, default=False,
                   help="run bench tests on the raw completion incl. front matter (olmOCR's behaviour); "
                        "default: front matter removed, as the benchmark scores it")

    g = p.add_argument_group("generation backend")
    g.add_argument("--vllm_mode", choices=VLLM_MODES, default="auto",
                   help="colocate (vLLM in the trainer process; GPU, or vLLM's CPU build), server (trl vllm-serve), "
                        "none (HF generate); auto = colocate when vLLM and a CUDA GPU are present, else none "
                        "(on CPU, HF generate is faster than starting an engine; the choice is logged)")
    g.add_argument("--vllm_server_host", default="0.0.0.0", help="vLLM server host (server mode)")
    g.add_argument("--vllm_server_port", type=int, default=8000, help="vLLM server port (server mode)")
    g.add_argument("--vllm_gpu_memory_utilization", type=float, default=0.15,
                   help="share of the GPU's memory for the colocated vLLM engine (weights + KV cache); checked "
                        "against the model's size before it loads")
    g.add_argument("--vllm_max_model_length", type=int, default=None, metavar="TOKENS",
                   help="colocated vLLM's context (prompt + completion); default: the page's largest image-token "
                        f"count at --target_longest_image_dim + {PROMPT_TEXT_TOKENS} text tokens + "
                        "--max_completion_length (not the model's 128k, whose KV cache would not fit)")
    g.add_argument("--vllm_tensor_parallel_size", type=int, default=1,
                   help="GPUs per colocated vLLM engine (must divide the number of training processes)")
    g.add_argument("--vllm_enable_sleep_mode", action=_BoolFlag, default=False,
                   help="offload the colocated engine's weights and KV cache while the trainer runs its "
                        "optimizer step (frees GPU memory, costs a weight reload per step; CUDA only)")
    g.add_argument("--vllm_dtype", choices=VLLM_DTYPES, default="auto",
                   help="dtype of the colocated vLLM engine; auto = the trainer's (bfloat16 on GPU, float32 on "
                        "CPU), so vLLM's log-probs match the trainer's")
    g.add_argument("--vllm_block_image_tokens", action=_BoolFlag, default=True,
                   help="never let vLLM sample <|image_pad|> / <|video_pad|> (one sampled pad token breaks the "
                        "training forward); passed as vLLM bad_words in colocate and server mode")

    g = p.add_argument_group("logging, checkpoints, resume")
    g.add_argument("--logging_steps", type=int, default=5, help="log every N optimizer steps")
    g.add_argument("--save_steps", type=int, default=25, help="checkpoint every N optimizer steps")
    g.add_argument("--save_total_limit", type=int, default=30, help="keep at most N checkpoints")
    g.add_argument("--eval_steps", type=int, default=None, help="evaluate every N steps (default: no evaluation)")
    g.add_argument("--report_to", default="wandb",
                   help="comma list: wandb, tensorboard, none. wandb needs an API key (`wandb login`, WANDB_API_KEY) "
                        "or WANDB_MODE=offline; it is checked before the model loads")
    g.add_argument("--wandb_project", default="olmocr-grpo-v5", help="W&B project")
    g.add_argument("--wandb_run_name", default=None, help="W&B run name")
    g.add_argument("--log_completions", action=_BoolFlag, default=True,
                   help="log the sampled completions every logging step: a console table, OUTPUT_DIR/completions/"
                        "*.parquet and the W&B table 'completions' (prompt text, completion, rewards, advantage, page)")
    g.add_argument("--num_completions_to_print", type=int, default=2, help="sample completions printed per log")
    g.add_argument("--log_multimodal", action=_BoolFlag, default=False,
                   help="log the page image beside each sampled completion in the W&B completions table "
                        "(gathers the page images across ranks at every generation)")
    g.add_argument("--s3_save_path", default=None, help="s3://bucket/prefix mirrored after every save")
    g.add_argument("--resume_from_checkpoint", nargs="?", const=True, default=None,
                   help="resume: bare flag = newest checkpoint in --output_dir (pulled from --s3_save_path "
                        "when the local dir has none; starts fresh when neither has one), or a checkpoint path")
    return p


@dataclass
class Resolved:
    """Derived settings that are not flags: what validation decided."""

    vllm_mode: str  # colocate | server | none
    num_processes: int
    reward_spec: dict[str, float | str | None]
    notices: list[str]
    vllm_max_model_length: int | None = None  # colocated engine's context (derived when not given)


def _yaml_defaults(parser: argparse.ArgumentParser, path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--config {path}: file not found")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values")
    known = {a.dest: a for a in parser._actions}
    out = {}
    for key, value in data.items():
        dest = str(key).lstrip("-").replace("-", "_")
        if dest == "num_completions":
            dest = "num_generations"
        if dest not in known or dest in ("help", "config"):
            close = [k for k in known if k.startswith(dest[:6])][:3]
            raise ConfigError(f"--config {path}: unknown key {key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        action = known[dest]
        try:
            if isinstance(action, _BoolFlag):
                value = parse_bool(value)
            elif dest.startswith("reward_") and value is not None:
                value = parse_reward_weight(value)
            elif action.type is not None and value is not None and not isinstance(value, (list, dict)):
                value = action.type(value)
            if action.choices and value is not None and value not in action.choices:
                raise argparse.ArgumentTypeError(f"choose one of {', '.join(map(str, action.choices))}")
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise ConfigError(f"--config {path}: key {key!r}: {exc}") from None
        if dest == "bench_type_filter" and isinstance(value, str):
            value = [value]
        out[dest] = value
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse flags (YAML first, command line on top). Raises SystemExit(2) with argparse's message."""
    parser = build_parser()
    pre, _ = parser.parse_known_args(argv)
    if pre.config:
        try:
            parser.set_defaults(**_yaml_defaults(parser, pre.config))
        except ConfigError as exc:
            parser.error(str(exc))
    return parser.parse_args(argv)


def _vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def validate(args: argparse.Namespace) -> Resolved:
    """Check every flag and combination; normalise aliases in ``args``. Raises ConfigError."""
    notices: list[str] = []
    if not args.train_bench_data_folder:
        raise ConfigError("--train_bench_data_folder is required: a folder with *.jsonl tests and pdfs/")
    for flag in ("train_bench_data_folder", "eval_bench_data_folder"):
        folder = getattr(args, flag)
        if folder and not Path(folder).is_dir():
            raise ConfigError(f"--{flag} {folder}: folder not found")

    # Loss type: olmOCR offered 'exo' (never a TRL loss) and guides write 'policy'.
    args.loss_type = str(args.loss_type).strip().lower()
    if args.loss_type not in LOSS_TYPES:
        raise ConfigError(
            f"--loss_type {args.loss_type!r} is not a loss type; choose one of {', '.join(LOSS_TYPES)} "
            "(olmOCR's default is bnpo; the clipped policy-gradient loss is what every one of them optimises)"
        )
    scale = str(args.scale_rewards).strip().lower()
    scale = {"true": "group", "false": "none", "1": "group", "0": "none"}.get(scale, scale)
    if scale not in ("group", "batch", "none"):
        raise ConfigError(f"--scale_rewards {args.scale_rewards!r}: choose group, batch or none (true = group)")
    args.scale_rewards = scale

    positive = ["learning_rate", "per_device_train_batch_size", "per_device_eval_batch_size",
                "gradient_accumulation_steps", "num_generations", "num_iterations", "max_completion_length",
                "logging_steps", "save_steps", "save_total_limit", "target_longest_image_dim"]
    for name in positive:
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise ConfigError(f"--{name} must be > 0 (got {getattr(args, name)})")
    for name in ("warmup_steps", "dataloader_num_workers", "beta"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name} must be >= 0 (got {getattr(args, name)})")
    if args.max_steps == 0 or args.max_steps < -1:
        raise ConfigError(f"--max_steps must be a positive number of steps, or -1 for --num_train_epochs (got {args.max_steps})")
    if args.num_train_epochs <= 0:
        raise ConfigError(f"--num_train_epochs must be > 0 (got {args.num_train_epochs})")
    if args.eval_steps is not None and args.eval_steps <= 0:
        raise ConfigError(f"--eval_steps must be > 0 (got {args.eval_steps}); omit it to turn evaluation off")
    if args.temperature <= 0:
        raise ConfigError(f"--temperature must be > 0 for sampling (got {args.temperature})")
    if not 0 < args.top_p <= 1:
        raise ConfigError(f"--top_p must be in (0, 1] (got {args.top_p})")
    if args.num_generations < 2:
        raise ConfigError(f"--num_generations must be >= 2: GRPO compares completions within a group (got {args.num_generations})")
    if args.num_iterations > 16:
        notices.append(
            f"WARNING: --num_iterations {args.num_iterations} is GRPO's mu (policy updates per generation batch), "
            f"not the run length; for a run of {args.num_iterations} steps use --max_steps {args.num_iterations} "
            "(or --num_train_epochs)"
        )
    if args.num_iterations > 1 and args.save_steps > 0 and args.save_steps % args.num_iterations:
        notices.append(
            f"WARNING: --save_steps {args.save_steps} is not a multiple of --num_iterations {args.num_iterations}: "
            "a checkpoint then falls between the policy updates of one generation batch, which checkpoints do not "
            "hold, and a run resumed there samples that batch again instead of continuing exactly; use --save_steps "
            f"{args.num_iterations * max(1, round(args.save_steps / args.num_iterations))}"
        )
    for flag in ("jsonl_filter", "pages", "exclude_pages"):
        pattern = getattr(args, flag)
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"--{flag} {pattern!r} is not a valid regex: {exc}") from None
    if args.bench_type_filter:
        from olmocr_rl.bench import TEST_TYPES

        bad = [t for t in args.bench_type_filter if t not in TEST_TYPES]
        if bad:
            raise ConfigError(f"--bench_type_filter {bad[0]!r}: unknown test type; choose from {', '.join(TEST_TYPES)}")

    # Rewards.
    spec = {name: getattr(args, f"reward_{name}") for name in REWARD_FLAGS}
    if args.macro_average:
        if spec["bench"] is not None:
            spec["bench_macroavg"], spec["bench"] = spec["bench"], None
        elif spec["bench_macroavg"] is None:
            spec["bench_macroavg"] = 1.0
        notices.append("--macro_average: using the macro-averaged bench reward (--reward_bench_macroavg)")
    if all(v is None for v in spec.values()):
        raise ConfigError(
            "no reward enabled: add at least one of " + ", ".join(f"--reward_{n}" for n in REWARD_FLAGS)
            + " (olmOCR 2's recipe: --reward_bench --reward_front_matter --reward_eos)"
        )
    for name, value in spec.items():
        if isinstance(value, str):
            spec[name] = _resolve_reward_jsonl(name, value, args.train_bench_data_folder)
        elif value is not None and not math.isfinite(value):
            # Negative weights are allowed: a penalty, or (for --reward_bench -1) the sign-flip sanity check.
            raise ConfigError(f"--reward_{name} {value}: the weight must be a finite number")
        if isinstance(spec[name], str) and name not in ("bench", "bench_macroavg"):
            raise ConfigError(f"--reward_{name} takes a weight, not a JSONL path (only bench rewards are per-file)")

    # OlmoRL fixes part of the objective; contradictions are errors, not silent overrides.
    if args.olmorl:
        from olmocr_rl.olmorl_trainer import check_olmorl_settings

        pristine = build_parser()
        explicit = {name: getattr(args, name) for name in ("loss_type", "scale_rewards", "beta", "importance_sampling_level")
                    if getattr(args, name) != pristine.get_default(name)}
        try:
            check_olmorl_settings(explicit, source="the command line / --config YAML")
        except ValueError as exc:
            raise ConfigError(" ".join(line.strip() for line in str(exc).splitlines())) from None
        notices.append("--olmorl: advantages without std, zero-signal groups dropped, eps 0.2/0.272, token-level loss")

    if args.active_sampling and not args.olmorl:
        raise ConfigError("--active_sampling refills the groups that --olmorl drops; add --olmorl or drop "
                          "--active_sampling")
    if args.active_sampling_max_rounds < 1:
        raise ConfigError(f"--active_sampling_max_rounds must be >= 1 (got {args.active_sampling_max_rounds})")

    # Batch geometry (TRL: generation batch = per-device batch x processes x steps_per_generation).
    num_processes = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = args.per_device_train_batch_size * num_processes
    generation_batch = per_step * args.gradient_accumulation_steps
    G = args.num_generations
    if generation_batch % G:
        need_ga = G // math.gcd(per_step, G)
        raise ConfigError(
            f"batch geometry: per_device_train_batch_size ({args.per_device_train_batch_size}) x processes "
            f"({num_processes}) x gradient_accumulation_steps ({args.gradient_accumulation_steps}) = {generation_batch} "
            f"completions per generation, which is not a multiple of --num_generations {G}. "
            f"Use --gradient_accumulation_steps {need_ga * max(1, args.gradient_accumulation_steps // need_ga)} "
            f"(any multiple of {need_ga}) or a --num_generations that divides {generation_batch}"
        )
    if args.active_sampling:
        from olmocr_rl.olmorl_trainer import check_active_sampling_geometry

        try:
            check_active_sampling_geometry(args.per_device_train_batch_size, args.gradient_accumulation_steps,
                                           args.gradient_accumulation_steps, G, args.active_sampling_max_rounds)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if args.eval_steps is not None:
        eval_batch = args.per_device_eval_batch_size * num_processes
        if eval_batch % G:
            raise ConfigError(
                f"eval geometry: per_device_eval_batch_size ({args.per_device_eval_batch_size}) x processes "
                f"({num_processes}) = {eval_batch} is not a multiple of --num_generations {G}; "
                f"use --per_device_eval_batch_size {G // math.gcd(num_processes, G)} (or a multiple)"
            )

    # Generation backend.
    mode, vllm_max_model_length = _resolve_generation_backend(args, num_processes, notices)
    args.report_to = [r.strip() for r in str(args.report_to).split(",") if r.strip() and r.strip() != "none"] \
        if not isinstance(args.report_to, list) else args.report_to
    for r in args.report_to:
        if r not in ("wandb", "tensorboard"):
            raise ConfigError(f"--report_to {r!r}: choose wandb, tensorboard or none (comma-separated)")
    if args.resume_from_checkpoint not in (None, True) and not isinstance(args.resume_from_checkpoint, bool):
        text = str(args.resume_from_checkpoint)
        if text.lower() in ("true", "false"):
            args.resume_from_checkpoint = text.lower() == "true" or None
        elif not Path(text).is_dir():
            raise ConfigError(f"--resume_from_checkpoint {text}: no such checkpoint folder (or pass the bare flag "
                              "to take the newest checkpoint in --output_dir)")
    if args.s3_save_path and not str(args.s3_save_path).startswith("s3://"):
        raise ConfigError(f"--s3_save_path {args.s3_save_path!r}: expected s3://bucket/prefix")
    return Resolved(vllm_mode=mode, num_processes=num_processes, reward_spec=spec, notices=notices,
                    vllm_max_model_length=vllm_max_model_length)


def max_image_tokens(longest_side: int) -> int:
    """Most image tokens a page rendered at ``longest_side`` px can take in Qwen2.5-VL (square page).

    The processor rounds each side to a multiple of 28 px (14 px patches merged 2 x 2) and gives one
    token per 28 x 28 block.
    """
    blocks = math.ceil(longest_side / 28)
    return blocks * blocks


def default_vllm_max_model_length(longest_side: int, max_completion_length: int) -> int:
    """The context a page rollout can need: image tokens + prompt text + completion."""
    return max_image_tokens(longest_side) + PROMPT_TEXT_TOKENS + max_completion_length


def _resolve_generation_backend(args: argparse.Namespace, num_processes: int, notices: list[str]) -> tuple[str, int]:
    """(colocate | server | none, vLLM max model length) from --vllm_mode and what this machine has."""
    mode = args.vllm_mode
    have_vllm, have_gpu = _vllm_available(), _cuda_available()
    if mode == "auto":
        if have_vllm and have_gpu:
            mode = "colocate"
            notices.append("vllm_mode auto: vLLM and a CUDA GPU found, generating with colocated vLLM")
        else:
            why = "vLLM is not installed" if not have_vllm else "no CUDA GPU is visible"
            hint = ("install the gpu extra for vLLM" if not have_vllm else
                    "on CPU HF generate is faster than starting an engine; --vllm_mode colocate runs vLLM's CPU build")
            notices.append(f"vllm_mode auto: {why}, generating with HF generate ({hint})")
            mode = "none"
    elif mode in ("colocate", "server") and not have_vllm:
        raise ConfigError(
            f"--vllm_mode {mode} needs vLLM importable in the trainer's environment: pip install '.[gpu]' on a GPU "
            "machine, or `bash scripts/setup_env.sh --vllm` for vLLM's CPU build (.venv-vllm); or use --vllm_mode none"
        )
    elif mode == "colocate" and not have_gpu:
        notices.append("vllm_mode colocate without a CUDA GPU: running vLLM's CPU engine")

    if args.vllm_tensor_parallel_size < 1:
        raise ConfigError(f"--vllm_tensor_parallel_size must be >= 1 (got {args.vllm_tensor_parallel_size})")
    if not 0 < args.vllm_gpu_memory_utilization <= 1:
        raise ConfigError(f"--vllm_gpu_memory_utilization must be in (0, 1] (got {args.vllm_gpu_memory_utilization})")
    if mode == "colocate" and num_processes % args.vllm_tensor_parallel_size:
        raise ConfigError(
            f"--vllm_tensor_parallel_size {args.vllm_tensor_parallel_size} must divide the number of training "
            f"processes ({num_processes}): each group of that many processes shares one colocated engine"
        )
    if mode == "colocate" and args.vllm_enable_sleep_mode and not have_gpu:
        raise ConfigError("--vllm_enable_sleep_mode needs a CUDA GPU (vLLM's CPU engine cannot sleep); drop the flag")

    derived = default_vllm_max_model_length(args.target_longest_image_dim, args.max_completion_length)
    max_len = args.vllm_max_model_length
    if max_len is None:
        max_len = derived
    elif max_len <= args.max_completion_length:
        raise ConfigError(
            f"--vllm_max_model_length {max_len} leaves no room for the prompt: it must exceed "
            f"--max_completion_length {args.max_completion_length} by the page prompt (up to "
            f"{derived - args.max_completion_length} tokens at {args.target_longest_image_dim} px); use {derived}"
        )
    elif max_len < derived and mode == "colocate":
        notices.append(
            f"WARNING: --vllm_max_model_length {max_len} is below the {derived} tokens a square "
            f"{args.target_longest_image_dim} px page + {args.max_completion_length} completion tokens can take; "
            "a longer prompt makes vLLM refuse the request"
        )
    return mode, max_len


def vllm_engine_dtype(args: argparse.Namespace) -> str:
    """The colocated engine's dtype: --vllm_dtype, or the trainer's own (bf16 on CUDA, fp32 on CPU)."""
    if args.vllm_dtype != "auto":
        return args.vllm_dtype
    return "bfloat16" if _cuda_available() else "float32"


def _resolve_reward_jsonl(name: str, value: str, train_folder: str) -> str:
    """A reward flag given a JSONL path: the file itself, or a file of that name in the train folder."""
    candidates = [Path(value), Path(train_folder) / Path(value).name]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate.resolve())
    raise ConfigError(
        f"--reward_{name} {value}: JSONL file not found (looked at {value} and {candidates[1]}); "
        f"pass a weight such as --reward_{name} 1.0, or the path of a JSONL in the bench folder"
    )


def build_grpo_config(args: argparse.Namespace, resolved: Resolved, reward_weights: list[float], tokenizer=None):
    """Map flags to TRL's GRPOConfig, with olmOCR's values where no flag exists (docs/design.md).

    ``tokenizer`` names the vision pad tokens that a vLLM backend must never sample.
    """
    import torch
    from trl import GRPOConfig

    on_gpu = torch.cuda.is_available()
    kwargs: dict[str, Any] = dict(
        output_dir=args.output_dir,
        num_train_epochs=args.num_train_epochs,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        gradient_checkpointing=args.gradient_checkpointing,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant_with_warmup" if args.lr_schedule == "constant" else "linear",
        warmup_steps=args.warmup_steps,
        logging_steps=args.logging_steps,
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        top_p=args.top_p,
        report_to=args.report_to or "none",
        run_name=args.wandb_run_name,
        remove_unused_columns=False,  # pdf_path, test_ids, ... must reach the reward functions
        bf16=on_gpu,
        use_cpu=not on_gpu,
        shuffle_dataset=True,
        seed=args.seed,
        dataloader_num_workers=args.dataloader_num_workers,
        dataloader_drop_last=True,
        loss_type=args.loss_type,
        scale_rewards=args.scale_rewards,
        beta=args.beta,
        importance_sampling_level=args.importance_sampling_level,
        reward_weights=reward_weights,
        num_iterations=args.num_iterations,
        num_generations=args.num_generations,
        cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,
        use_vllm=resolved.vllm_mode != "none",
        vllm_mode=resolved.vllm_mode if resolved.vllm_mode != "none" else "colocate",
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        vllm_server_host=args.vllm_server_host,
        vllm_server_port=args.vllm_server_port,
        vllm_importance_sampling_correction=args.vllm_importance_sampling_correction,
        vllm_importance_sampling_mode=args.vllm_importance_sampling_mode,
        vllm_importance_sampling_clip_max=args.vllm_importance_sampling_cap,
        vllm_max_model_length=resolved.vllm_max_model_length,
        vllm_tensor_parallel_size=args.vllm_tensor_parallel_size,
        vllm_enable_sleep_mode=args.vllm_enable_sleep_mode,
        generation_kwargs=args.generation_kwargs,
        log_completions=args.log_completions,
        log_multimodal=args.log_multimodal,  # TRL's default is True: page images gathered every generation
        num_completions_to_print=args.num_completions_to_print,
    )
    if resolved.vllm_mode != "none" and tokenizer is not None:
        from olmocr_rl.vllm_rollout import vllm_sampling_kwargs

        kwargs["generation_kwargs"] = vllm_sampling_kwargs(args.generation_kwargs, tokenizer,
                                                           args.vllm_block_image_tokens)
    if args.eval_steps is not None:
        kwargs.update(eval_strategy="steps", eval_steps=args.eval_steps)
    if args.dataloader_num_workers == 0:
        kwargs["dataloader_persistent_workers"] = False
    if args.olmorl:
        from olmocr_rl.olmorl_trainer import olmorl_config_overrides

        kwargs.update(olmorl_config_overrides())
    return GRPOConfig(**kwargs)
