"""The frozen vision tower's feature cache in a training run: installed on the trainer's model, emptied at
every optimizer step (olmocr_rl.model.frozen_vision has the cache and why it is exact)."""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from olmocr_rl.model.frozen_vision import FeatureCache, install_feature_cache, vision_trainability

__all__ = ["FeatureCacheCallback", "attach_feature_cache"]

logger = logging.getLogger(__name__)


class FeatureCacheCallback(TrainerCallback):
    """Empties the cache when an optimizer step begins, so it holds one step's pages at most."""

    def __init__(self, cache: FeatureCache):
        self.cache = cache

    def on_step_begin(self, args, state, control, **kwargs):
        self.cache.clear()


def attach_feature_cache(trainer) -> FeatureCache | None:
    """Install the cache on ``trainer.model`` (after PEFT wrapping) when its vision tower is frozen; logged."""
    parts = vision_trainability(trainer.model)
    if parts is None or not parts.tower_frozen:
        return None
    cache, what = install_feature_cache(trainer.model)
    logger.info("vision tower: %s", what)
    if cache is not None:
        trainer.add_callback(FeatureCacheCallback(cache))
    return cache
