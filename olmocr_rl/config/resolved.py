"""``validate(args) -> ResolvedConfig``: every check composed, and the frozen result the run reads.

``args`` is read, never changed. The ``ResolvedConfig`` holds the flags as given (lists as tuples) plus
what validation decided (normalised spellings, reward spec, backend, notices), and reads like ``args``:
``cfg.output_dir`` is the flag, ``cfg.loss_type`` the normalised one, ``cfg.vllm_mode`` the backend chosen.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping

from olmocr_rl.config import checks
from olmocr_rl.config.environment import Environment, probe_environment
from olmocr_rl.config.flags import CHOSEN, ConfigError, build_parser, flag_values


@dataclass(frozen=True)
class ResolvedConfig:
    """Everything the run needs from its flags, decided once, read-only. Unknown attributes fall back to ``flags``."""

    flags: Mapping[str, Any]  # every flag as parsed (read-only; lists as tuples)
    environment: Environment
    loss_type: str
    scale_rewards: str  # group | batch | none
    reward_spec: Mapping[str, float | str | None]  # weight, or a per-file bench reward's resolved JSONL path
    vllm_mode: str  # colocate | server | none
    vllm_max_model_length: int  # colocated engine's context (derived when not given)
    vllm_engine_dtype: str  # the colocated engine's dtype (--vllm_dtype, or the trainer's own)
    batched_vision_attention: bool  # --batched_vision_attention, auto resolved
    report_to: tuple[str, ...]  # wandb / tensorboard; empty = none
    resume_from_checkpoint: bool | str | None
    notices: tuple[str, ...]  # for the entrypoint to log, once; "WARNING: ..." ones as warnings

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "flags":
            raise AttributeError(name)
        try:
            return self.flags[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no flag or setting {name!r}") from None

    @property
    def num_processes(self) -> int:
        return self.environment.num_processes

    def as_dict(self) -> dict[str, Any]:
        """Flags with the resolved values on top (W&B's run config)."""
        resolved = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("flags", "environment")}
        out = {**self.flags, **resolved, "resolved_vllm_mode": self.vllm_mode, "num_processes": self.num_processes}
        return {k: plain(v) for k, v in out.items()}


def plain(value: Any) -> Any:
    """A read-only value as plain, JSON-ready data: tuples as lists, mappings as dicts, all the way down."""
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
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
    reward_spec, reward_notices = checks.resolve_rewards(args)
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
    notices += checks.importance_sampling_notices(args, backend.vllm_mode)
    report_to = checks.resolve_report_to(args)
    resume = checks.resolve_resume(args)
    _first(checks.check_s3(args))
    return ResolvedConfig(
        flags=MappingProxyType({k: _frozen(v) for k, v in flag_values(args).items()}), environment=env,
        loss_type=loss_type, scale_rewards=scale_rewards, reward_spec=MappingProxyType(reward_spec),
        vllm_mode=backend.vllm_mode, vllm_max_model_length=backend.vllm_max_model_length,
        vllm_engine_dtype=backend.vllm_engine_dtype,
        batched_vision_attention=checks.resolve_batched_vision_attention(args, env),
        report_to=report_to, resume_from_checkpoint=resume, notices=tuple(notices),
    )
