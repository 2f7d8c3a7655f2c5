"""``validate(args) -> ResolvedConfig``: every check composed, and the frozen, typed result the run reads.

``args`` is read, never changed. :class:`ResolvedConfig` (``options.py``) declares the flags, one field each
(``cfg.output_dir`` is the flag; lists as tuples, dicts read-only); ``validate`` fills it with the value
validation settled on where it resolves one, plus what validation adds (``rewards``, ``vllm_engine_dtype``,
``notices``, the ``environment``); ``flags`` keeps every flag as parsed. The ``--reward_*`` flags are not fields:
their parsed values are ``rewards``.
"""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import Any

from olmocr_rl.config import checks, options
from olmocr_rl.config.environment import Environment, probe_environment
from olmocr_rl.config.flags import CHOSEN, FROM_CONFIG_FILE, build_parser, flag_values
from olmocr_rl.config.options import ResolvedConfig, declared
from olmocr_rl.config.rewards import reward_table
from olmocr_rl.config.values import ConfigError, frozen, plain

__all__ = ["ResolvedConfig", "flags_without_field", "plain", "validate"]


def flags_without_field(parser: argparse.ArgumentParser | None = None) -> tuple[list[str], list[str]]:
    """``(parser flags with no declared field, declared fields with no parser flag)``, the ``--reward_*`` rows
    aside: both empty when the parser is the one ``build_parser`` generates from the declarations."""
    parser = parser or build_parser()
    dests = {a.dest for a in parser._actions} - {"help"} - {entry.dest for entry in reward_table()}
    names = {name for name, _, _ in declared()}
    return sorted(dests - names), sorted(names - dests)


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
    steps_per_generation = checks.resolve_steps_per_generation(args, env.num_processes)[0]
    _first(checks.check_async_generation(args, backend.vllm_mode, steps_per_generation))
    compiled_generation, generation_notices = checks.resolve_compiled_generation(args, env, backend.vllm_mode)
    notices += generation_notices
    notices += checks.importance_sampling_notices(args, backend.vllm_mode)
    notices += checks.shared_prefix_notices(args, backend.vllm_mode, steps_per_generation)
    report_to = checks.resolve_report_to(args)
    resume = checks.resolve_resume(args)
    _first(checks.check_s3(args))
    flags = {k: frozen(v) for k, v in flag_values(args).items()}
    resolved = dict(
        loss_type=loss_type, scale_rewards=scale_rewards, vllm_mode=backend.vllm_mode,
        vllm_max_model_length=backend.vllm_max_model_length,
        batched_vision_attention=checks.resolve_batched_vision_attention(args, env),
        compiled_generation=compiled_generation, report_to=report_to, resume_from_checkpoint=resume,
    )
    added = dict(flags=MappingProxyType(flags), environment=env, rewards=MappingProxyType(rewards),
                 vllm_engine_dtype=backend.vllm_engine_dtype, notices=tuple(notices),
                 from_config_file=frozenset(getattr(args, FROM_CONFIG_FILE, ())))
    values = {**{name: flags[name] for name, _, _ in declared()}, **resolved}
    return options.ResolvedConfig(**added, **values)
