"""The vision-tower speed-ups are exact: features, logits and gradients equal the stock model's (CPU, fp32)."""

from __future__ import annotations

import copy

import pytest
import torch

from olmocr_rl.model.vision_speedups import apply_vision_speedups, batch_window_attention, share_page_encoding

PATCH = 3 * 2 * 14 * 14  # channels x temporal patch x patch x patch


@pytest.fixture(scope="module")
def models(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    stock, processor = load_model_and_processor(str(tiny_model_dir))
    fast = copy.deepcopy(stock)
    return stock, fast, processor


def _pages(seed=0):
    """Two copies of one page (24 x 36 patches: several 8 x 8-patch windows and cut edge windows) and another page."""
    generator = torch.Generator().manual_seed(seed)
    grid = torch.tensor([[1, 24, 36], [1, 24, 36], [1, 20, 28]])
    a = torch.randn(24 * 36, PATCH, generator=generator)
    b = torch.randn(20 * 28, PATCH, generator=generator)
    return torch.cat([a, a, b]), grid


def _count_calls(monkeypatch, target, name):
    calls = []
    original = getattr(target, name)

    def counted(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, counted)
    return calls


def test_features_and_gradients_equal_the_stock_tower(models, monkeypatch):
    stock, fast, _ = models
    fast = copy.deepcopy(fast)
    assert share_page_encoding(fast) and batch_window_attention(fast) == 2
    pixels, grid = _pages()
    with torch.no_grad():  # the first call also runs the stock loop once, to check the batched one (fallback.py)
        fast.model.get_image_features(pixels, grid)
    encoded = _count_calls(monkeypatch, type(fast.model.visual), "forward")
    attention = _count_calls(monkeypatch, torch.nn.functional, "scaled_dot_product_attention")
    ours = fast.model.get_image_features(pixels, grid).pooler_output
    assert len(encoded) == 1  # the repeated page encoded once:
    assert encoded[0][1]["grid_thw"].tolist() == [[1, 24, 36], [1, 20, 28]]
    fast_calls = len(attention)
    attention.clear()
    theirs = stock.model.get_image_features(pixels, grid).pooler_output
    # stock: 42 windows (15 + 15 + 12) in the windowed layer + 3 images in the full layer; ours: one call per
    # window size (64, 32 and 16 patches) and per distinct image size in the full layer (2)
    assert len(attention) == 45 and fast_calls == 5
    assert [t.shape for t in ours] == [t.shape for t in theirs]
    for mine, reference in zip(ours, theirs):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)
    (sum((t * t).sum() for t in ours)).backward()
    (sum((t * t).sum() for t in theirs)).backward()
    for (name, p_fast), p_stock in zip(fast.model.visual.named_parameters(), stock.model.visual.parameters()):
        torch.testing.assert_close(p_fast.grad, p_stock.grad, rtol=1e-4, atol=1e-5, msg=name)
    stock.zero_grad()


def test_page_prompts_give_the_stock_logits_and_loss_gradient(models, tiny_model_dir):
    """A GRPO-like batch: G = 2 copies of one page and one other page, through the whole model."""
    from PIL import Image

    stock, fast, processor = models
    fast = copy.deepcopy(fast)
    assert apply_vision_speedups(fast) == ["each distinct page encoded once per forward",
                                           "window attention batched in 2 vision layers"]
    generator = torch.Generator().manual_seed(1)
    page = Image.fromarray((torch.rand(160, 120, 3, generator=generator) * 255).byte().numpy())
    other = Image.fromarray((torch.rand(120, 150, 3, generator=generator) * 255).byte().numpy())
    messages = [[{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image", "image": im}]}]
                for im in (page, page, other)]
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt", padding=True)
    results = []
    for model in (stock, fast):
        model.zero_grad()
        logits = model(**inputs).logits
        logits.float().logsumexp(-1).mean().backward()
        results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (stock_logits, stock_grads), (fast_logits, fast_grads) = results
    torch.testing.assert_close(fast_logits, stock_logits, rtol=1e-5, atol=1e-5)
    assert stock_grads.keys() == fast_grads.keys() and any("visual" in n for n in stock_grads)
    for name in stock_grads:
        torch.testing.assert_close(fast_grads[name], stock_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def test_flags_turn_them_off(models):
    _, fast, _ = models
    assert apply_vision_speedups(copy.deepcopy(fast), share_pages=False, batched_attention=False) == []
    from olmocr_rl.config import build_parser

    parser = build_parser()
    assert parser.get_default("share_page_encoding") is True
    assert parser.get_default("batched_vision_attention") is None  # auto: on with CUDA, off on CPU


# --------------------------------------------------------------------------------------------- other families
# Qwen3-VL (dense and MoE) adds deepstack features (outputs of some vision layers) to the first language-model
# layers; Qwen2-VL and Qwen3-VL attend over whole images (no windows). 16 px patches for Qwen3-VL, 14 for Qwen2-VL.

OTHER_FAMILIES = ["qwen3_vl", "qwen3_vl_moe", "qwen2_vl"]


@pytest.fixture(scope="module")
def family_models(tiny_family_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    built = {}
    for model_type in OTHER_FAMILIES:
        stock, processor = load_model_and_processor(str(tiny_family_dir(model_type)))
        built[model_type] = (stock, processor)
    return built


def _family_pages(model, seed=0):
    """Two copies of one image and another one, as patches of the model's own size."""
    vision = model.config.vision_config
    patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(12 * 16, patch, generator=generator)
    b = torch.randn(8 * 10, patch, generator=generator)
    return torch.cat([a, a, b]), torch.tensor([[1, 12, 16], [1, 12, 16], [1, 8, 10]])


@pytest.mark.parametrize("model_type", OTHER_FAMILIES)
def test_shared_encoding_gives_the_stock_features_and_gradients(family_models, model_type, monkeypatch):
    stock, _ = family_models[model_type]
    fast = copy.deepcopy(stock)
    assert share_page_encoding(fast) and batch_window_attention(fast) == 0  # no windows: nothing to batch
    pixels, grid = _family_pages(fast)
    encoded = _count_calls(monkeypatch, type(fast.model.visual), "forward")
    ours = fast.model.get_image_features(pixels, grid)
    assert len(encoded) == 1 and encoded[0][1]["grid_thw"].tolist() == [[1, 12, 16], [1, 8, 10]]
    theirs = stock.model.get_image_features(pixels, grid)
    assert [t.shape for t in ours.pooler_output] == [t.shape for t in theirs.pooler_output] == [(48, 128), (48, 128), (20, 128)]
    for mine, reference in zip(ours.pooler_output, theirs.pooler_output):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)
    deepstack = getattr(theirs, "deepstack_features", None)
    assert (deepstack is not None) == model_type.startswith("qwen3")
    if deepstack is not None:  # one tensor per deepstack layer over all images' tokens, the copies included
        assert [t.shape for t in ours.deepstack_features] == [t.shape for t in deepstack] == [(116, 128)] * 2
        for mine, reference in zip(ours.deepstack_features, deepstack):
            torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)

    def loss(out):
        total = sum((t * t).sum() for t in out.pooler_output)
        return total + sum((t * t * 0.5).sum() for t in (getattr(out, "deepstack_features", None) or []))

    loss(ours).backward()
    loss(theirs).backward()
    for (name, p_fast), p_stock in zip(fast.model.visual.named_parameters(), stock.model.visual.parameters()):
        torch.testing.assert_close(p_fast.grad, p_stock.grad, rtol=1e-4, atol=1e-5, msg=name)
    stock.zero_grad()


@pytest.mark.parametrize("model_type", OTHER_FAMILIES)
def test_shared_encoding_gives_the_stock_logits_and_every_gradient(family_models, model_type):
    """A GRPO-like batch (G = 2 copies of one page and another page) through the whole model."""
    from PIL import Image

    stock, processor = family_models[model_type]
    fast = copy.deepcopy(stock)
    done = apply_vision_speedups(fast)
    deepstack = " (deepstack features included)" if model_type.startswith("qwen3") else ""
    assert done[0] == f"each distinct page encoded once per forward{deepstack}"
    assert done[1].startswith("batched vision attention: nothing to batch") and "no attention windows" in done[1]
    inputs = _grpo_batch(processor, Image)
    results = []
    for model in (stock, fast):
        model.zero_grad()
        logits = model(**inputs).logits
        logits.float().logsumexp(-1).mean().backward()
        results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (stock_logits, stock_grads), (fast_logits, fast_grads) = results
    torch.testing.assert_close(fast_logits, stock_logits, rtol=1e-5, atol=1e-5)
    assert stock_grads.keys() == fast_grads.keys()
    assert any("deepstack_merger" in n for n in stock_grads) == model_type.startswith("qwen3")
    assert any("visual" in n for n in stock_grads)
    for name in stock_grads:
        torch.testing.assert_close(fast_grads[name], stock_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def _grpo_batch(processor, Image):
    generator = torch.Generator().manual_seed(1)
    page = Image.fromarray((torch.rand(160, 120, 3, generator=generator) * 255).byte().numpy())
    other = Image.fromarray((torch.rand(120, 150, 3, generator=generator) * 255).byte().numpy())
    messages = [[{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image", "image": im}]}]
                for im in (page, page, other)]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                         return_tensors="pt", padding=True)


def test_qwen3_vl_deepstack_not_shared_is_the_crash_the_sharing_fixes(family_models, monkeypatch):
    """Without the deepstack expansion, the shared encoding hands Qwen3-VL features for the distinct pages only."""
    from PIL import Image

    from olmocr_rl.model import vision_speedups

    stock, processor = family_models["qwen3_vl"]
    fast = copy.deepcopy(stock)
    monkeypatch.setattr(vision_speedups, "_expand_deepstack", lambda out, tokens, use: None)
    share_page_encoding(fast)
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        fast(**_grpo_batch(processor, Image))
