"""A frozen vision tower (``--freeze_vision_tower``, ``--freeze_vision_merger``) and its per-step feature cache.

The vision tower of the Qwen2-VL family is a ViT (patch embedding + blocks) followed by the *merger*, the
projector that turns each 2 x 2 group of patch features into one language-model token.
:func:`freeze_vision` turns gradients off for the tower (and the merger, if asked): the optimizer then
holds no state for them and they stay bit-identical. With LoRA (``--use_peft``) the whole vision side is
frozen anyway: it gets no adapters.

A frozen tower gives the same features for the same page every time it sees it, so a GRPO step needs them
once, not once per forward: HF generation's prefill, the old log-probs, the reference model's log-probs
(``--beta`` with LoRA: the same model with its adapters off) and each training micro-batch all encode the
same pages. :class:`FeatureCache` (installed by :func:`install_feature_cache`) keeps, for each distinct
page image (same grid, equal pixels), the tower's output before the merger; a later forward takes it from
there and runs only the merger, with gradients when the merger trains. The merger applies to each merged
token on its own, so running it on the cached features of several pages is what the stock forward does
after its blocks (Qwen2.5-VL's window order is undone the same way, with the batch's window index).
Exact: the cached features are the stock tower's output for those pixels. The trainer empties the cache
at every optimizer step (``olmocr_rl.trainer.vision_cache``), which bounds its memory to one step's pages.
"""

from __future__ import annotations

import logging
import types
from dataclasses import dataclass, field
from typing import Any

from olmocr_rl.model.adapters import unwrap

logger = logging.getLogger(__name__)

#: Vision towers whose forward the cache reproduces: Qwen2.5-VL (windowed ViT + merger).
CACHED_TOWERS = ("Qwen2_5_VisionTransformerPretrainedModel",)


def vision_tower(model):
    """The vision tower module (``model.visual``) of a model, inside a PEFT wrapper too; None without one."""
    inner = getattr(unwrap(model), "model", None)
    return getattr(inner, "visual", None) if inner is not None else None


def _merger_modules(model) -> tuple[str, ...]:
    """The family's merger modules under ``model.visual`` (model.families: Qwen3-VL's deepstack mergers too)."""
    from olmocr_rl.model.families import FAMILIES

    found = FAMILIES.get(getattr(getattr(unwrap(model), "config", None), "model_type", None))
    return found.merger_modules if found is not None else ("merger",)


def _is_merger(name: str, mergers: tuple[str, ...]) -> bool:
    return name.split(".", 1)[0] in mergers


def freeze_vision(model, *, tower: bool, merger: bool) -> int:
    """Turn gradients off for the vision tower's blocks and patch embedding, and/or its merger; returns the
    number of parameters frozen. ValueError for a model without a vision tower."""
    visual = vision_tower(model)
    if visual is None:
        raise ValueError(f"{type(model).__name__} has no vision tower (model.visual) to freeze")
    frozen, mergers = 0, _merger_modules(model)
    for name, param in visual.named_parameters():
        if (merger if _is_merger(name, mergers) else tower) and param.requires_grad:
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen


@dataclass(frozen=True)
class VisionTrainability:
    tower_frozen: bool  # no parameter of the blocks / patch embedding has requires_grad
    merger_frozen: bool


def vision_trainability(model) -> VisionTrainability | None:
    """Which vision parts get gradients (after PEFT wrapping too); None without a vision tower."""
    visual = vision_tower(model)
    if visual is None:
        return None
    mergers = _merger_modules(model)
    tower = [p.requires_grad for name, p in visual.named_parameters() if not _is_merger(name, mergers)]
    merger = [p.requires_grad for name, p in visual.named_parameters() if _is_merger(name, mergers)]
    return VisionTrainability(tower_frozen=not any(tower), merger_frozen=not any(merger))


@dataclass
class _Entry:
    grid: list[int]
    pixels: Any  # the page's pixel rows (the key, compared exactly)
    tower: Any  # the tower's output before the merger, in the tower's (window) order
    merged: Any = None  # the merger's output in page order, when the merger is frozen


@dataclass
class FeatureCache:
    """Tower features of the pages seen since the last :meth:`clear` (one optimizer step)."""

    merger_frozen: bool
    entries: list[_Entry] = field(default_factory=list)
    encoded: int = 0  # pages the tower actually ran on (misses), since the run began
    reused: int = 0  # pages taken from the cache (hits)

    def clear(self) -> None:
        self.entries.clear()

    def find(self, grid: list[int], pixels) -> _Entry | None:
        import torch

        for entry in self.entries:
            if entry.grid == grid and torch.equal(entry.pixels, pixels):
                return entry
        return None


def _window_reverse(visual, grid_thw):
    """The index that puts Qwen2.5-VL's merged tokens back into page order (the stock forward's last step)."""
    import torch
    from transformers.vision_utils import get_vision_window_index

    window_index, _ = get_vision_window_index(grid_thw, spatial_merge_size=visual.spatial_merge_size,
                                              window_size=visual.window_size, patch_size=visual.patch_size)
    return torch.argsort(window_index.to(grid_thw.device))


def _encode_missing(visual, cache: FeatureCache, pixels, grids, missing: list[int], per_image) -> None:
    """Run the stock tower (no gradients: it is frozen) on the pages not cached yet, and cache them."""
    import torch

    stock = type(visual).forward
    grid_thw = torch.tensor([grids[i] for i in missing], device=pixels.device, dtype=torch.long)
    with torch.no_grad():
        out = stock(visual, torch.cat([per_image[i] for i in missing]), grid_thw=grid_thw)
    sizes = [grids[i][0] * grids[i][1] * grids[i][2] for i in missing]
    unit = visual.spatial_merge_size ** 2
    merged = torch.split(out.pooler_output, [s // unit for s in sizes]) if cache.merger_frozen else [None] * len(sizes)
    for i, tower, page in zip(missing, torch.split(out.last_hidden_state, sizes), merged):
        cache.entries.append(_Entry(grids[i], per_image[i], tower.detach(), None if page is None else page.detach()))
    cache.encoded += len(missing)


def _cached_forward(self, hidden_states, grid_thw=None, **kwargs):
    """The vision tower's forward with the step's cache in front of its blocks (the module docstring)."""
    import torch
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    cache: FeatureCache = self._olmocr_rl_feature_cache
    if (grid_thw is None or kwargs.get("output_hidden_states") or kwargs.get("output_attentions")
            or torch.is_inference_mode_enabled()):  # inference tensors could not feed a later backward
        return type(self).forward(self, hidden_states, grid_thw=grid_thw, **kwargs)
    grids = grid_thw.tolist()
    per_image = torch.split(hidden_states, [t * h * w for t, h, w in grids])
    entries = [cache.find(grid, pixels) for grid, pixels in zip(grids, per_image)]
    missing: list[int] = []  # the first copy of each page not cached yet
    for i, entry in enumerate(entries):
        if entry is None and not any(grids[j] == grids[i] and torch.equal(per_image[j], per_image[i]) for j in missing):
            missing.append(i)
    cache.reused += len(grids) - len(missing)
    if missing:
        _encode_missing(self, cache, hidden_states, grids, missing, per_image)
        entries = [cache.find(grid, pixels) for grid, pixels in zip(grids, per_image)]
    tower = torch.cat([entry.tower for entry in entries])
    if cache.merger_frozen:
        merged = torch.cat([entry.merged for entry in entries])
    else:
        merged = self.merger(tower)[_window_reverse(self, grid_thw)]
    return BaseModelOutputWithPooling(last_hidden_state=tower, pooler_output=merged)


def install_feature_cache(model) -> tuple[FeatureCache | None, str]:
    """Put a :class:`FeatureCache` in front of a frozen vision tower; returns ``(cache or None, what happened)``."""
    import torch

    visual = vision_tower(model)
    parts = vision_trainability(model)
    if visual is None or parts is None:
        return None, "no vision tower"
    if not parts.tower_frozen:
        return None, "the vision tower trains: its features change with every update"
    if type(visual).__name__ not in CACHED_TOWERS:
        return None, f"{type(visual).__name__}: no feature cache for this tower (features recomputed per forward)"
    dropout = [m for m in visual.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    if dropout or getattr(visual.config, "attention_dropout", 0.0):
        return None, "the vision tower has dropout: its training-mode features are random"
    cache = FeatureCache(merger_frozen=parts.merger_frozen)
    visual._olmocr_rl_feature_cache = cache
    visual.forward = types.MethodType(_cached_forward, visual)
    return cache, ("each page's vision features computed once per step"
                   + (" (merger frozen too)" if parts.merger_frozen else ", merger run on them with gradients"))
