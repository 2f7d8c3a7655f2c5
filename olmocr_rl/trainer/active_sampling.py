"""OlmoRL active sampling: keep every optimizer step's batch full of groups that carry a learning signal.

With ``--olmorl --active_sampling``, :class:`ActiveSampler` (owned by the trainer, ``trainer/plain.py``;
the keep mask is :class:`olmocr_rl.trainer.olmorl.OlmoRLGRPOTrainer`'s) generates and scores further
generation batches (the next pages of the epoch) until each process holds its share of groups with
signal (``per_device_train_batch_size x gradient_accumulation_steps / num_generations``), or until
``--active_sampling_max_rounds`` extra rounds were generated, or the epoch has no pages left. The pieces
that do not need the trainer:

``merge_rows``          rows of several scored generation batches (TRL's ``_generate_and_score_completions``
                        outputs) selected and concatenated into one, re-padding prompts on the left and
                        completions on the right.
``PushbackIterator``    the Trainer's epoch iterator with a front queue, so a refill can take whole page
                        chunks ahead of repeats of the current one that later micro-steps still expect.
``ActiveSamplingPosition``  the epoch, how many dataloader batches it had consumed and how many of the next
                        epoch's its refills took, kept in every checkpoint's ``trainer_state.json`` (a
                        transformers stateful callback).

A refill that reaches the end of the epoch goes on into the next epoch's order (the same (seed, epoch) shuffle
the Trainer will iterate), and that epoch then starts after the batches borrowed from it; it always keeps at
least one page chunk of its own, and the run's last epoch lends nothing.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from olmocr_rl.olmorl.settings import ACTIVE_SAMPLING_MAX_ROUNDS, check_active_sampling_geometry
from olmocr_rl.trainer.compat import COMPLETION_ALIGNED_KEYS, OTHER_BATCH_KEYS, PROMPT_ALIGNED_KEYS, broken

logger = logging.getLogger(__name__)

# Per-row 2-D tensors aligned with the prompt are left-padded by TRL, those aligned with the completion
# right-padded; the key lists live in trainer/compat.py (a key in neither raises there, not mis-padded here).
_BATCH_KEYS_POINT = "trl.trainer.grpo_trainer:GRPOTrainer._generate_and_score_completions#batch_keys"
_TRAINING_VALUES_POINT = "transformers.trainer:Trainer.set_initial_training_values"


class PushbackIterator:
    """An iterator with a front queue; ``pulled`` counts items taken from the wrapped iterator."""

    def __init__(self, inner: Iterator, pulled: int = 0) -> None:
        self.inner = inner
        self.front: deque = deque()
        self.pulled = pulled

    def __iter__(self):
        return self

    def __next__(self):
        if self.front:
            return self.front.popleft()
        item = next(self.inner)
        self.pulled += 1
        return item

    def take_from_inner(self, n: int) -> list | None:
        """The next ``n`` items of the wrapped iterator (skipping the front queue); None if it ends first
        (the items taken are consumed all the same)."""
        items = []
        for _ in range(n):
            try:
                items.append(next(self.inner))
            except StopIteration:
                return None
            self.pulled += 1
        return items


class ActiveSamplingPosition(TrainerCallback, ExportableState):
    """Where the epoch's pages stand: ``epoch``, ``batches_consumed`` (None before the first step) and
    ``next_epoch_batches_consumed`` (batches of epoch + 1 that refills took before it began).

    The Trainer writes ``state()`` into ``trainer_state.json`` under ``stateful_callbacks`` (the file whose
    presence makes a checkpoint complete), so a checkpoint cannot lack it or hold half of it. The trainer sets
    the attributes just before each save and reads them back from the loaded state when it resumes.
    """

    def __init__(self, epoch: int = 0, batches_consumed: int | None = None, next_epoch_batches_consumed: int = 0) -> None:
        self.epoch = epoch
        self.batches_consumed = batches_consumed
        self.next_epoch_batches_consumed = next_epoch_batches_consumed

    def state(self) -> dict:
        return {"args": {}, "attributes": {"epoch": self.epoch, "batches_consumed": self.batches_consumed,
                                           "next_epoch_batches_consumed": self.next_epoch_batches_consumed}}

    @classmethod
    def read(cls, stateful_callbacks: dict) -> tuple[int, int, int] | None:
        """(epoch, batches consumed, batches of the next epoch consumed) from a loaded
        ``TrainerState.stateful_callbacks``, or None (a checkpoint from before the third: 0)."""
        record = stateful_callbacks.get(cls.__name__)
        if isinstance(record, list):
            record = record[-1] if record else None
        attributes = record.get("attributes") if isinstance(record, dict) else None
        if not isinstance(attributes, dict):
            return None
        epoch, consumed = attributes.get("epoch"), attributes.get("batches_consumed")
        if not isinstance(epoch, int) or not isinstance(consumed, int):
            return None
        borrowed = attributes.get("next_epoch_batches_consumed", 0)
        return epoch, consumed, borrowed if isinstance(borrowed, int) else 0


def _pad_to(t: torch.Tensor, width: int, left: bool, value: float) -> torch.Tensor:
    missing = width - t.shape[1]
    if missing <= 0:
        return t
    pad = (missing, 0) if left else (0, missing)
    return torch.nn.functional.pad(t, pad + (0, 0) * (t.ndim - 2), value=value)


def merge_rows(outputs: list[dict[str, Any]], picks: list[tuple[int, int]], pad_token_id: int) -> dict[str, Any]:
    """One scored batch made of ``picks`` = [(output index, row index), ...] in that order.

    Scalars (``num_items_in_batch``) are taken from ``outputs[0]``; the caller recounts them. Pixel values
    follow their rows through TRL's own split/unsplit by image grid. Columns that are padding in every
    picked row are trimmed, so the merged batch is no wider than it needs to be. A 2-D per-row tensor under a
    key trainer/compat.py does not list raises CompatError (its padding side is unknown).
    """
    token_columns = {key for o in outputs for key, value in o.items() if isinstance(value, torch.Tensor) and value.ndim >= 2}
    unknown = sorted(token_columns - PROMPT_ALIGNED_KEYS - COMPLETION_ALIGNED_KEYS - OTHER_BATCH_KEYS)
    if unknown:  # a per-row token column whose padding side (prompt: left, completion: right) nobody told us
        raise broken(_BATCH_KEYS_POINT, f"scored batch holds {', '.join(unknown)}, whose padding side is unknown")
    split = [split_pixel_values_by_grid(o) for o in outputs]
    merged: dict[str, Any] = {}
    for key, first in split[0].items():
        if first is None:
            merged[key] = None
        elif isinstance(first, torch.Tensor) and first.ndim == 0:
            merged[key] = first
        elif isinstance(first, torch.Tensor) and first.ndim >= 2 and key not in ("pixel_values", "image_grid_thw"):
            left = key in PROMPT_ALIGNED_KEYS
            width = max(s[key].shape[1] for s in split)
            value = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            padded = [_pad_to(s[key], width, left, value) for s in split]
            merged[key] = torch.stack([padded[o][r] for o, r in picks])
        elif isinstance(first, torch.Tensor):
            merged[key] = torch.stack([split[o][key][r] for o, r in picks])
        else:  # per-row lists: split pixel values / grids, num_images
            merged[key] = [split[o][key][r] for o, r in picks]
    for mask_key, left in (("prompt_mask", True), ("completion_mask", False)):
        mask = merged.get(mask_key)
        if not isinstance(mask, torch.Tensor) or mask.ndim != 2:
            continue
        used = mask.sum(dim=0) != 0
        if not used.any():
            continue
        idx = torch.nonzero(used).flatten()
        lo, hi = (int(idx[0]), mask.shape[1]) if left else (0, int(idx[-1]) + 1)
        width = mask.shape[1]
        for key, value in list(merged.items()):
            aligned = (key in PROMPT_ALIGNED_KEYS) if left else (key not in PROMPT_ALIGNED_KEYS)
            if (aligned and isinstance(value, torch.Tensor) and value.ndim >= 2 and value.shape[1] == width
                    and key not in ("pixel_values", "image_grid_thw")):
                merged[key] = value[:, lo:hi]
    return unsplit_pixel_values_by_grid(merged)


class ActiveSampler:
    """Active sampling's state and steps, owned by the trainer (``active_sampling=True``, ``trainer/plain.py``).

    The trainer's ``_score_generation_batch(inputs) -> (scored batch, kept rows)`` (OlmoRL's: TRL's
    ``_generate_and_score_completions`` with its advantages and keep mask) scores each round, and the trainer
    calls :meth:`fill` on the first round's result. The trainer's overrides of these TRL 1.16 / transformers 5
    internals call in here (each listed in ``trainer/compat.py``): ``Trainer._run_epoch`` (:meth:`begin_epoch`:
    epoch index and dataloader; refills past the epoch's end iterate the next epoch's order from the dataloader's
    ``base_dataloader`` (accelerate), so the shard's end-of-epoch bookkeeping is left to the Trainer's own pass),
    ``Trainer.get_batch_samples`` (:meth:`epoch_iterator`), ``Trainer.set_initial_training_values``
    (:meth:`training_values`), ``Trainer._init_training_state`` (:meth:`resume_position`),
    ``Trainer._save_checkpoint`` (:meth:`record_position`: the position rides in trainer_state.json as
    ``TrainerState.stateful_callbacks["ActiveSamplingPosition"]``). Each page chunk is one generation batch,
    repeated num_iterations x steps_per_generation times by TRL's (epoch-seeded) ``RepeatSampler``.
    """

    def __init__(self, trainer, config, max_rounds: int | None = None) -> None:
        max_rounds = ACTIVE_SAMPLING_MAX_ROUNDS if max_rounds is None else int(max_rounds)
        check_active_sampling_geometry(config.per_device_train_batch_size, config.steps_per_generation,
                                       config.gradient_accumulation_steps, config.num_generations, max_rounds)
        self.trainer = trainer
        self.max_rounds = max_rounds
        self.iterator: PushbackIterator | None = None  # over the Trainer's current epoch iterator
        self.epoch = 0
        self.resume_skip: tuple[int, int] | None = None  # (epoch, batches) read from the checkpoint
        self.resume_borrowed: tuple[int, int] | None = None  # (epoch + 1, its batches taken), from it too
        self.dataloader = None  # the Trainer's train dataloader, for the next epoch's order
        self.num_epochs: int | None = None  # epochs the Trainer will run
        self.lookahead: PushbackIterator | None = None  # over the next epoch's order, while refills borrow
        self.borrowed = 0  # batches of epoch self.epoch + 1 that refills of this epoch consumed
        self.carried = 0  # batches of this epoch that the last epoch's refills consumed (skipped at its start)

    def start(self) -> None:
        """Once the trainer is built: the position's stateful callback."""
        self.trainer.add_callback(ActiveSamplingPosition())

    def training_values(self, values, args):
        values = list(values)
        if len(values) != 7:  # (num_train_epochs, ..., max_steps): values[0] is the epoch count
            raise broken(_TRAINING_VALUES_POINT, f"returned {len(values)} values, not the 7 whose first is num_train_epochs")
        if args.max_steps > 0:
            # Refills consume pages, so an epoch gives fewer steps than the Trainer counts: allow enough
            # epochs to reach max_steps (training stops there).
            values[0] = max(values[0], args.max_steps)
        self.num_epochs = int(values[0])
        return tuple(values)

    def resume_position(self, epochs, steps, resume_from_checkpoint):
        """The Trainer's (epochs, steps) to skip at a resume, corrected for the pages refills consumed."""
        trainer = self.trainer
        name = ActiveSamplingPosition.__name__
        position = ActiveSamplingPosition.read(trainer.state.stateful_callbacks)
        # A state loaded from a checkpoint saved without active sampling has no entry; the save needs one.
        trainer.state.stateful_callbacks.setdefault(name, ActiveSamplingPosition().state())
        if resume_from_checkpoint is None:
            return epochs, steps
        if position is None:
            logger.warning("--active_sampling: %s records no active sampling position; the page order after "
                           "resuming follows the Trainer's step count, not the pages refills consumed",
                           resume_from_checkpoint)
            return epochs, steps
        # The Trainer's position assumes one page chunk per step; refills took more.
        epochs, steps, borrowed = position
        if trainer.args.ignore_data_skip:
            steps = borrowed = 0
        self.resume_skip = (epochs, steps)
        self.resume_borrowed = (epochs + 1, borrowed)
        return epochs, steps

    def begin_epoch(self, epoch, train_dataloader) -> None:
        self.carried = self.borrowed if epoch == self.epoch + 1 else 0
        self.epoch = epoch
        self.iterator = None
        self.dataloader = train_dataloader
        self.lookahead, self.borrowed = None, 0
        if self.resume_borrowed is not None:  # resumed in this epoch after its refills had borrowed
            if self.resume_borrowed[0] == epoch + 1:
                self.borrowed = self.resume_borrowed[1]
            self.resume_borrowed = None

    def epoch_iterator(self, epoch_iterator):
        """The iterator the Trainer's ``get_batch_samples`` should read: its epoch iterator behind a front queue."""
        if self.iterator is None or self.iterator.inner is not epoch_iterator:
            # A new epoch; in the resumed one the Trainer already skipped the batches consumed before.
            skipped = 0
            if self.resume_skip is not None and self.resume_skip[0] == self.epoch:
                skipped = self.resume_skip[1]
            self.resume_skip = None
            self.iterator = PushbackIterator(epoch_iterator, pulled=skipped)
            if self.carried and not skipped:  # the last epoch's refills already trained on these
                self.iterator.take_from_inner(self.carried)
            self.carried = 0
        return self.iterator

    def record_position(self) -> None:
        """Before a checkpoint is saved: the position into its ``ActiveSamplingPosition`` callback.

        Stored by the Trainer inside trainer_state.json, written last (the checkpoint's completeness mark).
        A restored callback replaces the one added at construction, so it is looked up each time."""
        for callback in self.trainer.callback_handler.callbacks:
            if isinstance(callback, ActiveSamplingPosition):
                callback.epoch = self.epoch
                callback.batches_consumed = None if self.iterator is None else self.iterator.pulled
                callback.next_epoch_batches_consumed = self.borrowed

    def next_chunk(self):
        """The next page chunk (the local generation batch), consumed: from this epoch, then from the next
        epoch's order; None when neither has one to give."""
        it = self.iterator
        if it is None:
            return None
        trainer = self.trainer
        repeat = trainer.num_iterations * trainer.args.steps_per_generation
        # Repeats of the current chunk that later micro-steps still pull stay in front of the refills.
        remaining = (repeat - (it.pulled % repeat)) % repeat
        held = it.take_from_inner(remaining)
        if held is None:
            return None
        it.front.extend(held)
        batches = it.take_from_inner(repeat)
        if batches is None:
            batches = self.borrow(repeat)
        return None if batches is None else batches[0]

    def borrow(self, repeat: int) -> list | None:
        """``repeat`` batches (one page chunk and its repeats) from the next epoch's order, or None: no next epoch
        in this run, no epoch-seeded sampler, or the next epoch would be left without a chunk of its own."""
        sampler = self.trainer._page_sampler
        if self.dataloader is None or sampler is None or self.num_epochs is None:
            return None
        if self.epoch + 1 >= self.num_epochs:
            return None
        if self.borrowed + 2 * repeat > len(self.dataloader):
            return None
        if self.lookahead is None:
            self.lookahead = PushbackIterator(self.epoch_batches(self.epoch + 1, sampler))
            if self.borrowed and self.lookahead.take_from_inner(self.borrowed) is None:
                return None  # resumed: the batches borrowed before the checkpoint
        batches = self.lookahead.take_from_inner(repeat)
        if batches is not None:
            self.borrowed += repeat
        return batches

    def epoch_batches(self, epoch: int, sampler) -> Iterator:
        """This process's dataloader batches of ``epoch``, in the order the Trainer will see them.

        The epoch-seeded sampler draws its order when the first batch is taken, so the sampler's epoch is set for
        that first batch only. accelerate's ``base_dataloader`` (the shard's own loader: same batches, this
        process's share) is read so the Trainer's pass keeps the shard's state to itself.
        """
        loader = getattr(self.dataloader, "base_dataloader", self.dataloader)
        current = sampler.epoch
        sampler.set_epoch(epoch)
        try:
            iterator = iter(loader)
            first = next(iterator, None)
        finally:
            sampler.set_epoch(current)
        return iter(()) if first is None else itertools.chain([first], iterator)

    def refill(self, batch):
        """One extra generation round, timed as such (``timing/active_sampling_s``): (scored batch, kept rows)."""
        with self.trainer.step_clock.refill():
            return self.trainer._score_generation_batch(batch)

    def fill(self, first, first_keep):
        """The step's batch: the first round's groups with signal, topped up by refills (see the module)."""
        if first_keep is None:
            raise ValueError("active sampling needs a trainer whose _score_generation_batch returns kept rows "
                             "(OlmoRL: --olmorl)")
        trainer = self.trainer
        G = trainer.num_generations
        device = first["advantages"].device
        outputs, keeps = [first], [first_keep]
        n_local = keeps[0].shape[0]
        target = n_local // G

        def kept_groups() -> list[tuple[int, int]]:
            return [(o, g) for o, keep in enumerate(keeps) for g in range(keep.shape[0] // G) if bool(keep[g * G])]

        rounds, why = 0, ""
        while True:
            short = torch.tensor([float(max(target - len(kept_groups()), 0))], device=device)
            if float(trainer.accelerator.gather(short).sum()) == 0:
                break
            if rounds >= self.max_rounds:
                why = f"--active_sampling_max_rounds {self.max_rounds} reached"
                break
            batch = self.next_chunk()
            got = torch.tensor([0.0 if batch is None else 1.0], device=device)
            if float(trainer.accelerator.gather(got).min()) == 0:  # every process stops together
                why = "no pages left in this epoch or the next"
                break
            rounds += 1
            output, keep = self.refill(batch)
            outputs.append(output)
            keeps.append(keep)

        kept = kept_groups()[:target]
        fillers = [(o, g) for o, keep in enumerate(keeps) for g in range(keep.shape[0] // G)
                   if not bool(keep[g * G])][: target - len(kept)]  # zero-signal groups, masked out of the loss
        groups = kept + fillers
        picks = [(o, g * G + i) for o, g in groups for i in range(G)]
        merged = merge_rows(outputs, picks, trainer._tokenizer.pad_token_id)
        keep_rows = torch.tensor([bool(keeps[o][r]) for o, r in picks], device=device)
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", torch.ones_like(merged["completion_mask"]))
        merged["num_items_in_batch"] = trainer.accelerator.gather((loss_mask * keep_rows.unsqueeze(1)).sum()).sum()

        kept_all = int(trainer.accelerator.gather(torch.tensor([float(len(kept))], device=device)).sum())
        n_proc = trainer.accelerator.num_processes
        sampled_all = (rounds + 1) * target * n_proc
        metrics = trainer._metrics["train"]
        metrics["active_sampling/groups_sampled"].append(float(sampled_all))
        metrics["active_sampling/groups_kept"].append(float(kept_all))
        metrics["active_sampling/rounds"].append(float(rounds))
        if kept_all < target * n_proc and trainer.accelerator.is_main_process:
            logger.warning("active sampling: step %d trains on %d of %d groups with signal (%d extra rounds, %s)",
                           trainer.state.global_step + 1, kept_all, target * n_proc, rounds, why)
        return merged
