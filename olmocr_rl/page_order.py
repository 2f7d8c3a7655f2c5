"""Every epoch's page order from (seed, epoch) alone, so a resumed run sees the pages it would have seen.

TRL 1.16's ``RepeatSampler`` seeds one generator at construction and draws each epoch's shuffle from it
in turn. A run resumed in epoch E > 0 builds a fresh sampler in a fresh process, so it replays epoch 0's
order (measured: a resume at step 11 of 10 pages a epoch gave rewards 0.34 away from the uninterrupted
run's on the next steps). :class:`EpochSeededOrderMixin` gives both trainers a sampler that reseeds
from (seed, epoch) at every pass; the Trainer tells it the epoch (``set_epoch``) before each one, the
resumed one included. Epoch 0's order is TRL's exactly.
"""

from __future__ import annotations

from trl.trainer.utils import RepeatSampler

from olmocr_rl.active_sampling import EpochSeededRepeatSampler


class EpochSeededOrderMixin:
    """Put before ``GRPOTrainer`` in the bases: its train sampler becomes an :class:`EpochSeededRepeatSampler`."""

    def _get_train_sampler(self, dataset=None):
        sampler = super()._get_train_sampler(dataset)
        if type(sampler) is not RepeatSampler:
            return sampler
        return EpochSeededRepeatSampler(
            data_source=sampler.data_source, mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size, repeat_count=sampler.repeat_count, shuffle=sampler.shuffle,
            seed=sampler.seed,
        )
