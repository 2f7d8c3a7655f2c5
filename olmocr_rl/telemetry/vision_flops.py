"""The vision side of ``timing/model_flops``, counted where the vision tower runs.

The language model's FLOPs follow from the sampled token counts (``olmocr_rl.telemetry.timing``), but what the
vision tower computes depends on the speed-ups: with ``--share_page_encoding`` each training forward encodes
each distinct page once, not once per copy (a G-copies group costs 1/G of the stock tower), and with
``--cache_vision_features`` a frozen tower encodes each page once per optimizer step. Counting the tower per
sampled sequence would credit a step with work it skipped (docs/gpu_check.md, "The MFU columns", gives the 3B figures).
So hooks on the tower count what it is given:

- a training forward (gradients on; the old log-probs and generation run without) counts, for each image
  the tower receives, its blocks and attention at the tower's multiplier and the merger at the merger's
  (:class:`olmocr_rl.model.flops.Trained`: forward + the backward that is needed);
- with the feature cache, the blocks of a page count once, when the cache encodes it (forward only: the tower
  is frozen), whatever forward that happens in; the merger counts per training forward when it trains, once
  at the encode when it is frozen too.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["install_vision_flops"]


def _image_parts(arch, grid) -> dict[str, float]:
    from olmocr_rl.model.flops import forward_parts

    t, h, w = (int(v) for v in grid)
    return forward_parts(arch, 0, t * h * w // arch.spatial_merge**2, 0)


def install_vision_flops(model, arch, trained, add: Callable[[float], None]) -> bool:
    """Hook ``model``'s vision tower so that its FLOPs go to ``add``; False (nothing installed) without a tower."""
    import torch

    from olmocr_rl.model.frozen_vision import vision_tower

    visual = vision_tower(model)
    if visual is None:
        return False
    weights = trained.multipliers()
    before: list[int] = []

    def grids_of(args, kwargs):
        grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
        return [] if grid is None else grid.tolist()

    def pre(module, args, kwargs):
        cache = getattr(module, "_olmocr_rl_feature_cache", None)
        before.append(len(cache.entries) if cache is not None else -1)

    def post(module, args, kwargs, output):
        cached = before.pop() if before else -1
        training = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        cache = getattr(module, "_olmocr_rl_feature_cache", None)
        total = 0.0
        if cache is not None and cached >= 0:
            for entry in cache.entries[cached:]:  # encoded in this call: the frozen blocks' forward
                parts = _image_parts(arch, entry.grid)
                total += parts["vision_tower"] + parts["vision_attention"]
                total += parts["vision_merger"] if cache.merger_frozen else 0.0
            if training and not cache.merger_frozen:
                total += sum(weights["vision_merger"] * _image_parts(arch, g)["vision_merger"]
                             for g in grids_of(args, kwargs))
        elif training:
            for grid in grids_of(args, kwargs):
                total += sum(weights[part] * flops for part, flops in _image_parts(arch, grid).items()
                             if part.startswith("vision_"))
        if total:
            add(total)

    visual.register_forward_pre_hook(pre, with_kwargs=True)
    visual.register_forward_hook(post, with_kwargs=True)
    return True
