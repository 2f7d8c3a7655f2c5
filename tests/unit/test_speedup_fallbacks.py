"""The GPU-only defaults check themselves on first use and fall back to the stock path with one warning line
(olmocr_rl.model.fallback): each failure is forced here on CPU, and the result is the stock path's exactly."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from olmocr_rl.model import fallback, vision_speedups
from olmocr_rl.model.fallback import relative_difference, tolerance

FALLBACK_LOGGER = "olmocr_rl.model.fallback"


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == FALLBACK_LOGGER and r.levelno == logging.WARNING]


def test_relative_difference_and_the_tolerances():
    stock = torch.tensor([3.0, 4.0])
    assert relative_difference(stock.clone(), stock) == 0.0
    assert relative_difference(torch.tensor([3.0, 4.5]), stock) == pytest.approx(0.1)
    assert relative_difference(torch.tensor([3.0, float("nan")]), stock) == float("inf")
    assert relative_difference(torch.zeros(3), stock) == float("inf")  # another shape
    assert tolerance(torch.float32) == 1e-4 and tolerance(torch.bfloat16) == tolerance(torch.float16) == 2e-2


# ------------------------------------------------------------------------------------ --batched_vision_attention

@pytest.fixture(scope="module")
def vision_model(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    return load_model_and_processor(str(tiny_model_dir))[0]


def _pages():
    """Two pages whose 8 x 8-patch windows include cut edge windows (several window lengths)."""
    generator = torch.Generator().manual_seed(0)
    grid = torch.tensor([[1, 24, 36], [1, 20, 28]])
    return torch.randn(24 * 36 + 20 * 28, 3 * 2 * 14 * 14, generator=generator), grid


def _features(model, pixels, grid):
    return torch.cat(model.model.get_image_features(pixels, grid).pooler_output)


def _batched(stock_model):
    model = copy.deepcopy(stock_model)
    assert vision_speedups.batch_window_attention(model) == 2
    return model


def _calls(monkeypatch, name, change=None):
    """Count the calls of ``vision_speedups.<name>``; ``change(result)`` replaces its result (a forced failure)."""
    calls = []
    original = getattr(vision_speedups, name)

    def counted(*args, **kwargs):
        calls.append(1)
        result = original(*args, **kwargs)
        return change(result) if change else result

    monkeypatch.setattr(vision_speedups, name, counted)
    return calls


def _patched_layers(model) -> int:
    return sum("forward" in block.attn.__dict__ for block in model.model.visual.blocks)


def test_batched_attention_that_raises_falls_back_to_the_loop(vision_model, monkeypatch, caplog):
    model, (pixels, grid) = _batched(vision_model), _pages()

    def unsupported(*args, **kwargs):
        raise RuntimeError("no kernel for this shape\nsecond line")

    monkeypatch.setattr(vision_speedups, "_batched_windows", unsupported)
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        features = _features(model, pixels, grid)
        again = _features(model, pixels, grid)
    assert torch.equal(features, _features(vision_model, pixels, grid))  # the stock loop's result, exactly
    assert torch.equal(again, features) and _patched_layers(model) == 0  # every layer has the loop back
    assert _warnings(caplog) == ["WARNING: --batched_vision_attention is off for the rest of this run (the batched "
                                 "call failed: RuntimeError: no kernel for this shape); the per-window attention "
                                 "loop runs instead"]
    assert fallback.fallbacks()[-1][0] == "--batched_vision_attention"


def test_batched_attention_unlike_the_loop_on_first_use_falls_back(vision_model, monkeypatch, caplog):
    model, (pixels, grid) = _batched(vision_model), _pages()
    calls = _calls(monkeypatch, "_batched_windows", change=lambda out: out * 1.01)  # 1 % off: beyond 1e-4
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        features = _features(model, pixels, grid)
    stock = _features(vision_model, pixels, grid)
    assert torch.equal(features, stock) and len(calls) == 1 and _patched_layers(model) == 0
    (line,) = _warnings(caplog)
    assert line.startswith("WARNING: --batched_vision_attention is off for the rest of this run (its first result "
                           "differs from the per-window loop's by 0.01 (relative), more than the 1e-04 allowed in "
                           "torch.float32)")
    features.sum().backward()  # the loop's result carries the gradients
    assert all(p.grad is not None for p in model.model.visual.blocks[0].attn.parameters())


def test_batched_attention_that_agrees_is_checked_once_and_stays(vision_model, monkeypatch, caplog):
    model, (pixels, grid) = _batched(vision_model), _pages()
    batched = _calls(monkeypatch, "_batched_windows")
    sdpa = []
    original = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: sdpa.append(1) or original(*a, **k))
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        first = _features(model, pixels, grid)
        first_calls, sdpa[:] = len(sdpa), []
        second = _features(model, pixels, grid)
    assert not _warnings(caplog) and _patched_layers(model) == 2 and len(batched) == 4
    # batched: one call per window length in the windowed layer (64, 32, 16 patches) and per image in the full one;
    # the first use adds the stock loop of the first (windowed) layer once: 15 + 12 windows
    assert (first_calls, len(sdpa)) == (5 + 27, 5)
    torch.testing.assert_close(first, _features(vision_model, pixels, grid), rtol=1e-5, atol=1e-6)
    assert torch.equal(first, second)
    assert all(block.attn._olmocr_rl_window_guard.checked for block in model.model.visual.blocks)
