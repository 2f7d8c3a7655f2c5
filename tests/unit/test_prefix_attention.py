"""The GPU's shared-prefix attention (trainer/prefix_attention.py, ``_segments_flex``): a group's segments in one
FlexAttention call per layer. FlexAttention runs forward on CPU in torch 2.13 (eagerly; it has no CPU backward), so
its forward is checked here against the other ways, alone and in the model's forward; its first-use check (outputs
and gradients against SDPA with the dense mask) with a kernel that has a backward on CPU, and its fallback."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from test_padding_free import _page, models  # noqa: F401  (pytest fixture)
from test_padding_free import _trl_batch as trl_batch

from olmocr_rl.model import fallback
from olmocr_rl.trainer import prefix_attention
from olmocr_rl.trainer.prefix_attention import FlexGuard, shared_prefix_attention
from olmocr_rl.trainer.shared_prefix import SharedPrefixForward, SharedPrefixGuard

LAYOUT = ((5, (3, 4, 3)), (4, (2, 6)), (6, (1,)))
EAGER = prefix_attention._flex_functions(False)  # (flex_attention, create_block_mask), not compiled  # three groups: 3 segments, 2, and one alone (a micro-batch of 1)


def _inputs(dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    total = sum(prefix + sum(segments) for prefix, segments in LAYOUT)
    query = torch.randn(1, 4, total, 8, generator=generator, dtype=dtype)
    key, value = (torch.randn(1, 2, total, 8, generator=generator, dtype=dtype) for _ in range(2))  # grouped heads
    return SimpleNamespace(is_causal=True, num_key_value_groups=2, training=False), query, key, value


@pytest.fixture
def flex(monkeypatch):
    """The FlexAttention path forced on this CPU, eager (compiling takes ~20 s), with a fresh guard."""
    guard = FlexGuard()
    monkeypatch.setattr(prefix_attention, "FLEX", guard)
    monkeypatch.setattr(prefix_attention, "_flexes", lambda query, kwargs: not guard.off)  # as on a GPU
    monkeypatch.setattr(prefix_attention, "_flex_functions", lambda compiled: EAGER)
    return guard


def test_flex_attention_forward_equals_the_other_ways_on_cpu(flex, monkeypatch):
    module, query, key, value = _inputs()
    flex.checked = True  # the forward alone (the check needs a backward, which FlexAttention lacks on CPU)
    calls = []
    original = prefix_attention._segments_flex
    monkeypatch.setattr(prefix_attention, "_segments_flex", lambda *a, **k: calls.append(1) or original(*a, **k))
    with torch.no_grad():
        mine, _ = shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)
        assert len(calls) == len(LAYOUT) and flex.calls == len(LAYOUT) and not flex.off  # one call a group
        monkeypatch.setattr(prefix_attention, "_flexes", lambda query, kwargs: False)
        split, _ = shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)  # the CPU's way
        monkeypatch.setattr(prefix_attention, "SPLIT_SEGMENT_ATTENTION", False)
        masked, _ = shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)
    torch.testing.assert_close(mine, split, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mine, masked, rtol=1e-5, atol=1e-6)


def test_the_model_forward_through_flex_attention_equals_the_stock_forward(models, flex):
    """A no-gradient shared forward (as TRL's old-policy log-probs) with every group through FlexAttention."""
    stock, shared, processor = models
    flex.checked = True
    inputs, completion_mask = trl_batch(processor, (5, 11, 2, 8, 1, 8), [_page(56, 56, 0)] * 3 + [_page(112, 84, 1)] * 3)
    width = completion_mask.shape[1]
    guard = SharedPrefixGuard()
    guard.checked = True
    with torch.no_grad():
        mine = SharedPrefixForward(shared, None, width, guard)(**inputs)
        theirs = stock(**inputs)
    layers = shared.config.get_text_config().num_hidden_layers
    assert flex.calls == 2 * layers and guard.shared_calls == 1  # both pages' groups, in every layer
    torch.testing.assert_close(mine.log_probs[:, -width:], theirs.log_probs[:, -width:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mine.entropy[:, -width:], theirs.entropy[:, -width:], rtol=1e-5, atol=1e-5)


def _dense_kernel(wrong: bool = False):
    """A stand-in for flex_attention with a backward on CPU: SDPA over the block mask's own mask_mod made dense
    (``wrong``: the segments' own tokens seen all at once, not causally)."""
    from transformers.integrations.sdpa_attention import repeat_kv

    def kernel(q, k, v, block_mask, scale, enable_gqa):
        rows, columns = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        visible = block_mask.mask_mod(None, None, rows, columns)
        visible = visible | (columns >= k.shape[2] - q.shape[2]) if wrong else visible
        repeats = q.shape[1] // k.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, repeats), repeat_kv(v, repeats),
                                                                attn_mask=visible, scale=scale)

    return kernel


def test_the_first_call_checks_outputs_and_gradients_and_passes_for_a_right_kernel(flex, monkeypatch):
    module, query, key, value = _inputs()
    monkeypatch.setattr(prefix_attention, "_flex_functions", lambda compiled: (_dense_kernel(), EAGER[1]))
    before = len(fallback.fallbacks())
    mine, _ = shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)
    assert flex.checked and not flex.off and flex.calls == len(LAYOUT) and len(fallback.fallbacks()) == before
    monkeypatch.setattr(prefix_attention, "_flexes", lambda query, kwargs: False)
    torch.testing.assert_close(mine, shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)[0],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", ["wrong", "no backward"])
def test_a_failed_first_check_falls_back_to_the_masked_calls_with_one_line(flex, monkeypatch, caplog, kernel):
    """A kernel whose result is wrong, or FlexAttention itself on CPU (no backward: the check cannot take its
    gradients): one warning line, this call's result and every later one from the masked calls."""
    module, query, key, value = _inputs()
    monkeypatch.setattr(prefix_attention, "SPLIT_SEGMENT_ATTENTION", False)  # as on a GPU: the masked calls
    if kernel == "wrong":
        monkeypatch.setattr(prefix_attention, "_flex_functions", lambda compiled: (_dense_kernel(wrong=True), EAGER[1]))
    caplog.set_level(logging.WARNING, logger="olmocr_rl.model.fallback")
    before = len(fallback.fallbacks())
    mine, _ = shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)
    again, _ = shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)
    assert flex.off and flex.calls == 0 and len(fallback.fallbacks()) == before + 1
    flag, reason = fallback.fallbacks()[-1]
    assert flag == "--shared_prefix's FlexAttention path"
    assert ("output differs from the masked attention's" in reason) if kernel == "wrong" else (
        "backward" in reason and reason.startswith("its first call failed"))
    monkeypatch.setattr(prefix_attention, "_flexes", lambda query, kwargs: False)
    masked, _ = shared_prefix_attention(module, query, key, value, LAYOUT, scaling=0.35)
    assert torch.equal(mine, masked) and torch.equal(again, masked)
