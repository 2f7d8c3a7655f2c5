"""OlmoRL inside TRL: :class:`OlmoRLGRPOTrainer`, the run's trainer class plus the OlmoRL objective.

``--olmorl`` = TRL GRPO with the settings of ``olmorl_config_overrides()`` plus this subclass:

- advantages are ``group_advantages(rewards, G, normalize_std=False)`` (reward minus group mean);
- groups whose G rewards are all identical (``nonzero_signal_groups`` false) are dropped from the loss AND
  from its token normaliser. TRL's "dapo" normaliser is the number of loss tokens of the whole generation
  batch, gathered over processes and spread over the gradient-accumulation steps; it is recounted here
  over the kept groups only, so a dropped group cannot dilute the kept ones;
- the loss is TRL's own "dapo" code path, which with these settings (token-level ratio, ε 0.2/0.272,
  β 0, no δ, no entropy mask or bonus) is exactly ``-olmorl_objective`` over the kept tokens of the
  generation batch (tests/integration/test_olmorl_trainer.py checks this to 1e-6 on 1 and 2 processes).

It is :class:`~olmocr_rl.trainer.plain.PlainGRPOTrainer` (checkpoints, page order, completions table, IS
telemetry, speed-ups, timing, active sampling's refill: all of it there) plus the objective, in one override of
the base class's own hook: :meth:`OlmoRLGRPOTrainer._score_generation_batch` replaces ``advantages``, adds the
kept-group mask to ``tool_mask`` (TRL's per-token loss mask, 1 = trained on), recounts ``num_items_in_batch``
and logs ``olmorl/*`` metrics, from the gathered per-function rewards the base class keeps
(``_calculate_rewards``). The IS telemetry sees each generation batch as TRL made it, before the keep mask.

The forward pass never sees the keep mask (``completion_mask`` is untouched), so log-probs, entropies
and generation are exactly TRL's. Exact equivalence with ``olmorl_objective`` needs
``steps_per_generation == gradient_accumulation_steps`` (TRL's default); otherwise TRL itself
approximates each window's token count by the generation batch's count scaled by GA/steps_per_generation.
With vLLM's importance-sampling correction on (GPU runs), each token's term is additionally multiplied
by TRL's vLLM/trainer ratio, as in plain TRL.

``active_sampling=True`` (``--active_sampling``) adds OLMo 3's active sampling: after a generation batch is
scored, further pages (drawn by the trainer's own sampler, seeded by (seed, step, round)) are generated and scored
through the same ``_score_generation_batch`` until every process holds its share of groups with signal (or
``active_sampling_max_rounds`` extra rounds): :mod:`olmocr_rl.trainer.active_sampling`,
and docs/olmorl.md for what it costs.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from trl import GRPOTrainer

from olmocr_rl.olmorl import group_advantages, nonzero_signal_groups
from olmocr_rl.olmorl.settings import (  # noqa: F401  (re-exported: the trainer's public names)
    check_active_sampling_geometry,
    check_olmorl_settings,
    olmorl_config_overrides,
)
from olmocr_rl.trainer.compat import broken, check_trainer_surface
from olmocr_rl.trainer.plain import PlainGRPOTrainer

__all__ = [
    "OlmoRLGRPOTrainer",
    "check_active_sampling_geometry",
    "check_olmorl_settings",
    "olmorl_config_overrides",
    "olmorl_group_plan",
]

#: The compat point of TRL's per-process slice (checked on every generation batch by ``_local_rows``).
SLICE_POINT = "trl.trainer.grpo_trainer:GRPOTrainer._generate_and_score_completions#process_slice"


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


class OlmoRLGRPOTrainer(PlainGRPOTrainer):
    """``trl.GRPOTrainer`` with the OlmoRL objective (see the module docstring).

    Build its ``args`` with ``GRPOConfig(..., **olmorl_config_overrides())``; any contradicting value
    raises ValueError here, before the model is touched.

    Logged per generation batch (averaged between log steps like TRL's own metrics):
    ``olmorl/frac_groups_dropped`` (zero-signal or unscorable groups / all groups, over all processes),
    ``olmorl/tokens_kept`` (loss tokens left after dropping, over all processes; the dapo normaliser),
    ``olmorl/frac_tokens_kept`` (tokens_kept / loss tokens before dropping).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_trainer_surface(args, _trl_kwargs(kwargs))  # CompatError before TRL runs (and before the checks below)
        config = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **_trl_kwargs(kwargs)).arguments.get("args")
        if config is None:
            raise ValueError(
                "OlmoRLGRPOTrainer needs args=GRPOConfig(..., **olmorl_config_overrides()); TRL's default config "
                "is plain GRPO"
            )
        check_olmorl_settings(config)
        super().__init__(*args, **kwargs)

    def _score_generation_batch(self, inputs):
        """TRL's generation and scoring of one generation batch, with OlmoRL's advantages and keep mask.

        Returns (the scored batch, this process's kept rows as a bool tensor of its row count)."""
        self._rewards_per_func = None
        output, _ = super()._score_generation_batch(inputs)
        rewards_per_func = self._rewards_per_func
        if rewards_per_func is None:  # only if a TRL change stops routing rewards through _calculate_rewards
            raise broken("trl.trainer.grpo_trainer:GRPOTrainer._calculate_rewards",
                         "was not called by _generate_and_score_completions")
        mode = "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval

        # The same total reward TRL forms for its advantages (sum_then_normalize), recomputed here.
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        advantages, keep_rows = olmorl_group_plan(rewards, unscorable, G)

        # This process's rows, sliced exactly as the parent slices its advantages (checked on the data).
        local = self._local_rows(output["advantages"], rewards.shape[0], advantages, keep_rows)
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
        return output, keep_rows[local].clone()

    def _local_rows(self, trl_advantages: torch.Tensor, n_all: int, advantages: torch.Tensor,
                    keep_rows: torch.Tensor) -> slice:
        """This process's rows of the gathered batch: ``[rank * n_local, (rank + 1) * n_local)``, as TRL slices.

        Checked on the data, not assumed: the gathered batch holds every process's rows, and on kept rows
        TRL's own advantages (with --olmorl's ``scale_rewards="none"``: reward minus group mean) equal ours.
        A TRL that sliced otherwise raises CompatError here instead of training on another process's rows.
        """
        n_local, processes = trl_advantages.shape[0], self.accelerator.num_processes
        if n_all != n_local * processes:
            raise broken(SLICE_POINT, f"gathered {n_all} reward rows for {processes} process(es) of {n_local} rows")
        rank = self.accelerator.process_index
        local = slice(rank * n_local, (rank + 1) * n_local)
        kept = keep_rows[local]
        ours, theirs = advantages[local][kept], trl_advantages[kept].to(advantages.dtype)
        if not torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5):
            worst = float((ours - theirs).abs().max())
            raise broken(SLICE_POINT, f"TRL's advantages of process {rank}'s kept rows differ from rows "
                                      f"[{local.start}, {local.stop}) of the gathered batch (by up to {worst:.3g})")
        return local


def _trl_kwargs(kwargs: dict) -> dict:
    """The keyword arguments TRL's ``GRPOTrainer.__init__`` takes (the base class's own switches left out)."""
    own = {name for name, p in inspect.signature(PlainGRPOTrainer.__init__).parameters.items()
           if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return {k: v for k, v in kwargs.items() if k not in own}
