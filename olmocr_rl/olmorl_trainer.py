"""OlmoRL inside TRL: a ``GRPOTrainer`` subclass for trl==1.16.0 (pinned; private methods are overridden).

``--olmorl`` = TRL GRPO with the settings of ``olmorl_config_overrides()`` plus this subclass:

- advantages are ``group_advantages(rewards, G, normalize_std=False)`` (reward minus group mean);
- groups whose G rewards are all identical (``nonzero_signal_groups`` false) are dropped from the loss AND
  from its token normaliser. TRL's "dapo" normaliser is the number of loss tokens of the whole generation
  batch, gathered over processes and spread over the gradient-accumulation steps; it is recounted here
  over the kept groups only, so a dropped group cannot dilute the kept ones;
- the loss is TRL's own "dapo" code path, which with these settings (token-level ratio, ε 0.2/0.272,
  β 0, no δ, no entropy mask or bonus) is exactly ``-olmorl_objective`` over the kept tokens of the
  generation batch (tests/test_olmorl_trainer.py checks this to 1e-6 on 1 and 2 processes).

Two private methods are overridden, both by wrapping the parent, not copying it:

``_calculate_rewards``               keeps the gathered (all-process) per-function rewards for the step.
``_generate_and_score_completions``  replaces ``advantages``, adds the kept-group mask to ``tool_mask``
                                     (TRL's per-token loss mask, 1 = trained on) and recounts
                                     ``num_items_in_batch``; logs ``olmorl/*`` metrics.

The forward pass never sees the keep mask (``completion_mask`` is untouched), so log-probs, entropies
and generation are exactly TRL's. Exact equivalence with ``olmorl_objective`` needs
``steps_per_generation == gradient_accumulation_steps`` (TRL's default); otherwise TRL itself
approximates each window's token count by the generation batch's count scaled by GA/steps_per_generation.
With vLLM's importance-sampling correction on (GPU runs), each token's term is additionally multiplied
by TRL's vLLM/trainer ratio, as in plain TRL. The completions table (``--log_completions``) is logged as
for plain GRPO, through :class:`olmocr_rl.completions_log.CompletionsLogMixin`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from trl import GRPOTrainer

from olmocr_rl.completions_log import CompletionsLogMixin
from olmocr_rl.olmorl import EPS_HIGH, EPS_LOW, group_advantages, nonzero_signal_groups

__all__ = [
    "OlmoRLGRPOTrainer",
    "check_olmorl_settings",
    "olmorl_config_overrides",
    "olmorl_group_plan",
]

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


def olmorl_group_plan(
    rewards: torch.Tensor, unscorable: torch.Tensor, G: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and kept rows for one generation batch (all processes), shape (P*G,) each.

    Args:
        rewards: total reward per completion (weighted nansum over reward functions), groups consecutive.
        unscorable: True where every reward function returned None for the completion.
        G: completions per prompt. With G < 2 (possible in eval) no group carries signal.

    A group is kept when its rewards are not all identical and none of its completions is unscorable
    (with the bench reward, unscorable means the page itself could not be scored, so the whole group is).
    Dropped rows get advantage exactly 0.
    """
    if G < 2:
        return torch.zeros_like(rewards), torch.zeros_like(rewards, dtype=torch.bool)
    finite = torch.where(unscorable, torch.zeros_like(rewards), rewards)
    scorable_groups = ~unscorable.view(-1, G).any(dim=1)
    keep_groups = nonzero_signal_groups(finite, G) & scorable_groups
    keep_rows = keep_groups.repeat_interleave(G)
    advantages = torch.where(keep_rows, group_advantages(finite, G, normalize_std=False), torch.zeros_like(finite))
    return advantages, keep_rows


class OlmoRLGRPOTrainer(CompletionsLogMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` with the OlmoRL objective (see the module docstring).

    Build its ``args`` with ``GRPOConfig(..., **olmorl_config_overrides())``; any contradicting value
    raises ValueError here, before the model is touched.

    Logged per generation batch (averaged between log steps like TRL's own metrics):
    ``olmorl/frac_groups_dropped`` (zero-signal or unscorable groups / all groups, over all processes),
    ``olmorl/tokens_kept`` (loss tokens left after dropping, over all processes; the dapo normaliser),
    ``olmorl/frac_tokens_kept`` (tokens_kept / loss tokens before dropping).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments.get("args")
        if config is None:
            raise ValueError(
                "OlmoRLGRPOTrainer needs args=GRPOConfig(..., **olmorl_config_overrides()); TRL's default config "
                "is plain GRPO"
            )
        check_olmorl_settings(config)
        self._olmorl_rewards_per_func: torch.Tensor | None = None
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # The parent returns the rewards gathered over processes but keeps only the advantages; the
        # zero-signal test needs the rewards themselves, so hold on to them for this generation batch.
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._olmorl_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self._olmorl_rewards_per_func = None
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func = self._olmorl_rewards_per_func
        if rewards_per_func is None:  # only if a TRL change stops routing rewards through _calculate_rewards
            raise RuntimeError("OlmoRLGRPOTrainer: TRL did not call _calculate_rewards; check the trl pin (1.16.0)")
        mode = "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval

        # The same total reward TRL forms for its advantages (sum_then_normalize), recomputed here.
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        advantages, keep_rows = olmorl_group_plan(rewards, unscorable, G)

        # This process's rows, sliced exactly as the parent slices its advantages.
        n_local = output["advantages"].shape[0]
        rank = self.accelerator.process_index
        local = slice(rank * n_local, (rank + 1) * n_local)
        keep_local = keep_rows[local].unsqueeze(1)
        output["advantages"] = advantages[local].to(output["advantages"].dtype)

        # TRL multiplies completion_mask by tool_mask to get the loss mask, and uses completion_mask alone
        # for attention: adding the keep mask here removes dropped rows from the loss only.
        completion_mask = output["completion_mask"]
        loss_mask = completion_mask * output["tool_mask"] if "tool_mask" in output else completion_mask
        output["tool_mask"] = (output.get("tool_mask", torch.ones_like(completion_mask)) * keep_local).to(
            completion_mask.dtype
        )
        tokens_before = output["num_items_in_batch"]
        tokens_kept = self.accelerator.gather((loss_mask * keep_local).sum()).sum()
        output["num_items_in_batch"] = tokens_kept  # the dapo normaliser: kept tokens of the generation batch

        n_groups = max(rewards.shape[0] // max(G, 1), 1)
        kept_groups = int(keep_rows.sum()) // max(G, 1)
        self._metrics[mode]["olmorl/frac_groups_dropped"].append(1.0 - kept_groups / n_groups)
        self._metrics[mode]["olmorl/tokens_kept"].append(float(tokens_kept))
        self._metrics[mode]["olmorl/frac_tokens_kept"].append(float(tokens_kept) / max(float(tokens_before), 1.0))
        return output
