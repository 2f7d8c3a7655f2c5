"""The flags of ``python -m olmocr_rl.grpo_train``: the parser, its groups, and the ``--config`` YAML merge.

Every flag of olmOCR's trainer keeps its name, type, default and meaning, with the fixes listed in
docs/design.md ("Where olmocr_rl differs"): booleans can be switched off (``--no-X`` or ``--X false``),
``exo`` is not a loss, ``--lr_schedule constant`` changes only the scheduler, evaluation runs when ``--eval_steps`` asks.
``--config FILE.yaml`` supplies flag values (keys = flag names); the command line overrides the file.
Each flag's default is written here and nowhere else (the page size is the renderer's, imported). Light: no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from olmocr_rl.config.rewards import flag_value, reward_table
from olmocr_rl.data.render import DEFAULT_TARGET_LONGEST_IMAGE_DIM  # the renderer's own default
from olmocr_rl.model.adapters import LORA_TARGET_MODULES  # the default of --lora_target_modules
from olmocr_rl.olmorl.settings import ACTIVE_SAMPLING_MAX_ROUNDS

# TRL 1.16's loss formulations (GRPOConfig.loss_type).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
VLLM_MODES = ("auto", "colocate", "server", "none")
VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")
#: Upper bound on a page prompt's text tokens (instructions, chat markup, vision start/end).
PROMPT_TEXT_TOKENS = 512
#: Flag aliases (another name for the same value), accepted on the command line and as YAML keys.
ALIASES = {"num_completions": "num_generations",
           "vllm_importance_sampling_clip_max": "vllm_importance_sampling_cap"}
#: Flags that take one or more values (nargs="+"), given as a YAML list or a single string in --config files.
LIST_FLAGS = ("bench_type_filter", "lora_target_modules", "lora_modules_to_save")


class ConfigError(ValueError):
    """A flag or flag combination the user must change; the message (one line) says how."""



def parse_bool(value: Any) -> bool:
    """``true``/``false`` and their usual spellings (1/0, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "y", "on"):
        return True
    if text in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _json_object(text: str) -> dict:
    """``--generation_kwargs``: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}); e.g. '{{\"min_new_tokens\": 256}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, e.g. '{{\"min_new_tokens\": 256}}', got {text!r}")
    return value


def _optional_float(value: Any) -> float | None:
    """A number, or ``none`` / ``null`` for no value (TRL's ``None``)."""
    if value is None or str(value).strip().lower() in ("none", "null"):
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or none, got {value!r}") from None


def _reward_type(key: str) -> Callable[[Any], float | str | None]:
    """argparse ``type`` of ``--reward_<key>``: the value's form (config.rewards.flag_value); validation parses it."""

    def reward_value(value: Any) -> float | str | None:
        try:
            return flag_value(key, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    reward_value.__name__ = f"reward_{key}"
    return reward_value


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


#: ``--gradient_checkpointing`` values: chosen by memory, every layer, none, only the vision tower.
CHECKPOINTING_CHOICES = ("auto", "true", "false", "vision")


def parse_checkpointing(value: Any) -> str:
    """``--gradient_checkpointing``: ``auto`` or ``vision``, or a boolean spelling (as ``true`` / ``false``)."""
    text = str(value).strip().lower() if not isinstance(value, bool) else ("true" if value else "false")
    if text in ("auto", "vision"):
        return text
    try:
        return "true" if parse_bool(text) else "false"
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto, true, false or vision, got {value!r}") from None


class _CheckpointingFlag(_BoolFlag):
    """``--gradient_checkpointing`` (true), ``--no-gradient_checkpointing`` (false), or ``--gradient_checkpointing
    auto|vision|true|false``."""

    def __init__(self, option_strings, dest, default=None, help=None, **kwargs):
        super().__init__(option_strings, dest, default=default, help=help)
        self.type, self.const = parse_checkpointing, "true"

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, "false" if option_string.startswith("--no-") else (values or "true"))


class _OneLineErrorParser(argparse.ArgumentParser):
    """A parse error is one ``error: ...`` line (exit 2), not argparse's usage block above it."""

    def error(self, message: str):
        hint = f" ({self.prog} --help lists every flag)" if "unrecognized" in message else ""
        self.exit(2, f"error: {message}{hint}\n")


def build_parser() -> argparse.ArgumentParser:
    """The trainer's parser: every flag with its one default, in olmOCR's groups."""
    parser = _OneLineErrorParser(
        prog="python -m olmocr_rl.grpo_train",
        description=(
            "GRPO fine-tuning of a vision-language OCR model (Qwen2.5-VL, Qwen3-VL dense or MoE, Qwen2-VL) on an "
            "olmOCR-bench folder, "
            "rewarded by the unit tests of each page. Flags follow olmOCR's trainer; --config FILE.yaml "
            "supplies any of them (the command line wins)."
        ),
        epilog=(
            "The value a flag will take (command line over --config YAML over default): "
            "python -m olmocr_rl.config --print KEY [these flags], or --print-all for every flag as JSON."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    group = parser.add_argument_group("config")
    group.add_argument("--config", default=None, help="YAML file of flag values (keys are flag names without --)")
    for add_group in (_add_data_flags, _add_model_flags, _add_adapter_flags, _add_optimisation_flags,
                      _add_speed_flags, _add_grpo_flags, _add_trl_knob_flags, _add_reward_flags, _add_backend_flags,
                      _add_logging_flags, _add_console_flags):
        add_group(parser)
    return parser


def _add_data_flags(parser: argparse.ArgumentParser) -> None:
    """The bench folder and which of its pages and tests are used."""
    g = parser.add_argument_group("data")
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
    g.add_argument("--target_longest_image_dim", type=int, default=DEFAULT_TARGET_LONGEST_IMAGE_DIM, help="rendered page size (longest side, px)")


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    """The model to train and where its outputs go."""
    g = parser.add_argument_group("model")
    g.add_argument("--model_name", default="Qwen/Qwen2.5-VL-7B-Instruct",
                   help="HF hub id, local folder, or s3://bucket/prefix (downloaded to --cache_dir)")
    g.add_argument("--cache_dir", default=None, help="local cache for s3:// models (default ~/.cache/olmocr_rl/s3)")
    g.add_argument("--output_dir", default="outputs/grpo_test", help="checkpoints, final model and metrics.jsonl")


def _add_adapter_flags(parser: argparse.ArgumentParser) -> None:
    """LoRA adapters and frozen vision parts: what is trained (docs/lora.md)."""
    g = parser.add_argument_group("what is trained: LoRA adapters, frozen vision tower (docs/lora.md)")
    g.add_argument("--use_peft", action=_BoolFlag, default=False,
                   help="train LoRA adapters (Hu et al. 2021, https://huggingface.co/papers/2106.09685) on the "
                        "language model instead of every weight: the base model stays frozen and only the adapters get "
                        "gradients and AdamW state (a 7B model then fits one 80 GB GPU beside colocated vLLM). The "
                        "vision tower gets no adapters (vLLM cannot serve LoRA on it) and stays frozen. LoRA usually "
                        "wants a ~10x larger --learning_rate than full fine-tuning")
    g.add_argument("--lora_r", type=int, default=16, help="LoRA rank (--use_peft)")
    g.add_argument("--lora_alpha", type=int, default=32,
                   help="LoRA alpha (--use_peft): each adapter's update is scaled by lora_alpha / lora_r")
    g.add_argument("--lora_dropout", type=float, default=0.0,
                   help="dropout on the adapters' input (--use_peft). 0 by default, unlike TRL's ModelConfig (0.05): "
                        "in GRPO the importance ratio compares the trainer's log-probs with the sampler's (vLLM, or "
                        "the same weights one forward earlier), and dropout makes them differ with equal weights")
    g.add_argument("--lora_target_modules", nargs="+", default=list(LORA_TARGET_MODULES), metavar="NAME",
                   help="the language model's linear layers that get adapters (--use_peft), by name, or all-linear "
                        "for every one of them; never the vision tower, nor lm_head (TRL reads its weight directly)")
    g.add_argument("--lora_modules_to_save", nargs="+", default=None, metavar="NAME",
                   help="modules trained in full beside the adapters and saved with them (--use_peft), e.g. merger "
                        "(the vision-language projector), or embed_tokens where it is not tied to lm_head (lm_head "
                        "itself cannot: TRL reads its weight directly)")
    g.add_argument("--save_merged", action=_BoolFlag, default=True,
                   help="with --use_peft, the final output folder holds the adapter merged into the base model at its "
                        "root (a full model, as a full fine-tune leaves it: evaluate, soup and vLLM take it as is) "
                        "and the adapter alone in OUTPUT_DIR/adapter/; false: the adapter alone at the root, as TRL "
                        "saves it")
    g.add_argument("--freeze_vision_tower", action=_BoolFlag, default=False,
                   help="do not train the vision tower (its ViT blocks and patch embedding); the merger, the "
                        "projector into the language model, stays trainable unless --freeze_vision_merger. The "
                        "tower then has no gradients or AdamW state, and each page's tower features are computed "
                        "once per step (--cache_vision_features). As verl and EasyR1 offer for VLM RL")
    g.add_argument("--freeze_vision_merger", action=_BoolFlag, default=False,
                   help="do not train the vision merger (the projector from the vision tower into the language "
                        "model)")


def _add_optimisation_flags(parser: argparse.ArgumentParser) -> None:
    """Optimizer, schedule, batch sizes and data loading."""
    g = parser.add_argument_group("optimisation")
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
    g.add_argument("--gradient_checkpointing", action=_CheckpointingFlag, default="auto", metavar="auto|true|false|vision",
                   help="recompute activations in the backward pass to save memory (Chen et al. 2016, 'Training Deep "
                        "Nets with Sublinear Memory Cost'): true = every layer (TRL's default), vision = the vision "
                        "tower only, false = none, auto = the least recomputation with which the largest micro-batch "
                        "fits the GPU (none, the vision tower, the vision tower and some decoder layers, or all), "
                        "from activation sizes measured on one layer of the model (olmocr_rl/model/checkpointing.py)")
    g.add_argument("--seed", type=int, default=42, help="seed for data order, sampling and init")
    g.add_argument("--dataloader_num_workers", type=int, default=0,
                   help="dataloader worker processes (0: render in the trainer, where the page cache serves all G "
                        "samples of a page; workers pickle every copy back, measured slower in docs/data.md)")


def _add_speed_flags(parser: argparse.ArgumentParser) -> None:
    """Speed-ups that give the same numbers as the stock path (vision tower, processor, packing, generation)."""
    g = parser.add_argument_group("speed (exact: the same numbers as the stock model)")
    g.add_argument("--share_page_encoding", action=_BoolFlag, default=True,
                   help="encode each distinct page image once per forward and reuse its features for the G "
                        "copies of the page (generation prefill and training)")
    g.add_argument("--share_page_processing", action=_BoolFlag, default=True,
                   help="run the image processor once per distinct page image of a step and repeat its pixel values "
                        "for the G copies of the page (TRL processes every copy, twice per step)")
    g.add_argument("--padding_free", action=_BoolFlag, default=True,
                   help="pack each micro-batch's real tokens into one row for the training forwards, attention kept "
                        "inside each sequence (SDPA per sequence, or flash attention's variable-length path), so "
                        "padding costs no compute (sequence packing without cross-contamination, Krell et al. 2021); "
                        "other attention implementations and model families run the padded forward")
    g.add_argument("--compiled_generation", action=_BoolFlag, default=None,
                   help="HF generation with a static KV cache and torch.compile'd decoding steps, the cache sized by "
                        "prompt lengths bucketed to 256 tokens so the compiled step is reused (TRL turns compilation "
                        "off). Default: on with a CUDA GPU; off on CPU, where compiling measured slower than it "
                        "saves (scripts/bench/bench_generation.py). No effect with vLLM")
    g.add_argument("--batched_vision_attention", action=_BoolFlag, default=None,
                   help="run the vision tower's window attention as one batched call per window size instead "
                        "of transformers' per-window loop (SDPA/eager; flash attention is already batched). "
                        "Default: on with a CUDA GPU, where the loop's ~100 kernel launches per image and layer "
                        "dominate; off on CPU, where it measured no faster (scripts/bench/bench_vision.py)")
    g.add_argument("--cache_vision_features", action=_BoolFlag, default=True,
                   help="with the vision tower frozen (--freeze_vision_tower, or --use_peft), encode each distinct "
                        "page once per optimizer step and reuse its tower features in every forward of that step "
                        "(generation prefill, old log-probs, each micro-batch); the merger still runs, with "
                        "gradients when it is trained (scripts/bench/bench_frozen_vision.py)")


def _add_grpo_flags(parser: argparse.ArgumentParser) -> None:
    """GRPO's objective, sampling, and OlmoRL."""
    g = parser.add_argument_group("GRPO")
    g.add_argument("--num_generations", "--num_completions", dest="num_generations", type=int, default=28,
                   help="completions sampled per page (group size G); --num_completions is an alias")
    g.add_argument("--num_iterations", type=int, default=1,
                   help="GRPO's mu: policy updates per generation batch (NOT the number of training steps)")
    g.add_argument("--max_completion_length", type=int, default=8000, help="max new tokens per completion")
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    g.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling")
    g.add_argument("--generation_kwargs", type=_json_object, default=None, metavar="JSON",
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
    g.add_argument("--vllm_importance_sampling_cap", "--vllm_importance_sampling_clip_max",
                   dest="vllm_importance_sampling_cap", type=_optional_float, default=3.0,
                   help="upper bound C_max of the vLLM IS ratio (TRL: vllm_importance_sampling_clip_max; "
                        "--vllm_importance_sampling_clip_max is an alias): *_truncate modes clip ratios above it, "
                        "*_mask modes zero them; none = no upper bound. A sequence ratio is the product of its "
                        "tokens' ratios, so sequence_* modes need a larger cap on long pages (docs/vllm.md)")
    g.add_argument("--olmorl", action=_BoolFlag, default=False,
                   help="OLMo 3's OlmoRL objective: no std normalisation, zero-signal groups dropped, "
                        "clip-higher (0.2/0.272), token-level loss, beta 0")
    g.add_argument("--active_sampling", action=_BoolFlag, default=False,
                   help="OlmoRL only: generate groups from further pages of the epoch until every optimizer step "
                        "holds its full number of groups with signal (costs extra generation; docs/olmorl.md)")
    g.add_argument("--active_sampling_max_rounds", type=int, default=ACTIVE_SAMPLING_MAX_ROUNDS, metavar="N",
                   help="at most N extra generation rounds per step for --active_sampling; a step still short "
                        "after them trains on what it has (logged)")
    g.add_argument("--router_aux_loss_coef", type=float, default=None, metavar="W",
                   help="mixture-of-experts models only (Qwen3-VL-MoE): weight of the router's load-balancing loss "
                        "added to the GRPO loss (Switch Transformers, Fedus et al. 2021; TRL's router_aux_loss_coef), "
                        "logged as aux_loss; default: the model config's router_aux_loss_coef (0.001 in Qwen3-VL-30B-A3B); "
                        "0 turns it off")
    g.add_argument("--macro_average", action=_BoolFlag, default=False,
                   help="use the macro-averaged bench reward (alias: turns --reward_bench into --reward_bench_macroavg)")


#: TRL GRPOConfig fields exposed by ``_add_trl_knob_flags`` under their own names; the flag's default is TRL 1.16's
#: (olmOCR sets none of them), so a run that gives none of them builds the GRPOConfig it built before they existed.
TRL_KNOB_FLAGS = (
    "epsilon", "epsilon_high", "delta", "mask_truncated_completions", "top_entropy_quantile",
    "off_policy_mask_threshold", "entropy_coef", "multi_objective_aggregation", "steps_per_generation",
    "generation_batch_size", "num_generations_eval", "disable_dropout", "top_k", "min_p", "repetition_penalty",
    "vllm_importance_sampling_clip_min", "vllm_model_impl",
)
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
VLLM_MODEL_IMPLS = ("vllm", "transformers")


def _add_trl_knob_flags(parser: argparse.ArgumentParser) -> None:
    """TRL GRPOConfig knobs under TRL's names and defaults (``TRL_KNOB_FLAGS``), passed through unchanged."""
    g = parser.add_argument_group(
        "GRPO knobs (TRL GRPOConfig fields: same name, same default; --olmorl fixes the clip, entropy and "
        "aggregation ones)")
    g.add_argument("--epsilon", type=float, default=0.2,
                   help="TRL epsilon: lower clip of the policy ratio, clip(ratio, 1 - epsilon, 1 + epsilon_high) "
                        "(PPO, Schulman et al. 2017)")
    g.add_argument("--epsilon_high", type=_optional_float, default=None,
                   help="TRL epsilon_high: upper clip of the policy ratio; none = --epsilon. DAPO (Yu et al. 2025) "
                        "recommends 0.28 ('clip-higher'); with --loss_type cispo it is ScaleRL's eps_max (5.0)")
    g.add_argument("--delta", type=_optional_float, default=None,
                   help="TRL delta: two-sided GRPO, the unclipped ratio is also capped at delta (INTELLECT-2 tech "
                        "report, 2025); should exceed 1 + epsilon_high; none = standard clipping")
    g.add_argument("--mask_truncated_completions", action=_BoolFlag, default=False,
                   help="TRL mask_truncated_completions: leave completions that reach --max_completion_length "
                        "without EOS out of the loss (DAPO's overlong filtering: a page that loops until the cap "
                        "is not trained on as if it had ended)")
    g.add_argument("--top_entropy_quantile", type=float, default=1.0,
                   help="TRL top_entropy_quantile: train only on the top-rho share of tokens by entropy; 1.0 = "
                        "every token ('Beyond the 80/20 Rule', Wang et al. 2025, recommends 0.2)")
    g.add_argument("--off_policy_mask_threshold", type=_optional_float, default=None,
                   help="TRL off_policy_mask_threshold: drop sequences with negative advantage whose KL from the "
                        "sampling policy exceeds this (DeepSeek-V3.2's off-policy sequence masking, e.g. 0.5); "
                        "none = off")
    g.add_argument("--entropy_coef", type=float, default=0.0,
                   help="TRL entropy_coef: weight of a mean per-token entropy bonus in the loss (keeps "
                        "exploration; Skywork-OR1, He et al. 2025); 0 = none")
    g.add_argument("--multi_objective_aggregation", choices=MULTI_OBJECTIVE_AGGREGATIONS, default="sum_then_normalize",
                   help="TRL multi_objective_aggregation: sum the weighted rewards then normalise, or normalise each "
                        "reward within its group then sum (GDPO, Liu et al. 2026)")
    g.add_argument("--steps_per_generation", type=int, default=None, metavar="N",
                   help="TRL steps_per_generation: micro-steps fed by one generation batch; none = "
                        "--gradient_accumulation_steps (larger values reuse one generation over several optimizer "
                        "steps, each further off-policy)")
    g.add_argument("--generation_batch_size", type=int, default=None, metavar="N",
                   help="TRL generation_batch_size: completions per generation over all processes (a multiple of "
                        "per-device batch x processes and of --num_generations); none = from --steps_per_generation. "
                        "Set at most one of the two")
    g.add_argument("--num_generations_eval", type=int, default=None, metavar="G",
                   help="TRL num_generations_eval: completions per page in evaluation; none = --num_generations")
    g.add_argument("--disable_dropout", action=_BoolFlag, default=False,
                   help="TRL disable_dropout: turn the model's dropout off, so log-probs of the same completion "
                        "agree between forwards (useful with a --beta reference model)")
    g.add_argument("--top_k", type=int, default=0,
                   help="TRL top_k: sample from the k most likely tokens; 0 = off. With vLLM's importance-sampling "
                        "correction on, truncated sampling biases the ratio (trl#6789; docs/vllm.md)")
    g.add_argument("--min_p", type=_optional_float, default=None,
                   help="TRL min_p: drop tokens below min_p x the top token's probability; none = off (same bias "
                        "as --top_k)")
    g.add_argument("--repetition_penalty", type=float, default=1.0,
                   help="TRL repetition_penalty: > 1 discourages repeating tokens (Keskar et al. 2019, CTRL); 1.0 = "
                        "off. vLLM's log-probs include it and the trainer's do not, so it biases the IS ratio")
    g.add_argument("--vllm_importance_sampling_clip_min", type=_optional_float, default=None, metavar="C_MIN",
                   help="TRL vllm_importance_sampling_clip_min: lower bound of the vLLM IS ratio (*_truncate: clip "
                        "below it, *_mask: zero below it); none = no lower bound")
    g.add_argument("--vllm_model_impl", choices=VLLM_MODEL_IMPLS, default="vllm",
                   help="TRL vllm_model_impl: vLLM's own model code, or transformers' modelling code run by vLLM")


def _add_reward_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--reward_<key>`` flag per row of the reward table (olmocr_rl.config.rewards), and how bench tests see
    a completion."""
    g = parser.add_argument_group("rewards (bare flag = weight 1.0; a .jsonl path = weight 1.0 on that file's tests)")
    for entry in reward_table():
        g.add_argument(entry.flag, nargs="?", const=1.0, default=None, type=_reward_type(entry.key),
                       metavar="W", help=entry.help)
    g.add_argument("--bench_raw_completion", action=_BoolFlag, default=False,
                   help="run bench tests on the raw completion incl. front matter (olmOCR's behaviour); "
                        "default: front matter removed, as the benchmark scores it")


def _add_backend_flags(parser: argparse.ArgumentParser) -> None:
    """Generation backend: vLLM (colocated or server) or HF generate."""
    g = parser.add_argument_group("generation backend")
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


def _add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """Logging, W&B, checkpoints, the S3 mirror and resume."""
    g = parser.add_argument_group("logging, checkpoints, resume")
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
    g.add_argument("--profile_step", type=int, default=None, metavar="N",
                   help="profile optimizer step N with torch.profiler and write OUTPUT_DIR/profile_step_N.json: per "
                        "phase (generation, rewards, training) its wall time, GPU busy share, kernel count, top "
                        "operators, and whether it is compute-bound or launch-bound")
    g.add_argument("--s3_save_path", default=None, help="s3://bucket/prefix mirrored after every save")
    g.add_argument("--resume_from_checkpoint", nargs="?", const=True, default=None,
                   help="resume: bare flag = the newest checkpoint that verifies, in --output_dir or on --s3_save_path "
                        "(pulled when that one is newer; starts fresh when neither has one; a run already at its "
                        "last step exits with 'already finished'), or a checkpoint path")
    g.add_argument("--allow_partial_resume", action=_BoolFlag, default=False,
                   help="resume from a checkpoint that has no optimizer.pt or scheduler.pt (e.g. saved with "
                        "save_only_model) with a warning: Adam's moments start from zero (the learning-rate "
                        "schedule is moved on to the checkpoint's step); without it such a resume is an error")
    g.add_argument("--apply_learning_rate_on_resume", action=_BoolFlag, default=False,
                   help="on resume, train on with this run's --learning_rate (the checkpoint's schedule state, "
                        "which holds the learning rate it was saved with, wins without it)")
    g.add_argument("--overwrite_output_dir", action=_BoolFlag, default=False,
                   help="start a new run in an --output_dir that holds an earlier run's checkpoints or history: "
                        "they are deleted first (without it such a start is an error; S3 is never touched)")
    g.add_argument("--preempt_upload_timeout", type=float, default=240.0, metavar="SECONDS",
                   help="after SIGTERM/SIGUSR1/SIGINT the run finishes its step, saves a checkpoint and uploads it "
                        "to --s3_save_path within this many seconds of the signal (then exits with status 75; "
                        "an upload still running then is left, the checkpoint stays on local disk). Slurm's "
                        "USR1 comes 300 s before the time limit")


def _add_console_flags(parser: argparse.ArgumentParser) -> None:
    """What the console shows (metrics.jsonl and W&B always get every number)."""
    g = parser.add_argument_group("console")
    g.add_argument("--console_detail_steps", type=int, default=None, metavar="N",
                   help="print the per test type and per JSONL pass-rate tables every N steps (over the steps since "
                        "the last ones) and at the end; default: with each checkpoint (--save_steps); 0 = only at "
                        "the end. The compact row prints at every logging step")
    g.add_argument("--console_raw_metrics", action=_BoolFlag, default=False,
                   help="also print the Trainer's raw metrics dict at every logging step (every key goes to "
                        "metrics.jsonl and W&B either way)")


def flag_key(name: str) -> str:
    """The attribute a flag or YAML key names: ``--num-completions`` -> ``num_generations``."""
    dest = str(name).lstrip("-").replace("-", "_")
    return ALIASES.get(dest, dest)


def _yaml_value(action: argparse.Action, value: Any) -> Any:
    """A YAML value converted as the command line converts it. Raises ArgumentTypeError or ValueError."""
    if isinstance(value, list) and action.dest not in LIST_FLAGS:
        raise argparse.ArgumentTypeError(f"expected a single value, got a list {value!r}")
    if isinstance(value, dict):
        if action.dest != "generation_kwargs":
            raise argparse.ArgumentTypeError(f"expected a single value, got a mapping {value!r}")
        return value
    if isinstance(action, _BoolFlag):
        value = action.type(value)
    elif action.type is int and isinstance(value, float):
        value = action.type(str(value))  # 1.5 is refused as on the command line, not truncated to 1
    elif action.type is not None and value is not None and not isinstance(value, list):
        value = action.type(value)
    if action.choices and value is not None and value not in action.choices:
        raise argparse.ArgumentTypeError(f"choose one of {', '.join(map(str, action.choices))}")
    if action.dest in LIST_FLAGS and isinstance(value, str):
        value = [value]
    return value


def yaml_defaults(parser: argparse.ArgumentParser, path: str) -> dict[str, Any]:
    """The flag values in a ``--config`` YAML file, converted like the command line. Raises ConfigError."""
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
        dest = flag_key(key)
        if dest not in known or dest in ("help", "config"):
            close = [k for k in known if k.startswith(dest[:6])][:3]
            raise ConfigError(f"--config {path}: unknown key {key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        try:
            out[dest] = _yaml_value(known[dest], value)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise ConfigError(f"--config {path}: key {key!r}: {exc}") from None
    return out


#: Attribute ``parse_args`` adds to its Namespace (not a flag): the flags the user chose.
CHOSEN = "_chosen"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse flags (YAML first, command line on top). A bad flag or file: one ``error:`` line, SystemExit(2).

    The Namespace also holds, as ``CHOSEN``, the flags the user chose: given on the command line or as keys of
    the ``--config`` file, whatever their value (a flag set to its default value is still chosen).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    pre, _ = parser.parse_known_args(argv)
    from_file: dict[str, Any] = {}
    if pre.config:
        try:
            from_file = yaml_defaults(parser, pre.config)
        except ConfigError as exc:
            parser.error(str(exc))
        parser.set_defaults(**from_file)
    args = parser.parse_args(argv)
    setattr(args, CHOSEN, frozenset(from_file) | _given_on_command_line(argv))
    return args


def _given_on_command_line(argv: list[str]) -> set[str]:
    """The flags (dest names) written in ``argv`` (already parsed once, so it parses)."""
    parser = build_parser()
    for action in parser._actions:  # a flag without a default is in the Namespace only when it was given
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"config", "help"}


def explicit_flags(argv: list[str]) -> set[str]:
    """The flags (dest names) the user chose in ``argv`` (see parse_args). Raises SystemExit(2) as parse_args."""
    return set(getattr(parse_args(argv), CHOSEN))


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """Every flag's value in ``args`` (without what parse_args adds that is not a flag)."""
    return {name: value for name, value in vars(args).items() if not name.startswith("_")}
