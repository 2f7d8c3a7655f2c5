"""What ``--olmorl`` fixes in TRL's GRPOConfig, and the checks of flags against it (light: no torch).

The trainer (``trainer/olmorl.py``) applies ``olmorl_config_overrides()``; the CLI's validation
(``olmocr_rl.config``) calls the two checks before any model loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: OLMo 3's clip range, lower side: ratios are clipped to [1 - 0.2, 1 + 0.272] ("clip-higher", after DAPO).
EPS_LOW = 0.2
#: OLMo 3's clip range, upper side (the 0.272 of [1 - 0.2, 1 + 0.272]).
EPS_HIGH = 0.272
#: --active_sampling_max_rounds' default: extra generation rounds per optimizer step at most.
ACTIVE_SAMPLING_MAX_ROUNDS = 4

__all__ = ["EPS_HIGH", "EPS_LOW", "check_active_sampling_geometry", "check_olmorl_settings", "olmorl_config_overrides"]

# Why each GRPOConfig value is needed for the trainer's loss to be OlmoRL's.
_OVERRIDE_REASONS: dict[str, tuple[Any, str]] = {
    "loss_type": ("dapo", "token-level loss normalised by the kept tokens of the whole generation batch"),
    "scale_rewards": ("none", "OlmoRL advantages are not divided by the group std"),
    "epsilon": (EPS_LOW, "clip-higher lower bound, ratio >= 1 - 0.2"),
    "epsilon_high": (EPS_HIGH, "clip-higher upper bound, ratio <= 1 + 0.272"),
    "beta": (0.0, "no KL term to a reference model"),
    "importance_sampling_level": ("token", "the ratio is per token"),
    "multi_objective_aggregation": ("sum_then_normalize", "advantages come from the weighted sum of rewards"),
    "delta": (None, "no extra upper clamp of the ratio (two-sided GRPO)"),
    "top_entropy_quantile": (1.0, "every kept token is in the loss, not only high-entropy ones"),
    "off_policy_mask_threshold": (None, "no off-policy sequence masking"),
    "entropy_coef": (0.0, "no entropy bonus in the loss"),
    "use_adaptive_entropy": (False, "no entropy bonus in the loss"),
}


def olmorl_config_overrides() -> dict[str, Any]:
    """The GRPOConfig fields that ``--olmorl`` sets (a fresh dict; see ``_OVERRIDE_REASONS`` for why)."""
    return {field: value for field, (value, _) in _OVERRIDE_REASONS.items()}


def _normalised(field: str, value: Any) -> Any:
    if field == "scale_rewards" and isinstance(value, bool):  # GRPOConfig accepts True/False for group/none
        return {True: "group", False: "none"}[value]
    if field in {"epsilon", "epsilon_high", "beta", "top_entropy_quantile", "entropy_coef"} and value is not None:
        return float(value)
    return value


def check_olmorl_settings(settings: Mapping[str, Any] | Any, source: str = "the GRPOConfig") -> None:
    """Raise ValueError if ``settings`` contradict what ``--olmorl`` needs.

    Args:
        settings: either a mapping of only the values the user set explicitly (CLI flags, YAML keys;
            fields absent from it are not checked), or a config object such as ``GRPOConfig`` (every
            field of ``olmorl_config_overrides()`` is checked, as it will be used).
        source: named in the message, e.g. "the command line / --config YAML".

    The message lists every conflict with the value needed, the reason, and the fix.
    """
    conflicts = []
    for field, (needed, reason) in _OVERRIDE_REASONS.items():
        if isinstance(settings, Mapping):
            if field not in settings:
                continue
            given = settings[field]
        else:
            if not hasattr(settings, field):
                continue
            given = getattr(settings, field)
        if _normalised(field, given) != _normalised(field, needed):
            conflicts.append(f"  {field}={given!r}: --olmorl needs {field}={needed!r} ({reason})")
    if conflicts:
        raise ValueError(
            f"--olmorl contradicts {source}:\n" + "\n".join(conflicts) + "\n"
            "Remove these settings (--olmorl sets them) or drop --olmorl to train with plain TRL GRPO."
        )


def check_active_sampling_geometry(per_device_batch: int, steps_per_generation: int, gradient_accumulation: int,
                                   G: int, max_rounds: int) -> None:
    """Raise ValueError (one line naming the flag and the fix) if active sampling cannot fill steps here.

    Each process fills its own share of groups, so its generation batch (per-device batch x
    steps_per_generation) must hold whole groups; a refill round is one whole generation batch, which
    is one optimizer step's only when steps_per_generation is gradient_accumulation_steps.
    """
    if max_rounds < 1:
        raise ValueError(f"--active_sampling_max_rounds must be >= 1 (got {max_rounds}); drop --active_sampling "
                         "to train without refills")
    if steps_per_generation != gradient_accumulation:
        raise ValueError(f"--active_sampling needs steps_per_generation ({steps_per_generation}) equal to "
                         f"gradient_accumulation_steps ({gradient_accumulation}); leave steps_per_generation unset")
    local = per_device_batch * steps_per_generation
    if local % G:
        raise ValueError(
            f"--active_sampling: each process must hold whole groups, but per_device_train_batch_size "
            f"({per_device_batch}) x gradient_accumulation_steps ({steps_per_generation}) = {local} is not a multiple "
            f"of --num_generations {G}; use a --per_device_train_batch_size or --gradient_accumulation_steps that "
            f"makes it one"
        )
