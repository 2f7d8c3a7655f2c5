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
