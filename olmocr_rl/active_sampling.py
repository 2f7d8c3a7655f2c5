"""OlmoRL active sampling: keep every optimizer step's batch full of groups that carry a learning signal.

With ``--olmorl --active_sampling``, :class:`olmocr_rl.olmorl_trainer.OlmoRLGRPOTrainer` generates and scores
further generation batches (the next pages of the epoch) until each process holds its share of groups with
signal (``per_device_train_batch_size x gradient_accumulation_steps / num_generations``), or until
``--active_sampling_max_rounds`` extra rounds were generated, or the epoch has no pages left. The helpers
here are the pieces that do not need the trainer:

``merge_rows``          rows of several scored generation batches (TRL's ``_generate_and_score_completions``
                        outputs) selected and concatenated into one, re-padding prompts on the left and
                        completions on the right.
``PushbackIterator``    the Trainer's epoch iterator with a front queue, so a refill can take whole page
                        chunks ahead of repeats of the current one that later micro-steps still expect.
``ActiveSamplingPosition``  the epoch and how many dataloader batches it had consumed, kept in every
                        checkpoint's ``trainer_state.json`` (a transformers stateful callback).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

# Per-row 2-D tensors aligned with the prompt (left-padded by TRL); every other per-row 2-D tensor is
# aligned with the completion (right-padded).
_PROMPT_ALIGNED = {"prompt_ids", "prompt_mask", "token_type_ids", "mm_token_type_ids"}


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
    """Where the epoch's pages stand: ``epoch`` and ``batches_consumed`` (None before the first step).

    The Trainer writes ``state()`` into ``trainer_state.json`` under ``stateful_callbacks`` (the file whose
    presence makes a checkpoint complete), so a checkpoint cannot lack it or hold half of it. The trainer sets
    the attributes just before each save and reads them back from the loaded state when it resumes.
    """

    def __init__(self, epoch: int = 0, batches_consumed: int | None = None) -> None:
        self.epoch = epoch
        self.batches_consumed = batches_consumed

    def state(self) -> dict:
        return {"args": {}, "attributes": {"epoch": self.epoch, "batches_consumed": self.batches_consumed}}

    @classmethod
    def read(cls, stateful_callbacks: dict) -> tuple[int, int] | None:
        """(epoch, batches consumed) from a loaded ``TrainerState.stateful_callbacks``, or None."""
        record = stateful_callbacks.get(cls.__name__)
        if isinstance(record, list):
            record = record[-1] if record else None
        attributes = record.get("attributes") if isinstance(record, dict) else None
        if not isinstance(attributes, dict):
            return None
        epoch, consumed = attributes.get("epoch"), attributes.get("batches_consumed")
        if not isinstance(epoch, int) or not isinstance(consumed, int):
            return None
        return epoch, consumed


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
    picked row are trimmed, so the merged batch is no wider than it needs to be.
    """
    split = [split_pixel_values_by_grid(o) for o in outputs]
    merged: dict[str, Any] = {}
    for key, first in split[0].items():
        if first is None:
            merged[key] = None
        elif isinstance(first, torch.Tensor) and first.ndim == 0:
            merged[key] = first
        elif isinstance(first, torch.Tensor) and first.ndim >= 2 and key not in ("pixel_values", "image_grid_thw"):
            left = key in _PROMPT_ALIGNED
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
            aligned = (key in _PROMPT_ALIGNED) if left else (key not in _PROMPT_ALIGNED)
            if (aligned and isinstance(value, torch.Tensor) and value.ndim >= 2 and value.shape[1] == width
                    and key not in ("pixel_values", "image_grid_thw")):
                merged[key] = value[:, lo:hi]
    return unsplit_pixel_values_by_grid(merged)
