"""Training FLOPs from token, image-token and patch counts (olmocr_rl.model.flops), their per-step timing key,
and gpu_check's MFU columns on CPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from olmocr_rl.model.flops import ArchFlops, forward_flops, training_flops

REPO = Path(__file__).resolve().parents[2]

TOY = ArchFlops(lm_body_params=10, lm_head_params=3, lm_layers=2, lm_attention_width=4, vision_params=5,
                merger_params=1, vision_full_layers=1, vision_windowed_layers=1, vision_attention_width=2,
                window_patches=4, spatial_merge=2)


def test_hand_worked_sequence():
    # prompt 6 tokens (2 of them image tokens -> 8 patches), completion 2: length 8
    parts = forward_flops(TOY, prompt_tokens=6, image_tokens=2, completion_tokens=2)
    assert parts["language_model"] == 2 * 10 * 8 + 2 * 3 * 2 == 172
    assert parts["vision"] == 2 * 5 * 8 + 2 * 1 * 2 == 84
    # LM: 2 layers x 4 x width 4 x 8·9/2 pairs; vision: 4 x width 2 x (full 8² + windowed 8 x 4)
    assert parts["attention"] == 2 * 4 * 4 * 36 + 4 * 2 * (64 + 32) == 1920
    assert training_flops(TOY, [(6, 2, 2), (6, 2, 2)]) == 2 * 3 * (172 + 84 + 1920)


def test_released_3b_shape_counts_what_6n_misses():
    """Qwen2.5-VL-3B, one 1288 px page (1,817 prompt tokens, 1,656 image tokens, 6,624 patches) x 8 x 256."""
    from conftest import released_qwen25_vl_config

    config = released_qwen25_vl_config("3b")
    arch = ArchFlops.from_config(config)
    assert (arch.vision_full_layers, arch.vision_windowed_layers, arch.window_patches) == (4, 28, 64)
    parts = {k: 3 * 8 * v / 1e12 for k, v in forward_flops(arch, 1817, 1656, 256).items()}
    assert parts["language_model"] == pytest.approx(279.9, abs=0.1)
    assert parts["vision"] == pytest.approx(203.9, abs=0.1)
    assert parts["attention"] == pytest.approx(38.2, abs=0.1)
    total = training_flops(arch, [(1817, 1656, 256)] * 8)
    parameters = arch.lm_body_params + arch.vision_params + arch.merger_params + 151936 * 2048  # tied head
    assert total / (6 * parameters * 8 * 2073) == pytest.approx(1.40, abs=0.01)  # 6·N·tokens undercounts it by ~1.4x


def test_timing_counts_the_flops_of_what_was_generated(tiny_model_dir):
    from transformers import AutoConfig

    from olmocr_rl.telemetry.timing import _flops_counter

    config = AutoConfig.from_pretrained(tiny_model_dir)
    trainer = SimpleNamespace(model=SimpleNamespace(config=config), args=SimpleNamespace(num_iterations=2))
    count = _flops_counter(trainer)
    image = config.image_token_id
    prompts, completions = [[1, image, image, image, image, 2, 3], [1, image, 2]], [[5, 6], [7]]
    arch = ArchFlops.from_config(config)
    assert count(prompts, completions) == 2 * training_flops(arch, [(7, 4, 2), (3, 1, 1)])
    assert count(prompts, completions) > 0


