"""OlmoRL active sampling: keep every optimizer step's batch full of groups that carry a learning signal.

With ``--olmorl --active_sampling``, :class:`ActiveSampler` (owned by the trainer, ``trainer/plain.py``;
the keep mask is :class:`olmocr_rl.trainer.olmorl.OlmoRLGRPOTrainer`'s) generates and scores further
generation batches until each process holds its share of groups with signal
(``per_device_train_batch_size x gradient_accumulation_steps / num_generations``), or until
``--active_sampling_max_rounds`` extra rounds were generated. All of it runs inside the trainer's one
``_generate_and_score_completions`` override; nothing reaches into the transformers training loop.

Refill pages come from a sampler the trainer owns, not from the epoch: round ``r`` of the generation at global
step ``s`` draws its pages with a ``torch.Generator`` seeded by (``args.seed``, ``s``, ``r``) over the train
dataset's page indices (:func:`refill_pages`; every process draws the same list and takes its own slice). So the
epoch's own pages are untouched (an epoch gives the Trainer's step count), a step at an epoch's end refills like
any other, and a resumed run draws exactly the same refill pages with nothing saved in the checkpoint. A
checkpoint written before this design may hold an ``ActiveSamplingPosition`` in trainer_state.json; it is ignored,
with one warning line (transformers restores only callbacks the run has), and the resumed run follows the Trainer's step count
(docs/olmorl.md).

``merge_rows`` concatenates selected rows of several scored generation batches (TRL's
``_generate_and_score_completions`` outputs), re-padding prompts on the left and completions on the right.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import torch
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from olmocr_rl.olmorl.settings import ACTIVE_SAMPLING_MAX_ROUNDS, check_active_sampling_geometry
from olmocr_rl.trainer.compat import COMPLETION_ALIGNED_KEYS, OTHER_BATCH_KEYS, PROMPT_ALIGNED_KEYS, broken

logger = logging.getLogger(__name__)

# Per-row 2-D tensors aligned with the prompt are left-padded by TRL, those aligned with the completion
# right-padded; the key lists live in trainer/compat.py (a key in neither raises there, not mis-padded here).
_BATCH_KEYS_POINT = "trl.trainer.grpo_trainer:GRPOTrainer._generate_and_score_completions#batch_keys"


def refill_seed(seed: int, step: int, round_: int) -> int:
    """The refill generator's seed for (run seed, global step, refill round): distinct for distinct triples."""
    digest = hashlib.sha256(f"olmocr_rl.active_sampling:{seed}:{step}:{round_}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def refill_pages(num_pages: int, seed: int, step: int, round_: int, num_processes: int, rank: int,
                 pages_per_process: int) -> list[int]:
    """This process's refill page indices for one round: seeded permutations of ``range(num_pages)``, as many
    as the processes together need, sliced by rank (pages repeat only when the dataset has fewer pages)."""
    if num_pages < 1:
        raise ValueError("--active_sampling: the train dataset has no pages to refill from")
    generator = torch.Generator().manual_seed(refill_seed(seed, step, round_))
    need = num_processes * pages_per_process
    drawn: list[int] = []
    while len(drawn) < need:
        drawn += torch.randperm(num_pages, generator=generator).tolist()
    return drawn[rank * pages_per_process:(rank + 1) * pages_per_process]


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
    ``_generate_and_score_completions`` with its advantages and keep mask) scores each round, and the trainer's
    ``_generate_and_score_completions`` calls :meth:`fill` on the first round's result. Refill rounds build
    their generation batch from :func:`refill_pages` (see the module): each page's dataset row, repeated
    ``num_generations`` times in a row as TRL's ``RepeatSampler`` lays out a generation batch, through the
    trainer's data collator.
    """

    def __init__(self, trainer, config, max_rounds: int | None = None) -> None:
        max_rounds = ACTIVE_SAMPLING_MAX_ROUNDS if max_rounds is None else int(max_rounds)
        check_active_sampling_geometry(config.per_device_train_batch_size, config.steps_per_generation,
                                       config.gradient_accumulation_steps, config.num_generations, max_rounds)
        self.trainer = trainer
        self.max_rounds = max_rounds

    def next_chunk(self, round_: int) -> list:
        """The local generation batch of refill round ``round_`` (1, 2, ...) at the trainer's current step."""
        trainer = self.trainer
        args, dataset, G = trainer.args, trainer.train_dataset, trainer.num_generations
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError("--active_sampling refills from the train dataset's page indices; it needs a "
                             "map-style dataset (with a length), not an iterable one")
        pages = args.per_device_train_batch_size * args.steps_per_generation // G
        indices = refill_pages(len(dataset), args.seed, trainer.state.global_step, round_,
                               trainer.accelerator.num_processes, trainer.accelerator.process_index, pages)
        return trainer.data_collator([dataset[i] for i in indices for _ in range(G)])

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
            rounds += 1  # every process reaches the same decision: the gathered shortfall and the same bound
            output, keep = self.refill(self.next_chunk(rounds))
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
