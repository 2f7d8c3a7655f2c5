"""The checks behind ``validate``: small pure functions of the parsed flags and the environment facts.

``check_*`` return the problems they find (one ``error:``-ready line each; validation reports the first);
``resolve_*`` return the values the run will use (with any notices) and raise ConfigError for a problem.
None of them probes the machine (``environment.probe_environment`` does, once) or changes ``args``.
"""

from __future__ import annotations

import math
import re
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from olmocr_rl.config.environment import Environment
from olmocr_rl.config.rewards import RewardValue, no_reward_message, parse_reward, reward_table
from olmocr_rl.config.values import LOSS_TYPES, PROMPT_TEXT_TOKENS, ConfigError

Problems = list[str]

_POSITIVE = ("learning_rate", "per_device_train_batch_size", "per_device_eval_batch_size",
             "gradient_accumulation_steps", "num_generations", "num_iterations", "max_completion_length",
             "logging_steps", "save_steps", "save_total_limit", "target_longest_image_dim", "max_train_samples",
             "max_eval_samples", "preempt_upload_timeout", "profile_step", "max_staleness")
_NON_NEGATIVE = ("warmup_steps", "dataloader_num_workers", "beta")
#: The GRPOConfig values --olmorl fixes that also have a flag.
OLMORL_FLAGS = ("loss_type", "scale_rewards", "beta", "importance_sampling_level",
                "epsilon", "epsilon_high", "delta", "top_entropy_quantile", "off_policy_mask_threshold",
                "entropy_coef", "multi_objective_aggregation")


def check_folders(a: Namespace) -> Problems:
    """The train folder is given; the bench folders named exist."""
    if not a.train_bench_data_folder:
        return ["--train_bench_data_folder is required: a folder with *.jsonl tests and pdfs/"]
    return [f"--{flag} {folder}: folder not found"
            for flag, folder in (("train_bench_data_folder", a.train_bench_data_folder),
                                 ("eval_bench_data_folder", a.eval_bench_data_folder))
            if folder and not Path(folder).is_dir()]


def resolve_loss(a: Namespace) -> tuple[str, str]:
    """``(loss_type, scale_rewards)`` in TRL's spelling. olmOCR offered 'exo' (never a TRL loss); guides write 'policy'."""
    loss_type = str(a.loss_type).strip().lower()
    if loss_type not in LOSS_TYPES:
        raise ConfigError(
            f"--loss_type {loss_type!r} is not a loss type; choose one of {', '.join(LOSS_TYPES)} "
            "(olmOCR's default is bnpo; the clipped policy-gradient loss is what every one of them optimises)"
        )
    scale = str(a.scale_rewards).strip().lower()
    scale = {"true": "group", "false": "none", "1": "group", "0": "none"}.get(scale, scale)
    if scale not in ("group", "batch", "none"):
        raise ConfigError(f"--scale_rewards {a.scale_rewards!r}: choose group, batch or none (true = group)")
    return loss_type, scale


def check_ranges(a: Namespace) -> Problems:
    """Every numeric flag within its range."""
    problems = [f"--{name} must be > 0 (got {getattr(a, name)})" for name in _POSITIVE
                if getattr(a, name) is not None and getattr(a, name) <= 0]
    problems += [f"--{name} must be >= 0 (got {getattr(a, name)})" for name in _NON_NEGATIVE if getattr(a, name) < 0]
    if a.max_steps == 0 or a.max_steps < -1:
        problems.append(f"--max_steps must be a positive number of steps, or -1 for --num_train_epochs (got {a.max_steps})")
    if a.num_train_epochs <= 0:
        problems.append(f"--num_train_epochs must be > 0 (got {a.num_train_epochs})")
    if a.eval_steps is not None and a.eval_steps <= 0:
        problems.append(f"--eval_steps must be > 0 (got {a.eval_steps}); omit it to turn evaluation off")
    if a.temperature <= 0:
        problems.append(f"--temperature must be > 0 for sampling (got {a.temperature})")
    if not 0 < a.top_p <= 1:
        problems.append(f"--top_p must be in (0, 1] (got {a.top_p})")
    if a.router_aux_loss_coef is not None and a.router_aux_loss_coef < 0:
        problems.append(f"--router_aux_loss_coef must be >= 0 (got {a.router_aux_loss_coef}); 0 turns the "
                        "load-balancing loss off, omitting the flag keeps the model config's")
    if a.num_generations < 2:
        problems.append(f"--num_generations must be >= 2: GRPO compares completions within a group "
                        f"(got {a.num_generations})")
    return problems


def schedule_notices(a: Namespace) -> list[str]:
    """Warnings for --num_iterations taken as a run length, and checkpoints inside a generation batch."""
    notices = []
    mu = a.num_iterations
    if mu > 16:
        notices.append(f"WARNING: --num_iterations {mu} is GRPO's mu (policy updates per generation batch), "
                       f"not the run length; for a run of {mu} steps use --max_steps {mu} (or --num_train_epochs)")
    if mu > 1 and a.save_steps > 0 and a.save_steps % mu:
        notices.append(
            f"WARNING: --save_steps {a.save_steps} is not a multiple of --num_iterations {mu}: "
            "a checkpoint then falls between the policy updates of one generation batch, which checkpoints do not "
            "hold, and a run resumed there samples that batch again instead of continuing exactly; use --save_steps "
            f"{mu * max(1, round(a.save_steps / mu))}"
        )
    return notices


def check_filters(a: Namespace) -> Problems:
    """The page and file regexes compile; the test types exist."""
    problems = []
    for flag in ("jsonl_filter", "pages", "exclude_pages"):
        pattern = getattr(a, flag)
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"--{flag} {pattern!r} is not a valid regex: {exc}")
    if a.bench_type_filter:
        from olmocr_rl.bench import test_types

        known = test_types()
        problems += [f"--bench_type_filter {t!r}: unknown test type; choose from {', '.join(known)}"
                     for t in a.bench_type_filter if t not in known]
    return problems


def resolve_rewards(a: Namespace) -> tuple[dict[str, RewardValue], list[str]]:
    """``(rewards, notices)``: each enabled reward's parsed value (weight, or a per-file reward's resolved JSONL),
    in the table's order. The builder takes these values as they are."""
    given = {entry.key: getattr(a, entry.dest) for entry in reward_table()}
    notices = []
    if a.macro_average:  # olmOCR's alias: --reward_bench becomes --reward_bench_macroavg
        if given["bench"] is not None:
            given["bench_macroavg"], given["bench"] = given["bench"], None
        elif given["bench_macroavg"] is None:
            given["bench_macroavg"] = 1.0
        notices.append("--macro_average: using the macro-averaged bench reward (--reward_bench_macroavg)")
    rewards: dict[str, RewardValue] = {}
    for key, value in given.items():
        try:
            parsed = parse_reward(key, value, a.train_bench_data_folder)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if parsed is not None:
            rewards[key] = parsed
    if not rewards:
        raise ConfigError(no_reward_message())
    return rewards, notices


def check_olmorl(a: Namespace, explicit: Mapping[str, Any]) -> Problems:
    """--olmorl against the objective values set explicitly (``explicit``); --active_sampling's needs."""
    problems = []
    if a.olmorl:
        from olmocr_rl.olmorl.settings import check_olmorl_settings

        try:
            check_olmorl_settings(explicit, source="the command line / --config YAML")
        except ValueError as exc:
            problems.append(" ".join(line.strip() for line in str(exc).splitlines()))
    if a.active_sampling and not a.olmorl:
        problems.append("--active_sampling refills the groups that --olmorl drops; add --olmorl or drop "
                        "--active_sampling")
    return problems


#: Flags that only mean something with --use_peft.
LORA_FLAGS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_adapters(a: Namespace, chosen: frozenset[str] | set[str]) -> Problems:
    """--use_peft and the --lora_* flags (``chosen``: the flags the user set); the frozen vision parts.

    Whether the names match the model's modules is checked on the model's config before its weights load
    (olmocr_rl.model.adapters)."""
    if not a.use_peft:
        given = [name for name in LORA_FLAGS if name in chosen]
        return [f"--{given[0]} only applies to LoRA training; add --use_peft (or drop --{given[0]})"] if given else []
    problems = []
    if a.lora_r < 1:
        problems.append(f"--lora_r must be >= 1 (got {a.lora_r})")
    if a.lora_alpha <= 0:
        problems.append(f"--lora_alpha must be > 0 (got {a.lora_alpha})")
    if not 0 <= a.lora_dropout < 1:
        problems.append(f"--lora_dropout must be in [0, 1) (got {a.lora_dropout})")
    for flag in ("lora_target_modules", "lora_modules_to_save"):
        for name in getattr(a, flag) or ():
            if name == "all-linear" and flag == "lora_target_modules":
                continue
            if not _MODULE_NAME.match(name):
                problems.append(f"--{flag} {name!r}: expected a module name such as q_proj (one name per value, "
                                "no dots or patterns)" + (" or all-linear" if flag == "lora_target_modules" else ""))
    for flag in ("lora_target_modules", "lora_modules_to_save"):
        if "lm_head" in (getattr(a, flag) or ()):
            problems.append(f"--{flag} lm_head: TRL computes log-probs from lm_head's own weight directly, so "
                            "neither an adapter nor a trained copy of it would ever train; drop lm_head (a full "
                            "fine-tune without --use_peft trains it)")
    if a.freeze_vision_merger and "merger" in (a.lora_modules_to_save or ()):
        problems.append("--freeze_vision_merger and --lora_modules_to_save merger contradict each other; drop one")
    return problems


def adapter_notices(a: Namespace, chosen: frozenset[str] | set[str]) -> list[str]:
    """What the adapter and freezing flags do in this run, for the log."""
    notices = []
    if a.use_peft:
        notices.append(f"--use_peft: LoRA r={a.lora_r} alpha={a.lora_alpha} on the language model's "
                       f"{' '.join(a.lora_target_modules)}; the base model and the vision tower stay frozen")
        if a.freeze_vision_tower:
            notices.append("--freeze_vision_tower: LoRA already leaves the vision tower frozen (it gets no adapters)")
    elif "save_merged" in chosen:
        notices.append("--save_merged applies to --use_peft runs only; a full fine-tune saves its model as is")
    return notices


def check_geometry(a: Namespace, num_processes: int) -> Problems:
    """Batch geometry (TRL: generation batch = per-device batch x processes x steps_per_generation)."""
    per_step = a.per_device_train_batch_size * num_processes
    steps_per_generation, problems = resolve_steps_per_generation(a, num_processes)
    if problems:
        return problems
    generation_batch = per_step * steps_per_generation
    G = a.num_generations
    if generation_batch % G and steps_per_generation != a.gradient_accumulation_steps:
        return [f"batch geometry: the generation batch (per_device_train_batch_size {a.per_device_train_batch_size} x "
                f"processes {num_processes} x steps_per_generation {steps_per_generation} = {generation_batch} "
                f"completions) is not a multiple of --num_generations {G}; use a --steps_per_generation or "
                f"--generation_batch_size that makes it one (e.g. --generation_batch_size {math.lcm(per_step, G)})"]
    if generation_batch % G:
        need_ga = G // math.gcd(per_step, G)
        return [
            f"batch geometry: per_device_train_batch_size ({a.per_device_train_batch_size}) x processes "
            f"({num_processes}) x gradient_accumulation_steps ({a.gradient_accumulation_steps}) = {generation_batch} "
            f"completions per generation, which is not a multiple of --num_generations {G}. "
            f"Use --gradient_accumulation_steps {need_ga * max(1, a.gradient_accumulation_steps // need_ga)} "
            f"(any multiple of {need_ga}) or a --num_generations that divides {generation_batch}"
        ]
    if a.active_sampling:  # also checks --active_sampling_max_rounds (the trainer's own check, for direct users)
        from olmocr_rl.olmorl.settings import check_active_sampling_geometry

        try:
            check_active_sampling_geometry(a.per_device_train_batch_size, steps_per_generation,
                                           a.gradient_accumulation_steps, G, a.active_sampling_max_rounds)
        except ValueError as exc:
            return [str(exc)]
    eval_batch = a.per_device_eval_batch_size * num_processes
    G_eval = a.num_generations_eval or G
    flag = "--num_generations_eval" if a.num_generations_eval else "--num_generations"
    if a.eval_steps is not None and eval_batch % G_eval:
        return [f"eval geometry: per_device_eval_batch_size ({a.per_device_eval_batch_size}) x processes "
                f"({num_processes}) = {eval_batch} is not a multiple of {flag} {G_eval}; "
                f"use --per_device_eval_batch_size {G_eval // math.gcd(num_processes, G_eval)} (or a multiple)"]
    return []


def resolve_steps_per_generation(a: Namespace, num_processes: int) -> tuple[int, Problems]:
    """TRL's steps_per_generation from --steps_per_generation / --generation_batch_size (at most one), else
    --gradient_accumulation_steps; with the problem when the two are set or do not divide."""
    per_step = a.per_device_train_batch_size * num_processes
    if a.steps_per_generation is not None and a.generation_batch_size is not None:
        return a.gradient_accumulation_steps, [
            "--steps_per_generation and --generation_batch_size both set the generation batch; give at most one"]
    if a.generation_batch_size is not None:
        if a.generation_batch_size % per_step:
            return a.gradient_accumulation_steps, [
                f"--generation_batch_size {a.generation_batch_size} must be a multiple of per_device_train_batch_size "
                f"({a.per_device_train_batch_size}) x processes ({num_processes}) = {per_step}; use "
                f"{per_step * max(1, round(a.generation_batch_size / per_step))}"]
        return a.generation_batch_size // per_step, []
    return a.steps_per_generation or a.gradient_accumulation_steps, []


def check_trl_knobs(a: Namespace) -> Problems:
    """The TRL GRPOConfig knobs (flags.TRL_KNOB_FLAGS) within the ranges where they mean something."""
    problems = []
    if not 0 <= a.epsilon < 1:
        problems.append(f"--epsilon must be in [0, 1): the ratio's lower clip is 1 - epsilon (got {a.epsilon})")
    if a.epsilon_high is not None and a.epsilon_high < 0:
        problems.append(f"--epsilon_high must be >= 0 (got {a.epsilon_high}); none = --epsilon")
    if a.delta is not None and a.delta <= 1:
        problems.append(f"--delta caps the ratio and must be > 1 (got {a.delta}; INTELLECT-2 suggests more than "
                        "1 + --epsilon_high); none = off")
    if not 0 <= a.top_entropy_quantile <= 1:
        problems.append(f"--top_entropy_quantile must be in [0, 1] (got {a.top_entropy_quantile}); 1.0 = every token")
    if a.off_policy_mask_threshold is not None and a.off_policy_mask_threshold <= 0:
        problems.append(f"--off_policy_mask_threshold must be > 0 (got {a.off_policy_mask_threshold}); none = off")
    if not math.isfinite(a.entropy_coef) or a.entropy_coef < 0:
        problems.append(f"--entropy_coef must be >= 0 (got {a.entropy_coef}): it weights an entropy bonus")
    for name in ("steps_per_generation", "generation_batch_size"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            problems.append(f"--{name} must be >= 1 (got {getattr(a, name)}); omit it for TRL's default")
    if a.num_generations_eval is not None and a.num_generations_eval < 1:
        problems.append(f"--num_generations_eval must be >= 1 (got {a.num_generations_eval})")
    if a.top_k < 0:
        problems.append(f"--top_k must be >= 0 (got {a.top_k}); 0 = off")
    if a.min_p is not None and not 0 <= a.min_p <= 1:
        problems.append(f"--min_p must be in [0, 1] (got {a.min_p}); none = off")
    if a.repetition_penalty <= 0:
        problems.append(f"--repetition_penalty must be > 0 (got {a.repetition_penalty}); 1.0 = off")
    return problems + _check_is_bounds(a)


def check_console(a: Namespace) -> Problems:
    """--console_detail_steps is a step count (0 = only at the end)."""
    if a.console_detail_steps is not None and a.console_detail_steps < 0:
        return [f"--console_detail_steps must be >= 0 (got {a.console_detail_steps}); 0 = only at the end"]
    return []


def _check_is_bounds(a: Namespace) -> Problems:
    low, high = a.vllm_importance_sampling_clip_min, a.vllm_importance_sampling_cap
    if low is not None and low < 0:
        return [f"--vllm_importance_sampling_clip_min must be >= 0 (got {low}); none = no lower bound"]
    if high is not None and high <= 0:
        return [f"--vllm_importance_sampling_cap must be > 0 (got {high}); none = no upper bound"]
    if low is not None and high is not None and low >= high:
        return [f"--vllm_importance_sampling_clip_min {low} must be below --vllm_importance_sampling_cap {high}"]
    if (a.vllm_importance_sampling_correction and a.vllm_importance_sampling_mode.endswith("_truncate")
            and low is None and high is None):
        return [f"--vllm_importance_sampling_mode {a.vllm_importance_sampling_mode} needs a bound: set "
                "--vllm_importance_sampling_cap or --vllm_importance_sampling_clip_min"]
    return []


#: Sampling settings that reshape vLLM's processed log-probs while the trainer's stay plain (top-p/top-k/min-p
#: renormalise over the kept tokens; penalties, min_tokens and logit_bias change the logits), each with the test
#: that it is off.
_SAMPLING_IS_OFF = {
    "top_p": lambda v: v is None or v >= 1, "top_k": lambda v: v is None or v <= 0,
    "min_p": lambda v: not v, "repetition_penalty": lambda v: v is None or v == 1,
    "presence_penalty": lambda v: not v, "frequency_penalty": lambda v: not v,
    "min_tokens": lambda v: not v, "logit_bias": lambda v: not v,
}


def _biasing_sampling(a: Namespace) -> list[str]:
    """The sampling settings in effect that make vLLM's log-probs differ from the trainer's, as ``name=value``
    (``--generation_kwargs`` overrides the flags, as in TRL)."""
    settings = {"top_p": a.top_p, "top_k": a.top_k, "min_p": a.min_p, "repetition_penalty": a.repetition_penalty}
    settings.update({k: v for k, v in dict(a.generation_kwargs or {}).items() if k in _SAMPLING_IS_OFF})
    return [f"{k}={v}" for k, v in settings.items() if not _SAMPLING_IS_OFF[k](v)]


def importance_sampling_notices(a: Namespace, vllm_mode: str) -> list[str]:
    """A warning when vLLM's sampling is reshaped while its importance-sampling correction is on."""
    if vllm_mode == "none" or not a.vllm_importance_sampling_correction:
        return []
    biased = _biasing_sampling(a)
    if not biased:
        return []
    return [f"WARNING: {', '.join(biased)} with --vllm_importance_sampling_correction: vLLM reports the log-probs "
            "of the truncated or penalised distribution it sampled from, the trainer those of the plain model, so "
            "every token's IS ratio carries that difference (top_p 0.9 makes it about 0.9 a token, trl#6789) and a "
            "sequence's ratio its product over the page; sample with the plain distribution (top_p 1, top_k 0, "
            "no min_p / penalties / min_tokens) or turn the correction off (--no-vllm_importance_sampling_correction)"]


def shared_prefix_notices(a: Namespace, vllm_mode: str, steps_per_generation: int) -> list[str]:
    """What ``--shared_prefix`` cannot share under this batch geometry. The training forwards share a page's prompt
    among the completions one process trains in one optimizer step (its micro-batches, served page by page), the
    old-policy and reference log-probs among those of one generation batch, HF generation's prefill among the G
    samples of a page."""
    if not a.shared_prefix or a.per_device_train_batch_size * a.gradient_accumulation_steps > 1:
        return []
    others = []
    if a.per_device_train_batch_size * steps_per_generation > 1:
        others.append("the old-policy and reference log-probs of a generation batch")
    if vllm_mode == "none":
        others.append("generation's prefill")
    shared = f"only {' and '.join(others)} share it" if others else "nothing shares it"
    return [f"--shared_prefix: with --per_device_train_batch_size 1 and --gradient_accumulation_steps 1 each optimizer "
            f"step trains one completion a process, so the training forwards forward every page prompt ({shared}); "
            f"a process shares a page's prompt among the completions it trains in one optimizer step"]


def max_image_tokens(longest_side: int) -> int:
    """Most image tokens a page rendered at ``longest_side`` px can take (square page), in any supported family.

    The processor rounds each side to a multiple of 28 px (14 px patches merged 2 x 2) and gives one
    token per 28 x 28 block. That is the smallest block of the families (model/families.py: Qwen3-VL's is
    32 px, fewer tokens), and this runs before any config is read, so it bounds them all.
    """
    blocks = math.ceil(longest_side / 28)
    return blocks * blocks


def default_vllm_max_model_length(longest_side: int, max_completion_length: int) -> int:
    """The context a page rollout can need: image tokens + prompt text + completion."""
    return max_image_tokens(longest_side) + PROMPT_TEXT_TOKENS + max_completion_length


class Backend(NamedTuple):
    """The generation backend validation settled on."""

    vllm_mode: str  # colocate | server | none
    vllm_max_model_length: int  # colocated engine's context (derived when not given)
    vllm_engine_dtype: str  # --vllm_dtype, or the trainer's own
    notices: list[str]


def resolve_vllm_mode(a: Namespace, env: Environment) -> tuple[str, list[str]]:
    """colocate | server | none from --vllm_mode and what this machine has (auto prefers HF on CPU)."""
    mode = a.vllm_mode
    if mode == "auto":
        if env.vllm and env.cuda:
            return "colocate", ["vllm_mode auto: vLLM and a CUDA GPU found, generating with colocated vLLM"]
        why = "vLLM is not installed" if not env.vllm else "no CUDA GPU is visible"
        hint = ("install the gpu extra for vLLM" if not env.vllm else
                "on CPU HF generate is faster than starting an engine; --vllm_mode colocate runs vLLM's CPU build")
        return "none", [f"vllm_mode auto: {why}, generating with HF generate ({hint})"]
    if mode in ("colocate", "server") and not env.vllm:
        raise ConfigError(
            f"--vllm_mode {mode} needs vLLM importable in the trainer's environment: pip install '.[gpu]' on a GPU "
            "machine, or `bash scripts/setup_env.sh --vllm` for vLLM's CPU build (.venv-vllm); or use --vllm_mode none"
        )
    if mode == "colocate" and not env.cuda:
        return mode, ["vllm_mode colocate without a CUDA GPU: running vLLM's CPU engine"]
    return mode, []


def check_vllm_engine(a: Namespace, mode: str, env: Environment) -> Problems:
    """The engine flags: tensor parallel size, memory share, sleep mode."""
    problems = []
    if a.vllm_tensor_parallel_size < 1:
        problems.append(f"--vllm_tensor_parallel_size must be >= 1 (got {a.vllm_tensor_parallel_size})")
    elif mode == "colocate" and env.num_processes % a.vllm_tensor_parallel_size:
        problems.append(
            f"--vllm_tensor_parallel_size {a.vllm_tensor_parallel_size} must divide the number of training "
            f"processes ({env.num_processes}): each group of that many processes shares one colocated engine"
        )
    if not 0 < a.vllm_gpu_memory_utilization <= 1:
        problems.append(f"--vllm_gpu_memory_utilization must be in (0, 1] (got {a.vllm_gpu_memory_utilization})")
    if mode == "colocate" and a.vllm_enable_sleep_mode and not env.cuda:
        problems.append("--vllm_enable_sleep_mode needs a CUDA GPU (vLLM's CPU engine cannot sleep); drop the flag")
    if mode == "none" and a.vllm_enforce_eager:
        problems.append("--vllm_enforce_eager applies to a vLLM engine, and this run generates with HF generate "
                        "(--vllm_mode none): drop the flag, or pick --vllm_mode colocate or server")
    return problems


def check_async_generation(a: Namespace, mode: str, steps_per_generation: int) -> Problems:
    """--async_generation and --max_staleness: server mode, a bound the generation batch can keep, the correction."""
    if not a.async_generation:
        if a.max_staleness != 1:
            return [f"--max_staleness {a.max_staleness} only applies with --async_generation; add it or drop the flag"]
        return []
    if mode != "server":
        return [f"--async_generation needs --vllm_mode server (got {mode}): the vLLM server samples the next batch "
                "while this process trains; colocated vLLM and HF generate share the trainer's devices"]
    per_batch = -(-steps_per_generation * a.num_iterations // a.gradient_accumulation_steps)
    if a.max_staleness < per_batch:
        return [f"--max_staleness {a.max_staleness} is below the {per_batch} optimizer steps one generation batch "
                f"feeds (--steps_per_generation x --num_iterations / --gradient_accumulation_steps): the batch sent "
                f"ahead is scored that many steps later; use --max_staleness {per_batch}"]
    if not a.vllm_importance_sampling_correction:
        return ["--async_generation trains on completions sampled by older weights; keep "
                "--vllm_importance_sampling_correction on (it corrects the loss for them)"]
    return []


def resolve_vllm_max_model_length(a: Namespace, mode: str) -> tuple[int, list[str]]:
    """The colocated engine's context: --vllm_max_model_length, or what a page rollout can need."""
    derived = default_vllm_max_model_length(a.target_longest_image_dim, a.max_completion_length)
    max_len = a.vllm_max_model_length
    if max_len is None:
        return derived, []
    if max_len <= a.max_completion_length:
        raise ConfigError(
            f"--vllm_max_model_length {max_len} leaves no room for the prompt: it must exceed "
            f"--max_completion_length {a.max_completion_length} by the page prompt (up to "
            f"{derived - a.max_completion_length} tokens at {a.target_longest_image_dim} px); use {derived}"
        )
    if max_len < derived and mode == "colocate":
        return max_len, [
            f"WARNING: --vllm_max_model_length {max_len} is below the {derived} tokens a square "
            f"{a.target_longest_image_dim} px page + {a.max_completion_length} completion tokens can take; "
            "a longer prompt makes vLLM refuse the request"
        ]
    return max_len, []


def resolve_backend(a: Namespace, env: Environment) -> Backend:
    """The generation backend and its engine settings. Raises ConfigError."""
    mode, notices = resolve_vllm_mode(a, env)
    problems = check_vllm_engine(a, mode, env)
    if problems:
        raise ConfigError(problems[0])
    max_len, length_notices = resolve_vllm_max_model_length(a, mode)
    dtype = a.vllm_dtype if a.vllm_dtype != "auto" else ("bfloat16" if env.cuda else "float32")
    return Backend(mode, max_len, dtype, notices + length_notices)


def resolve_batched_vision_attention(a: Namespace, env: Environment) -> bool:
    """--batched_vision_attention, or auto: on with a CUDA GPU (the per-window loop's launches dominate), off on CPU."""
    return env.cuda if a.batched_vision_attention is None else a.batched_vision_attention


def resolve_compiled_generation(a: Namespace, env: Environment, vllm_mode: str) -> tuple[bool, list[str]]:
    """--compiled_generation, or auto: on with a CUDA GPU (decoding is launch-bound there), off on CPU (compiling
    costs more than it saves); only HF generation uses it, so a vLLM backend turns it off (noticed when asked for)."""
    wanted = env.cuda if a.compiled_generation is None else a.compiled_generation
    if vllm_mode != "none":
        notices = [f"--compiled_generation applies to HF generation only; vLLM ({vllm_mode}) generates here"] \
            if a.compiled_generation else []
        return False, notices
    return wanted, []


def resolve_report_to(a: Namespace) -> tuple[str, ...]:
    """--report_to as a tuple of integrations (``none`` = empty). Raises ConfigError."""
    value = a.report_to
    names = value if isinstance(value, (list, tuple)) else str(value).split(",")
    report_to = tuple(n.strip() for n in names if n.strip() and n.strip() != "none")
    for name in report_to:
        if name not in ("wandb", "tensorboard"):
            raise ConfigError(f"--report_to {name!r}: choose wandb, tensorboard or none (comma-separated)")
    return report_to


def resolve_resume(a: Namespace) -> bool | str | None:
    """--resume_from_checkpoint: True (the newest checkpoint), a checkpoint folder, or None. Raises ConfigError."""
    value = a.resume_from_checkpoint
    if value is None or isinstance(value, bool):
        return value
    text = str(value)
    if text.lower() in ("true", "false"):
        return text.lower() == "true" or None
    if not Path(text).is_dir():
        raise ConfigError(f"--resume_from_checkpoint {text}: no such checkpoint folder (or pass the bare flag "
                          "to take the newest checkpoint in --output_dir)")
    return text


def check_s3(a: Namespace) -> Problems:
    """--s3_save_path is a well-formed s3:// URI; --overwrite_output_dir does not meet --resume_from_checkpoint."""
    from olmocr_rl.storage.s3 import parse_s3_uri

    problems = []
    if a.s3_save_path and not str(a.s3_save_path).startswith("s3://"):
        problems.append(f"--s3_save_path {a.s3_save_path!r}: expected s3://bucket/prefix")
    elif a.s3_save_path:
        try:
            parse_s3_uri(a.s3_save_path)  # whitespace, an invalid bucket name
        except ValueError as exc:
            problems.append(f"--s3_save_path: {exc}")
    if a.overwrite_output_dir and resolve_resume(a):
        problems.append("--overwrite_output_dir deletes the checkpoints --resume_from_checkpoint would resume from: "
                        "give one of them (through a launcher, --no-auto-resume leaves the resume flag out)")
    return problems
