"""Frozen vision parts and the per-step feature cache: the cache gives exactly the stock features, logits and
gradients (CPU, fp32), encodes each page once, and is installed only where it is exact."""

from __future__ import annotations

import copy

import pytest
import torch

from olmocr_rl.model.frozen_vision import freeze_vision, install_feature_cache, vision_trainability
from olmocr_rl.model.vision_speedups import apply_vision_speedups

PATCH = 3 * 2 * 14 * 14


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    return load_model_and_processor(str(tiny_model_dir))


def _page_batch(processor, copies=2):
    """``copies`` copies of one page and one other page, as GRPO batches hold them."""
    from PIL import Image

    generator = torch.Generator().manual_seed(1)
    page = Image.fromarray((torch.rand(160, 120, 3, generator=generator) * 255).byte().numpy())
    other = Image.fromarray((torch.rand(120, 150, 3, generator=generator) * 255).byte().numpy())
    messages = [[{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image", "image": im}]}]
                for im in [page] * copies + [other]]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                         return_tensors="pt", padding=True)


def _logits_and_grads(model, inputs):
    model.zero_grad()
    logits = model(**inputs).logits
    logits.float().logsumexp(-1).mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _count_tower_runs(monkeypatch, model):
    runs = []
    cls = type(model.model.visual)
    stock = cls.forward

    def counted(self, hidden_states, grid_thw=None, **kwargs):
        runs.append(grid_thw.tolist())
        return stock(self, hidden_states, grid_thw=grid_thw, **kwargs)

    monkeypatch.setattr(cls, "forward", counted)
    return runs


@pytest.mark.parametrize("merger", [False, True], ids=["merger-trains", "merger-frozen"])
@pytest.mark.parametrize("share", [True, False], ids=["shared-pages", "every-copy"])
def test_cached_features_give_the_stock_logits_and_gradients_bit_for_bit(loaded, monkeypatch, merger, share):
    model, processor = loaded
    stock, cached = copy.deepcopy(model), copy.deepcopy(model)
    for m in (stock, cached):
        apply_vision_speedups(m, share_pages=share, batched_attention=False)
        frozen = freeze_vision(m, tower=True, merger=merger)
    visual = model.model.visual
    assert frozen == sum(p.numel() for n, p in visual.named_parameters() if merger or not n.startswith("merger."))
    cache, note = install_feature_cache(cached)
    assert cache is not None and cache.merger_frozen is merger, note
    inputs = _page_batch(processor)
    runs = _count_tower_runs(monkeypatch, cached)
    reference = _logits_and_grads(stock, inputs)
    for forward in range(3):  # generation prefill, old log-probs, a micro-batch: the same pages each time
        logits, grads = _logits_and_grads(cached, inputs)
        assert torch.equal(logits, reference[0]), forward
        assert grads.keys() == reference[1].keys()
        assert all(torch.equal(grads[name], reference[1][name]) for name in grads), forward
    assert any(name.startswith("model.visual.merger.") for name in grads) is not merger
    assert not any(name.startswith(("model.visual.blocks.", "model.visual.patch_embed.")) for name in grads)
    assert len(runs) == 2  # one tower run for the stock forward, one for the cached model's three
    # first forward: 2 pages encoded (and, without page sharing, the second copy reused); then 2 forwards reuse all
    assert cache.encoded == 2 and cache.reused == (0 + 2 * 2 if share else 1 + 2 * 3)
    cache.clear()
    _logits_and_grads(cached, inputs)
    assert cache.encoded == 4  # a new step encodes its pages again


def test_a_new_page_in_a_later_forward_is_encoded_and_the_rest_reused(loaded):
    model, processor = loaded
    cached = copy.deepcopy(model)
    freeze_vision(cached, tower=True, merger=False)
    cache, _ = install_feature_cache(cached)
    first, second = _page_batch(processor, copies=1), _page_batch(processor, copies=3)
    cached(**first)
    cached(**second)  # the same two pages, one of them three times
    assert (cache.encoded, cache.reused) == (2, 4)
    stock = copy.deepcopy(model)
    freeze_vision(stock, tower=True, merger=False)
    assert torch.equal(cached(**second).logits, stock(**second).logits)
    with torch.inference_mode():  # features made here could never feed a backward: not cached
        cache.clear()
        cached(**first)
    assert cache.entries == [] and cache.encoded == 2


def test_no_cache_where_the_tower_trains_or_for_another_tower(loaded):
    model, _ = loaded
    trains = copy.deepcopy(model)
    assert install_feature_cache(trains) == (None, "the vision tower trains: its features change with every update")
    assert vision_trainability(trains).tower_frozen is False
    merger_only = copy.deepcopy(model)
    freeze_vision(merger_only, tower=False, merger=True)
    parts = vision_trainability(merger_only)
    assert (parts.tower_frozen, parts.merger_frozen) == (False, True)
    assert install_feature_cache(merger_only)[0] is None
    with pytest.raises(ValueError, match="has no vision tower"):
        freeze_vision(torch.nn.Linear(2, 2), tower=True, merger=False)


def test_speedups_and_cache_find_the_tower_inside_a_peft_wrapper(loaded, monkeypatch):
    from peft import get_peft_model

    from olmocr_rl.config.flags import LORA_TARGET_MODULES
    from olmocr_rl.model.adapters import adapter_plan

    model, processor = loaded
    base = copy.deepcopy(model)
    plan = adapter_plan(base, r=4, alpha=8, dropout=0.0, target_modules=LORA_TARGET_MODULES)
    wrapped = get_peft_model(base, plan.lora_config)
    assert apply_vision_speedups(wrapped, batched_attention=True) == [
        "each distinct page encoded once per forward", "window attention batched in 2 vision layers"]
    parts = vision_trainability(wrapped)
    assert parts.tower_frozen and parts.merger_frozen  # LoRA: no adapter in the vision tower
    cache, _ = install_feature_cache(wrapped)
    runs = _count_tower_runs(monkeypatch, model)
    inputs = _page_batch(processor)
    logits = wrapped(**inputs).logits
    wrapped(**inputs)
    assert len(runs) == 1 and runs[0] == [[1, 8, 6], [1, 6, 8]] and cache.reused == 2
    torch.testing.assert_close(logits, model(**inputs).logits, rtol=0, atol=0)  # fresh adapters (B = 0): the base
