"""``validate(args) -> ResolvedConfig``: every check composed, and the frozen, typed result the run reads.

``args`` is read, never changed. The ``ResolvedConfig`` declares one field per flag (``cfg.output_dir`` is the
flag; lists as tuples, dicts read-only), holding the value validation settled on where it resolves one
(``cfg.loss_type`` normalised, ``cfg.vllm_mode`` the backend chosen, ...), plus what validation adds
(``rewards``, ``vllm_engine_dtype``, ``notices``, the ``environment``); ``flags`` keeps every flag as parsed.
The ``--reward_*`` flags are not fields: their parsed values are ``rewards``.

**Adding a flag**: add it in ``flags.py`` and declare its field here, in the group of the parser's, with the
type it has after parsing. ``tests/unit/test_config.py`` fails, naming the field to add, while the two differ
(and ``validate`` refuses to build a config without the field).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping

from olmocr_rl.config import checks
from olmocr_rl.config.environment import Environment, probe_environment
from olmocr_rl.config.flags import CHOSEN, ConfigError, build_parser, flag_values
from olmocr_rl.config.rewards import RewardValue, reward_table


@dataclass(frozen=True)
class ResolvedConfig:
    """Everything the run needs from its flags, decided once, read-only (see the module docstring)."""

    # ---- added by validation (not flags) ---------------------------------------------------------------
    flags: Mapping[str, Any]  # every flag as parsed (read-only; lists as tuples)
    environment: Environment
    rewards: Mapping[str, RewardValue]  # the enabled rewards' parsed values, in the reward table's order
    vllm_engine_dtype: str  # the colocated engine's dtype (--vllm_dtype, or the trainer's own)
    notices: tuple[str, ...]  # for the entrypoint to log, once; "WARNING: ..." ones as warnings
    # ---- config -------------------------------------------------------------------------------------------
    config: str | None
    # ---- data -------------------------------------------------------------------------------------------
    train_bench_data_folder: str  # required (validation refuses a run without it)
    eval_bench_data_folder: str | None
    jsonl_filter: str | None
    bench_type_filter: tuple[str, ...] | None
    pages: str | None
    exclude_pages: str | None
    max_train_samples: int | None
    max_eval_samples: int | None
    target_longest_image_dim: int
    # ---- model ------------------------------------------------------------------------------------------
    model_name: str
    cache_dir: str | None
    output_dir: str
    # ---- optimisation -----------------------------------------------------------------------------------
    learning_rate: float
    lr_schedule: str
    warmup_steps: int
    num_train_epochs: float
    max_steps: int
    per_device_train_batch_size: int
    per_device_eval_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: str  # auto | true | false | vision (olmocr_rl.model.checkpointing plans it)
    seed: int
    dataloader_num_workers: int
    # ---- what is trained: LoRA adapters, frozen vision tower ---------------------------------------------
    use_peft: bool
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    lora_target_modules: tuple[str, ...]
    lora_modules_to_save: tuple[str, ...] | None
    save_merged: bool
    freeze_vision_tower: bool
    freeze_vision_merger: bool
    # ---- speed ------------------------------------------------------------------------------------------
    share_page_encoding: bool
    batched_vision_attention: bool  # resolved: auto = on with a CUDA GPU
    cache_vision_features: bool
    share_page_processing: bool
    padding_free: bool
    compiled_generation: bool  # resolved: auto = on with a CUDA GPU, off with vLLM (HF generation only)
    # ---- GRPO -------------------------------------------------------------------------------------------
    num_generations: int
    num_iterations: int
    max_completion_length: int
    temperature: float
    top_p: float
    generation_kwargs: Mapping[str, Any] | None
    beta: float
    loss_type: str  # resolved: TRL's spelling
    scale_rewards: str  # resolved: group | batch | none
    importance_sampling_level: str
    cast_lm_head_to_fp32: bool
    vllm_importance_sampling_correction: bool
    vllm_importance_sampling_mode: str
    vllm_importance_sampling_cap: float
    olmorl: bool
    active_sampling: bool
    active_sampling_max_rounds: int
    router_aux_loss_coef: float | None  # None: the MoE config's own
    macro_average: bool
    # ---- GRPO knobs (TRL's GRPOConfig fields under TRL's names: flags.TRL_KNOB_FLAGS) -------------------------
    epsilon: float
    epsilon_high: float | None
    delta: float | None
    mask_truncated_completions: bool
    top_entropy_quantile: float
    off_policy_mask_threshold: float | None
    entropy_coef: float
    multi_objective_aggregation: str
    steps_per_generation: int | None
    generation_batch_size: int | None
    num_generations_eval: int | None
    disable_dropout: bool
    top_k: int
    min_p: float | None
    repetition_penalty: float
    vllm_importance_sampling_clip_min: float | None
    vllm_model_impl: str
    # ---- rewards (the --reward_* flags are ``rewards``) ---------------------------------------------------
    bench_raw_completion: bool
    # ---- generation backend -----------------------------------------------------------------------------
    vllm_mode: str  # resolved: colocate | server | none
    vllm_server_host: str
    vllm_server_port: int
    vllm_gpu_memory_utilization: float
    vllm_max_model_length: int  # resolved: the colocated engine's context (derived when not given)
    vllm_tensor_parallel_size: int
    vllm_enable_sleep_mode: bool
    vllm_dtype: str
    vllm_block_image_tokens: bool
    # ---- logging, checkpoints, resume -----------------------------------------------------------------
    logging_steps: int
    save_steps: int
    save_total_limit: int
    eval_steps: int | None
    report_to: tuple[str, ...]  # resolved: wandb / tensorboard; empty = none
    wandb_project: str
    wandb_run_name: str | None
    log_completions: bool
    num_completions_to_print: int
    log_multimodal: bool
    s3_save_path: str | None
    profile_step: int | None
    resume_from_checkpoint: bool | str | None  # resolved: True (newest), a checkpoint folder, or None
    allow_partial_resume: bool
    apply_learning_rate_on_resume: bool
    overwrite_output_dir: bool
    preempt_upload_timeout: float
    # ---- console --------------------------------------------------------------------------------------
    console_detail_steps: int | None
    console_raw_metrics: bool

    @property
    def num_processes(self) -> int:
        return self.environment.num_processes

    @property
    def reward_weights(self) -> list[float]:
        """The enabled rewards' weights, in order (GRPOConfig's ``reward_weights``; the builder returns the same)."""
        return [value.weight for value in self.rewards.values()]

    def as_dict(self) -> dict[str, Any]:
        """Flags with the resolved values on top (W&B's run config)."""
        resolved = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("flags", "environment")}
        out = {**self.flags, **resolved, "resolved_vllm_mode": self.vllm_mode, "num_processes": self.num_processes}
        return {k: plain(v) for k, v in out.items()}


#: The fields validation adds (every other field is a flag's).
ADDED_FIELDS = ("flags", "environment", "rewards", "vllm_engine_dtype", "notices")


def flag_fields() -> set[str]:
    """The fields that hold a flag (one per parser flag, the ``--reward_*`` ones aside)."""
    return {f.name for f in fields(ResolvedConfig)} - set(ADDED_FIELDS)


def flags_without_field(parser: argparse.ArgumentParser | None = None) -> tuple[list[str], list[str]]:
    """``(flags with no field, fields with no flag)``: both empty when ResolvedConfig declares exactly the flags."""
    parser = parser or build_parser()
    rewards = {entry.dest for entry in reward_table()}
    dests = {a.dest for a in parser._actions} - {"help"} - rewards
    return sorted(dests - flag_fields()), sorted(flag_fields() - dests)


def plain(value: Any) -> Any:
    """A read-only value as plain, JSON-ready data: tuples as lists, mappings as dicts, all the way down."""
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    return value


def _frozen(value: Any) -> Any:
    """A read-only copy of a flag value: lists as tuples, dicts as read-only mappings."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    return value


def _first(problems: list[str]) -> None:
    if problems:
        raise ConfigError(problems[0])


def _chosen(args: argparse.Namespace) -> frozenset[str]:
    """The flags the user chose (parse_args records them); for a Namespace made another way, the flags whose
    value differs from the default (all it can tell)."""
    chosen = getattr(args, CHOSEN, None)
    if chosen is not None:
        return chosen
    defaults = build_parser()
    return frozenset(name for name, value in flag_values(args).items() if value != defaults.get_default(name))


def validate(args: argparse.Namespace, env: Environment | None = None) -> ResolvedConfig:
    """Check every flag and combination against ``env`` (probed when not given). Raises ConfigError (one line)."""
    env = env if env is not None else probe_environment()
    _first(checks.check_folders(args))
    loss_type, scale_rewards = checks.resolve_loss(args)
    _first(checks.check_ranges(args))
    _first(checks.check_trl_knobs(args))
    _first(checks.check_console(args))
    notices = checks.schedule_notices(args)
    _first(checks.check_filters(args))
    rewards, reward_notices = checks.resolve_rewards(args)
    notices += reward_notices
    current = {**flag_values(args), "loss_type": loss_type, "scale_rewards": scale_rewards}
    explicit = {name: current[name] for name in checks.OLMORL_FLAGS if name in _chosen(args)}
    _first(checks.check_olmorl(args, explicit))
    if args.olmorl:
        notices.append("--olmorl: advantages without std, zero-signal groups dropped, eps 0.2/0.272, token-level loss")
    _first(checks.check_adapters(args, _chosen(args)))
    notices += checks.adapter_notices(args, _chosen(args))
    _first(checks.check_geometry(args, env.num_processes))
    backend = checks.resolve_backend(args, env)
    notices += backend.notices
    compiled_generation, generation_notices = checks.resolve_compiled_generation(args, env, backend.vllm_mode)
    notices += generation_notices
    notices += checks.importance_sampling_notices(args, backend.vllm_mode)
    report_to = checks.resolve_report_to(args)
    resume = checks.resolve_resume(args)
    _first(checks.check_s3(args))
    flags = {k: _frozen(v) for k, v in flag_values(args).items()}
    resolved = dict(
        loss_type=loss_type, scale_rewards=scale_rewards, vllm_mode=backend.vllm_mode,
        vllm_max_model_length=backend.vllm_max_model_length,
        batched_vision_attention=checks.resolve_batched_vision_attention(args, env),
        compiled_generation=compiled_generation, report_to=report_to, resume_from_checkpoint=resume,
    )
    added = dict(flags=MappingProxyType(flags), environment=env, rewards=MappingProxyType(rewards),
                 vllm_engine_dtype=backend.vllm_engine_dtype, notices=tuple(notices))
    return _resolved_config({**{k: flags[k] for k in flags if k in flag_fields()}, **resolved}, added, flags)


def _resolved_config(values: dict[str, Any], added: dict[str, Any], flags: Mapping[str, Any]) -> ResolvedConfig:
    """The ResolvedConfig, or a TypeError naming the field a new flag lacks (a developer's fix, see the module)."""
    rewards = {entry.dest for entry in reward_table()}
    missing = sorted(set(flags) - flag_fields() - rewards)
    if missing:
        raise TypeError(f"ResolvedConfig declares no field for the flag(s) {', '.join('--' + m for m in missing)}: "
                        f"add `{missing[0]}: <its type>` to ResolvedConfig in olmocr_rl/config/resolved.py")
    return ResolvedConfig(**added, **values)
