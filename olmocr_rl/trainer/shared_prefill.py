"""Shared prefill in Hugging Face generation (``--shared_prefix``): a page's prompt is prefilled once, not G times.

TRL 1.16 generates a group's G completions from G copies of the page prompt, so ``generate``'s prefill forwards
the prompt's tokens through the language model G times (the vision tower already encodes each distinct page once:
``--share_page_encoding``). :func:`shared_prefill` wraps the model's prefill for one ``generate`` call: rows with
the same prompt -- the same tokens and mask, the same image grids and pixels -- are prefilled once, and the
prefill's result is copied to each row of the group: the last position's logits and the KV cache (``DynamicCache``
rows gathered), the M-RoPE deltas of the whole batch left as ``generate`` computed them. Decoding then runs on all
G rows as before, drawing the same random numbers in the same order.

The rows' cache is gathered into room for the whole completion (prompt + ``max_new_tokens`` positions), so each
decoding step writes its token's keys and values in place: ``DynamicCache`` copies every layer's whole cache once
per generated token (``torch.cat``), which grows with the prompt times the completion. The attention reads the same
values (a view of the first positions), so nothing else changes; a cache edited in between (cropped is fine;
rows re-selected or reordered, moved, or full) goes back to ``DynamicCache``'s copying update.

What a row sees is what the stock prefill computes for it: the same tokens, mask and positions, in a batch of the
groups' first rows instead of all rows (the same padding, since the longest prompt stays). The first use checks
itself: the stock prefill runs too, into a cache of its own, and the last logits and every layer's keys and values
must agree within the dtype's tolerance (olmocr_rl.model.fallback); a failure, then or later, turns it off for the
run with one warning line, and that batch goes on from the stock prefill. On CPU in fp32 the sampled ids equal the
stock path's for the same seed (tests/unit/test_shared_prefill.py); kernels whose results depend on the batch size
may round differently, which the check bounds.

Calls it leaves to the stock prefill: no two rows share a prompt, a cache other than ``DynamicCache`` (the static
cache of ``--compiled_generation``), chunked prefill, videos, inputs given as embeddings, attention or hidden
states asked for.
"""

from __future__ import annotations

import contextlib
import copy
import logging

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from olmocr_rl.trainer.prefix_steps import _groups
from olmocr_rl.trainer.shared_prefix import SharedPrefixGuard

logger = logging.getLogger(__name__)

__all__ = ["PrefillGuard", "prefill_groups", "shared_prefill"]

#: model_kwargs of a prefill whose first dimension is the batch (sliced to the groups' first rows).
_ROW_INPUTS = ("attention_mask", "mm_token_type_ids", "token_type_ids")


class PrefillGuard(SharedPrefixGuard):
    """The run's state of the shared prefill (checked, off, shared_calls: as the training forward's guard)."""

    FLAG, STOCK = "--shared_prefix (generation)", "the stock prefill (one row per completion)"

    def __init__(self):
        super().__init__()
        self.rows = self.prefilled = 0  # rows generated, rows prefilled, over the shared calls
        self.in_place = True  # decoding writes into room made at the prefill (False: DynamicCache's copying update)


def _images_per_row(model, input_ids, grid) -> list[int] | None:
    """How many of ``image_grid_thw``'s images each row holds (counted by the image-start tokens), or None."""
    config = model.config
    start, image = getattr(config, "vision_start_token_id", None), getattr(config, "image_token_id", None)
    if start is None or image is None:
        return None
    opens = (input_ids[:, :-1] == start) & (input_ids[:, 1:] == image)
    counts = [int(n) for n in opens.sum(dim=1)]
    return counts if sum(counts) == len(grid) else None


def prefill_groups(model, input_ids, model_kwargs) -> list[list[int]] | None:
    """Rows that share a prompt, first seen first (each a list of row indices), or None: nothing to share, or a
    call this module leaves to the stock prefill."""
    if model_kwargs.get("inputs_embeds") is not None or model_kwargs.get("pixel_values_videos") is not None:
        return None
    mask = model_kwargs.get("attention_mask")
    pixels, grid = model_kwargs.get("pixel_values"), model_kwargs.get("image_grid_thw")
    images = None  # per row: its images' grids and pixels, in order (rows with equal tokens hold as many)
    if pixels is not None:
        counts = None if grid is None else _images_per_row(model, input_ids, grid)
        if counts is None:
            return None
        sizes = [int(n) for n in grid.prod(dim=-1)]
        if sum(sizes) != len(pixels):
            return None
        chunks = iter(zip(grid, torch.split(pixels, sizes)))
        images = [[piece for _ in range(count) for piece in next(chunks)] for count in counts]
    rows = input_ids if mask is None else torch.stack([input_ids, mask.to(input_ids.dtype)], dim=1)
    groups = _groups(list(rows), images)
    return groups if len(groups) < len(input_ids) else None


def _reduced(model, input_ids, model_kwargs, groups):
    """The prefill's inputs for the groups' first rows; and the index that copies their rows back to every row."""
    firsts = torch.tensor([group[0] for group in groups], device=input_ids.device)
    index = torch.empty(len(input_ids), dtype=torch.long, device=input_ids.device)
    for slot, group in enumerate(groups):
        index[group] = slot
    kwargs = dict(model_kwargs)
    for name in _ROW_INPUTS:
        if kwargs.get(name) is not None:
            kwargs[name] = kwargs[name][firsts]
    if kwargs.get("position_ids") is not None:  # (rows, length) or M-RoPE's (planes, rows, length)
        positions = kwargs["position_ids"]
        kwargs["position_ids"] = positions[firsts] if positions.dim() == 2 else positions[:, firsts]
    if kwargs.get("pixel_values") is not None:
        grid = kwargs["image_grid_thw"]
        counts = _images_per_row(model, input_ids, grid)
        owner = torch.repeat_interleave(torch.arange(len(input_ids)), torch.tensor(counts))
        keep_images = torch.isin(owner, firsts.cpu())
        sizes = grid.prod(dim=-1)
        keep_pixels = torch.repeat_interleave(keep_images.to(sizes.device), sizes)
        kwargs["pixel_values"] = kwargs["pixel_values"][keep_pixels.to(kwargs["pixel_values"].device)]
        kwargs["image_grid_thw"] = grid[keep_images.to(grid.device)]
    return input_ids[firsts], kwargs, index


def _unsupported(generation_config, model_kwargs) -> str | None:
    cache = model_kwargs.get("past_key_values")
    if type(cache) is not DynamicCache or cache.get_seq_length() != 0:
        return "cache"
    if generation_config.prefill_chunk_size is not None:
        return "chunked prefill"
    if generation_config.output_attentions or generation_config.output_hidden_states:
        return "attentions or hidden states asked for"
    return None


def _agreement(shared, stock) -> float:
    """Largest relative difference between two prefills' last logits and their caches' keys and values."""
    from olmocr_rl.model.fallback import relative_difference

    worst = relative_difference(shared.logits[:, -1].float(), stock.logits[:, -1].float())
    for ours, theirs in zip(shared.past_key_values.layers, stock.past_key_values.layers):
        for a, b in ((ours.keys, theirs.keys), (ours.values, theirs.values)):
            worst = max(worst, relative_difference(a.float(), b.float()))
    return worst


class _SharedPrefill:
    """The model's ``_prefill`` for one ``generate`` call."""

    def __init__(self, model, stock_prefill, guard: PrefillGuard):
        self.model, self.stock, self.guard = model, stock_prefill, guard

    def __call__(self, input_ids, generation_config, model_kwargs, *args, **kwargs):
        if self.guard.off or _unsupported(generation_config, model_kwargs):
            return self.stock(input_ids, generation_config, model_kwargs, *args, **kwargs)
        groups = prefill_groups(self.model, input_ids, model_kwargs)
        if groups is None:
            return self.stock(input_ids, generation_config, model_kwargs, *args, **kwargs)
        inner = getattr(self.model, "model", None)
        deltas = getattr(inner, "rope_deltas", None)  # the whole batch's, computed by generate before the prefill
        try:
            return self._checked(input_ids, generation_config, model_kwargs, groups, *args, **kwargs)
        finally:
            if deltas is not None:
                inner.rope_deltas = deltas

    def _checked(self, input_ids, generation_config, model_kwargs, groups, *args, **kwargs):
        from olmocr_rl.model.fallback import compute_dtype, reason_of, tolerance

        empty = copy.deepcopy(model_kwargs["past_key_values"])  # an empty DynamicCache: nothing to copy
        stock_kwargs = {**model_kwargs, "past_key_values": empty}
        try:
            trial = self._shared(input_ids, generation_config, model_kwargs, groups, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure of the speed-up falls back to the stock prefill
            self.guard.fall_back(f"{'a' if self.guard.checked else 'its first'} prefill failed: {reason_of(exc)}")
            return self.stock(input_ids, generation_config, stock_kwargs, *args, **kwargs)
        if self.guard.checked:
            return trial
        reference = self.stock(input_ids, generation_config, stock_kwargs, *args, **kwargs)
        dtype = compute_dtype(self.model, reference.logits.dtype)
        difference, allowed = _agreement(trial, reference), tolerance(dtype)
        if difference > allowed:
            self.guard.fall_back(f"its first prefill differs from the stock one by {difference:.2g} (relative), "
                                 f"more than the {allowed:.0e} allowed in {dtype}")
            return reference  # generate goes on with the stock prefill's cache (it takes the cache from the output)
        self.guard.checked = True
        logger.info("shared prefill: the first generation's prefill (%d rows, %d prompts) matches the stock one "
                    "(relative difference %.1e, %.0e allowed in %s)", len(input_ids), len(groups), difference, allowed,
                    dtype)
        return trial

    def _shared(self, input_ids, generation_config, model_kwargs, groups, *args, **kwargs):
        deltas = getattr(getattr(self.model, "model", None), "rope_deltas", None)
        ids, reduced, index = _reduced(self.model, input_ids, model_kwargs, groups)
        out = self.stock(ids, generation_config, reduced, *args, **kwargs)
        room = _new_tokens(generation_config, input_ids) if self.guard.in_place else None
        _select_rows(out.past_key_values, index, room)
        out.logits = out.logits[index]
        if getattr(out, "rope_deltas", None) is not None and deltas is not None:
            out.rope_deltas = deltas
        self.guard.shared_calls += 1
        self.guard.rows += len(input_ids)
        self.guard.prefilled += len(groups)
        return out


def _new_tokens(generation_config, input_ids) -> int | None:
    """The most tokens this ``generate`` call decodes (None: not known, so no room is made for them)."""
    if generation_config.max_new_tokens is not None:
        return int(generation_config.max_new_tokens)
    if generation_config.max_length is not None:
        return max(0, int(generation_config.max_length) - input_ids.shape[1])
    return None


class _InPlaceLayer(DynamicLayer):
    """``DynamicLayer`` whose update writes into room made beforehand (``_olmocr_rl_room``: keys' and values'
    buffers, positions on dim -2) instead of concatenating."""

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = self._olmocr_rl_room
        length, new = self.keys.shape[-2], key_states.shape[-2]
        if (self.keys.data_ptr() != keys.data_ptr() or self.values.data_ptr() != values.data_ptr()
                or self.keys.stride() != keys.stride() or key_states.shape[:2] != keys.shape[:2]
                or length + new > keys.shape[-2]):  # rows re-selected, moved or reordered; or no room left
            self.__class__ = DynamicLayer
            del self._olmocr_rl_room
            return DynamicLayer.update(self, key_states, value_states, *args, **kwargs)
        keys[:, :, length:length + new] = key_states
        values[:, :, length:length + new] = value_states
        self.keys, self.values = keys[:, :, :length + new], values[:, :, :length + new]
        return self.keys, self.values


def _select_rows(cache, index: torch.Tensor, new_tokens: int | None) -> None:
    """``cache.batch_select_indices(index)``, each plain ``DynamicLayer``'s rows gathered into room for
    ``new_tokens`` more positions (decoding then writes in place); other layers as ``DynamicCache`` does it."""
    for layer in cache.layers:
        if new_tokens is None or type(layer) is not DynamicLayer or layer.get_seq_length() == 0 or \
                layer.keys.dim() != 4:
            layer.batch_select_indices(index)
            continue
        length = layer.keys.shape[-2]
        room = []
        for held in (layer.keys, layer.values):
            buffer = held.new_empty(len(index), held.shape[1], length + new_tokens, held.shape[-1])
            buffer[:, :, :length] = held.index_select(0, index.to(held.device))
            room.append(buffer)
        layer.__class__ = _InPlaceLayer
        layer._olmocr_rl_room = tuple(room)
        layer.keys, layer.values = room[0][:, :, :length], room[1][:, :, :length]


def _generation_model(model):
    """The module whose ``generate`` does the work: under a PEFT wrapper its base model, else ``model``."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    return base if hasattr(base, "_prefill") else None


@contextlib.contextmanager
def shared_prefill(model, guard: PrefillGuard):
    """Within the block, ``model``'s generation prefills each shared prompt once (see the module's docstring)."""
    target = _generation_model(model)
    if target is None or guard.off:
        yield
        return
    target._prefill = _SharedPrefill(target, target._prefill, guard)
    try:
        yield
    finally:
        del target._prefill  # the class's method again
