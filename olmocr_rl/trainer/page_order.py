"""Every epoch's page order from (seed, epoch) alone, so a resumed run sees the pages it would have seen.

TRL 1.16's ``RepeatSampler`` draws each epoch's shuffle in turn from one generator seeded at construction,
so a sampler built fresh at a resume in epoch E > 0 would replay epoch 0's order.
The trainer (``trainer/plain.py``) uses an :class:`EpochSeededRepeatSampler` (:func:`epoch_seeded`) and sets its
epoch at the start of every epoch, the resumed one included. Epoch 0's order is TRL's exactly. What a resume restores:
docs/storage.md ("Preemption and resume").
"""

from __future__ import annotations

from typing import Any

from trl.trainer.utils import RepeatSampler

from olmocr_rl.trainer.compat import broken


class EpochSeededRepeatSampler(RepeatSampler):
    """``RepeatSampler`` reshuffled from ``seed`` and the epoch at every pass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            self.generator.manual_seed((self.seed or 0) + 1_000_003 * self.epoch)
        return super().__iter__()


def epoch_seeded(sampler) -> EpochSeededRepeatSampler:
    """TRL's train sampler (``GRPOTrainer._get_train_sampler``) as an :class:`EpochSeededRepeatSampler`.

    Relies on it being a ``RepeatSampler`` (checked: another class raises CompatError); the trainer sets the
    sampler's epoch at the start of every epoch (``Trainer._run_epoch``; trainer/compat.py lists both).
    """
    if type(sampler) is not RepeatSampler:
        raise broken("trl.trainer.grpo_trainer:RepeatSampler",
                     f"is not what _get_train_sampler returned ({type(sampler).__module__}."
                     f"{type(sampler).__qualname__}), so each epoch's page order cannot be seeded from the epoch")
    return EpochSeededRepeatSampler(
        data_source=sampler.data_source, mini_repeat_count=sampler.mini_repeat_count,
        batch_size=sampler.batch_size, repeat_count=sampler.repeat_count, shuffle=sampler.shuffle,
        seed=sampler.seed,
    )
