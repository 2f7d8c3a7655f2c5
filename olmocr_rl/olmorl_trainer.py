"""OlmoRL inside TRL: a ``GRPOTrainer`` subclass for trl==1.16.0 (pinned; private methods are overridden).

``--olmorl`` = TRL GRPO with the settings of ``olmorl_config_overrides()`` plus this subclass:

- advantages are ``group_advantages(rewards, G, normalize_std=False)`` (reward minus group mean);
- groups whose G rewards are all identical (``nonzero_signal_groups`` false) are dropped from the loss AND
  from its token normaliser. TRL's "dapo" normaliser is the number of loss tokens of the whole generation
  batch, gathered over processes and spread over the gradient-accumulation steps; it is recounted here
  over the kept groups only, so a dropped group cannot dilute the kept ones;
- the loss is TRL's own "dapo" code path, which with these settings (token-level ratio, ε 0.2/0.272,
  β 0, no δ, no entropy mask or bonus) is exactly ``-olmorl_objective`` over the kept tokens of the
  generation batch (tests/integration/test_olmorl_trainer.py checks this to 1e-6 on 1 and 2 processes).

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

``active_sampling=True`` (``--active_sampling``) adds OLMo 3's active sampling: after a generation batch is
scored, further page chunks of the epoch are generated and scored through the same
``_generate_and_score_completions`` until every process holds its share of groups with signal (or
``active_sampling_max_rounds`` extra rounds, or the epoch's end); see the "active sampling" section below
for the Trainer methods it relies on, and docs/olmorl.md for what it costs.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import torch
from trl import GRPOTrainer

from olmocr_rl.completions_log import CompletionsLogMixin
from olmocr_rl.page_order import EpochSeededOrderMixin
from olmocr_rl.resume import CheckpointLoadMixin
from olmocr_rl.olmorl import group_advantages, nonzero_signal_groups
from olmocr_rl.olmorl_settings import (  # noqa: F401  (re-exported: the trainer's public names)
    ACTIVE_SAMPLING_MAX_ROUNDS,
    check_active_sampling_geometry,
    check_olmorl_settings,
    olmorl_config_overrides,
)

logger = logging.getLogger(__name__)

__all__ = [
    "OlmoRLGRPOTrainer",
    "check_active_sampling_geometry",
    "check_olmorl_settings",
    "olmorl_config_overrides",
    "olmorl_group_plan",
]

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


class OlmoRLGRPOTrainer(CheckpointLoadMixin, EpochSeededOrderMixin, CompletionsLogMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` with the OlmoRL objective (see the module docstring).

    Build its ``args`` with ``GRPOConfig(..., **olmorl_config_overrides())``; any contradicting value
    raises ValueError here, before the model is touched.

    Logged per generation batch (averaged between log steps like TRL's own metrics):
    ``olmorl/frac_groups_dropped`` (zero-signal or unscorable groups / all groups, over all processes),
    ``olmorl/tokens_kept`` (loss tokens left after dropping, over all processes; the dapo normaliser),
    ``olmorl/frac_tokens_kept`` (tokens_kept / loss tokens before dropping).
    """

    def __init__(self, *args: Any, active_sampling: bool = False,
                 active_sampling_max_rounds: int | None = None, **kwargs: Any) -> None:

        config = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments.get("args")
        if config is None:
            raise ValueError(
                "OlmoRLGRPOTrainer needs args=GRPOConfig(..., **olmorl_config_overrides()); TRL's default config "
                "is plain GRPO"
            )
        check_olmorl_settings(config)
        max_rounds = ACTIVE_SAMPLING_MAX_ROUNDS if active_sampling_max_rounds is None else int(active_sampling_max_rounds)
        if active_sampling:
            check_active_sampling_geometry(config.per_device_train_batch_size, config.steps_per_generation,
                                           config.gradient_accumulation_steps, config.num_generations, max_rounds)
        self.active_sampling = bool(active_sampling)
        self.active_sampling_max_rounds = max_rounds
        self._olmorl_rewards_per_func: torch.Tensor | None = None
        self._as_iterator = None  # PushbackIterator over the Trainer's current epoch iterator
        self._as_epoch = 0
        self._as_resume_skip: tuple[int, int] | None = None  # (epoch, batches) read from the checkpoint
        super().__init__(*args, **kwargs)
        if self.active_sampling:
            from olmocr_rl.active_sampling import ActiveSamplingPosition

            self.add_callback(ActiveSamplingPosition())

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # The parent returns the rewards gathered over processes but keeps only the advantages; the
        # zero-signal test needs the rewards themselves, so hold on to them for this generation batch.
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._olmorl_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output, keep_local = self._olmorl_generate_and_score(inputs)
        if self.active_sampling and self.model.training:
            output = self._active_sampling_fill(output, keep_local)
        return output

    def _olmorl_generate_and_score(self, inputs):
        """TRL's generation and scoring of one generation batch, with OlmoRL's advantages and keep mask.

        Returns (the scored batch, this process's kept rows as a bool tensor of its row count)."""
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
        return output, keep_rows[local].clone()

    # ---- active sampling (--active_sampling) -------------------------------------------------------------------
    #
    # Relies on these TRL 1.16 / transformers 5 internals, wrapped and not copied:
    #   GRPOTrainer._generate_and_score_completions (one call per round, collectives inside: every process
    #     runs the same number of rounds), GRPOTrainer._get_train_sampler (RepeatSampler, epoch-seeded by
    #     EpochSeededOrderMixin: each page chunk is one generation batch, repeated num_iterations x
    #     steps_per_generation times),
    #   Trainer.get_batch_samples (receives the epoch iterator), Trainer._run_epoch (epoch index),
    #   Trainer.set_initial_training_values, Trainer._init_training_state (resume position), _save_checkpoint
#   (the position rides in trainer_state.json as TrainerState.stateful_callbacks["ActiveSamplingPosition"]).

    def set_initial_training_values(self, args, dataloader):
        values = list(super().set_initial_training_values(args, dataloader))
        if self.active_sampling and args.max_steps > 0:
            # Refills consume pages, so an epoch gives fewer steps than the Trainer counts: allow enough
            # epochs to reach max_steps (training stops there).
            values[0] = max(values[0], args.max_steps)
        return tuple(values)

    def _init_training_state(self, max_steps, num_update_steps_per_epoch, num_train_epochs,
                             resume_from_checkpoint, trial):
        epochs, steps = super()._init_training_state(max_steps, num_update_steps_per_epoch, num_train_epochs,
                                                     resume_from_checkpoint, trial)
        if not self.active_sampling:
            return epochs, steps
        from olmocr_rl.active_sampling import ActiveSamplingPosition

        name = ActiveSamplingPosition.__name__
        position = ActiveSamplingPosition.read(self.state.stateful_callbacks)
        # A state loaded from a checkpoint saved without active sampling has no entry; the save needs one.
        self.state.stateful_callbacks.setdefault(name, ActiveSamplingPosition().state())
        if resume_from_checkpoint is None:
            return epochs, steps
        if position is None:
            logger.warning("--active_sampling: %s records no active sampling position; the page order after "
                           "resuming follows the Trainer's step count, not the pages refills consumed",
                           resume_from_checkpoint)
            return epochs, steps
        # The Trainer's position assumes one page chunk per step; refills took more.
        epochs, steps = position
        if self.args.ignore_data_skip:
            steps = 0
        self._as_resume_skip = (epochs, steps)
        return epochs, steps

    def _run_epoch(self, model, epoch, train_dataloader, *args, **kwargs):
        self._as_epoch = epoch
        self._as_iterator = None
        return super()._run_epoch(model, epoch, train_dataloader, *args, **kwargs)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        if not self.active_sampling:
            return super().get_batch_samples(epoch_iterator, num_batches, device)
        from olmocr_rl.active_sampling import PushbackIterator

        if self._as_iterator is None or self._as_iterator.inner is not epoch_iterator:
            # A new epoch; in the resumed one the Trainer already skipped the batches consumed before.
            skipped = 0
            if self._as_resume_skip is not None and self._as_resume_skip[0] == self._as_epoch:
                skipped = self._as_resume_skip[1]
            self._as_resume_skip = None
            self._as_iterator = PushbackIterator(epoch_iterator, pulled=skipped)
        return super().get_batch_samples(self._as_iterator, num_batches, device)

    def _save_checkpoint(self, model, trial):
        if self.active_sampling:
            from olmocr_rl.active_sampling import ActiveSamplingPosition

            # Stored by the Trainer inside trainer_state.json, written last (the checkpoint's completeness mark).
            # A restored callback replaces the one added in __init__, so look it up each time.
            for callback in self.callback_handler.callbacks:
                if isinstance(callback, ActiveSamplingPosition):
                    callback.epoch = self._as_epoch
                    callback.batches_consumed = None if self._as_iterator is None else self._as_iterator.pulled
        super()._save_checkpoint(model, trial)

    def _active_sampling_next_chunk(self):
        """The next page chunk of the epoch (the local generation batch), consumed; None at the epoch's end."""
        it = self._as_iterator
        if it is None:
            return None
        repeat = self.num_iterations * self.args.steps_per_generation
        # Repeats of the current chunk that later micro-steps still pull stay in front of the refills.
        remaining = (repeat - (it.pulled % repeat)) % repeat
        held = it.take_from_inner(remaining)
        if held is None:
            return None
        it.front.extend(held)
        batches = it.take_from_inner(repeat)
        return None if batches is None else batches[0]

    def _active_sampling_refill(self, batch):
        """One extra generation round (timed as such by olmocr_rl.timing): (scored batch, kept rows)."""
        return self._olmorl_generate_and_score(batch)

    def _active_sampling_fill(self, first, first_keep):
        from olmocr_rl.active_sampling import merge_rows

        G = self.num_generations
        device = first["advantages"].device
        outputs, keeps = [first], [first_keep]
        n_local = keeps[0].shape[0]
        target = n_local // G

        def kept_groups() -> list[tuple[int, int]]:
            return [(o, g) for o, keep in enumerate(keeps) for g in range(keep.shape[0] // G) if bool(keep[g * G])]

        rounds, why = 0, ""
        while True:
            short = torch.tensor([float(max(target - len(kept_groups()), 0))], device=device)
            if float(self.accelerator.gather(short).sum()) == 0:
                break
            if rounds >= self.active_sampling_max_rounds:
                why = f"--active_sampling_max_rounds {self.active_sampling_max_rounds} reached"
                break
            batch = self._active_sampling_next_chunk()
            got = torch.tensor([0.0 if batch is None else 1.0], device=device)
            if float(self.accelerator.gather(got).min()) == 0:  # every process stops together
                why = "no pages left in the epoch"
                break
            rounds += 1
            output, keep = self._active_sampling_refill(batch)
            outputs.append(output)
            keeps.append(keep)

        kept = kept_groups()[:target]
        fillers = [(o, g) for o, keep in enumerate(keeps) for g in range(keep.shape[0] // G)
                   if not bool(keep[g * G])][: target - len(kept)]  # zero-signal groups, masked out of the loss
        groups = kept + fillers
        picks = [(o, g * G + i) for o, g in groups for i in range(G)]
        merged = merge_rows(outputs, picks, self._tokenizer.pad_token_id)
        keep_rows = torch.tensor([bool(keeps[o][r]) for o, r in picks], device=device)
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", torch.ones_like(merged["completion_mask"]))
        merged["num_items_in_batch"] = self.accelerator.gather((loss_mask * keep_rows.unsqueeze(1)).sum()).sum()

        kept_all = int(self.accelerator.gather(torch.tensor([float(len(kept))], device=device)).sum())
        n_proc = self.accelerator.num_processes
        sampled_all = (rounds + 1) * target * n_proc
        metrics = self._metrics["train"]
        metrics["active_sampling/groups_sampled"].append(float(sampled_all))
        metrics["active_sampling/groups_kept"].append(float(kept_all))
        metrics["active_sampling/rounds"].append(float(rounds))
        if kept_all < target * n_proc and self.accelerator.is_main_process:
            logger.warning("active sampling: step %d trains on %d of %d groups with signal (%d extra rounds, %s)",
                           self.state.global_step + 1, kept_all, target * n_proc, rounds, why)
        return merged
