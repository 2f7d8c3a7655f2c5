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
    # --share_page_encoding with the 8 copies in one micro-batch: the page's vision work once, not 8 times
    one = [(1817, 1656, 256)]
    shared = training_flops(arch, one * 8, vision=False) + training_flops(arch, one) - training_flops(arch, one,
                                                                                                      vision=False)
    assert total / 1e12 == pytest.approx(522.0, abs=0.1) and shared / 1e12 == pytest.approx(323.5, abs=0.1)


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




def test_moe_counts_the_experts_a_token_is_routed_to():
    """Qwen3-VL-30B-A3B: 48 layers, 8 of 128 experts per token; worked out from the architecture by hand."""
    from olmocr_rl.model.families import preset_config

    arch = ArchFlops.from_config(preset_config("qwen3_vl_moe", "30b-a3b"))
    attention = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128  # q, k, v, o (no bias), q/k norms
    norms, router = 2 * 2048, 128 * 2048
    expert = 3 * 2048 * 768  # gate, up, down
    assert arch.lm_body_params == 48 * (attention + norms + router + 8 * expert) + 2048 == 2_730_702_848
    # all 128 experts would be 11x as many body parameters: counting them all would overstate MFU that much
    assert 48 * (attention + norms + router + 128 * expert) + 2048 == pytest.approx(10.95 * arch.lm_body_params, rel=0.001)
    assert (arch.lm_layers, arch.lm_attention_width, arch.lm_head_params) == (48, 32 * 128, 151936 * 2048)


def test_qwen3_vl_tower_has_no_windows_and_deepstack_mergers_count_per_image_token():
    from olmocr_rl.model.families import preset_config

    arch = ArchFlops.from_config(preset_config("qwen3_vl", "8b"))
    assert (arch.vision_full_layers, arch.vision_windowed_layers, arch.window_patches) == (27, 0, 0)
    assert (arch.vision_attention_width, arch.spatial_merge) == (1152, 2)
    merger = 4 * 1152 * (4 * 1152) + 4 * 1152 + 4 * 1152 * 4096 + 4096  # two linears over the merged 2 x 2 block
    assert arch.merger_params == 1152 * 2 + merger + 3 * (4 * 1152 * 2 + merger)  # + 3 deepstack mergers (post-norm)
    # one 1288 x 1000 px page: 80 x 62 patches of 16 px, 1,240 tokens; every layer attends over all 4,960 patches
    parts = forward_flops(arch, prompt_tokens=1300, image_tokens=1240, completion_tokens=0)
    lm_attention = 36 * 4 * 4096 * 1300 * 1301 / 2
    assert parts["attention"] == lm_attention + 27 * 4 * 1152 * 4960**2
    # Qwen2-VL's tower width is its embed_dim (1280), not the language model's hidden size
    assert ArchFlops.from_config(preset_config("qwen2_vl", "7b")).vision_attention_width == 1280


def test_what_does_not_train_is_not_counted_as_if_it_did():
    """Backward = input gradient (when anything before the part trains) + weight gradient (when its weights
    train), each one forward's worth: worked by hand on the toy sequence of test_hand_worked_sequence."""
    from olmocr_rl.model.flops import Trained, forward_parts

    p = forward_parts(TOY, 6, 2, 2)
    assert p == {"lm_body": 160, "lm_head": 12, "lm_attention": 1152, "vision_tower": 80, "vision_merger": 4,
                 "vision_attention": 768}
    seq = [(6, 2, 2)]
    assert training_flops(TOY, seq) == training_flops(TOY, seq, Trained()) == 3 * (172 + 84 + 1920)
    # --freeze_vision_tower: the tower and its attention forward only, the merger forward + its weight gradient
    frozen_tower = Trained(vision_tower=False)
    assert training_flops(TOY, seq, frozen_tower) == 3 * (160 + 12 + 1152) + (80 + 768) + 2 * 4
    # --freeze_vision_tower --freeze_vision_merger: the whole vision side is a forward
    assert training_flops(TOY, seq, Trained(vision_tower=False, vision_merger=False)) == \
        3 * (160 + 12 + 1152) + (80 + 768 + 4)
    # LoRA: base weights frozen everywhere; the gradient still flows through the language model to the adapters
    lora = Trained(vision_tower=False, vision_merger=False, language_model=False, lm_head=False)
    assert training_flops(TOY, seq, lora) == 2 * (160 + 12) + 3 * 1152 + (80 + 768 + 4)


def test_what_trains_is_read_from_the_model(tiny_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model

    from olmocr_rl.model.flops import Trained, trained_parts
    from olmocr_rl.model.frozen_vision import freeze_vision
    from olmocr_rl.model.loading import load_model_and_processor

    def load():
        return load_model_and_processor(str(tiny_model_dir), dtype=torch.float32)[0]

    assert trained_parts(load()) == Trained()
    model = load()
    freeze_vision(model, tower=True, merger=False)
    assert trained_parts(model) == Trained(vision_tower=False)
    model = load()
    freeze_vision(model, tower=True, merger=True)
    assert trained_parts(model) == Trained(vision_tower=False, vision_merger=False)
    lora = get_peft_model(load(), LoraConfig(r=4, target_modules=r".*language_model.*\.(q_proj|v_proj)"))
    assert trained_parts(lora) == Trained(vision_tower=False, vision_merger=False, language_model=False, lm_head=False)
    assert trained_parts(SimpleNamespace(config=None)) == Trained()  # parts not found: counted as trained in full


def test_timing_counts_a_lora_run_with_its_frozen_weights(tiny_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model

    from olmocr_rl.model.flops import trained_parts
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.telemetry.timing import _flops_counter

    model = get_peft_model(load_model_and_processor(str(tiny_model_dir), dtype=torch.float32)[0],
                           LoraConfig(r=4, target_modules=r".*language_model.*\.(q_proj|v_proj)"))
    count = _flops_counter(SimpleNamespace(model=model, args=SimpleNamespace(num_iterations=1)))
    image = model.config.image_token_id
    arch = ArchFlops.from_config(model.config)
    counted = count([[1, image, image, 2]], [[5, 6, 7]])
    assert counted == training_flops(arch, [(4, 2, 3)], trained_parts(model)) < training_flops(arch, [(4, 2, 3)])


def _two_copies_and_another_page():
    import torch

    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(8 * 12, 3 * 2 * 14 * 14, generator=generator), torch.randn(8 * 8, 3 * 2 * 14 * 14,
                                                                               generator=generator)
    return torch.cat([a, a, b]), torch.tensor([[1, 8, 12], [1, 8, 12], [1, 8, 8]])


def _vision(arch, grid, weights) -> float:
    from olmocr_rl.telemetry.vision_flops import _image_parts

    return sum(weights[k] * v for k, v in _image_parts(arch, grid).items() if k.startswith("vision_"))


def test_the_vision_tower_is_counted_where_it_runs(tiny_model_dir):
    """Stock: every copy; --share_page_encoding: each distinct page once; no gradients (old log-probs,
    generation): nothing; a frozen cached tower: its blocks once per page, the training merger per forward."""
    import copy

    import torch

    from olmocr_rl.model.flops import Trained
    from olmocr_rl.model.frozen_vision import freeze_vision, install_feature_cache
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.model.vision_speedups import share_page_encoding
    from olmocr_rl.telemetry.vision_flops import _image_parts, install_vision_flops

    stock = load_model_and_processor(str(tiny_model_dir), dtype=torch.float32)[0]
    arch = ArchFlops.from_config(stock.config)
    full = Trained().multipliers()
    pixels, grid = _two_copies_and_another_page()
    copies, other = _vision(arch, [1, 8, 12], full), _vision(arch, [1, 8, 8], full)

    def counted(model, trained, *calls) -> list[float]:
        seen: list[float] = []
        assert install_vision_flops(model, arch, trained, seen.append)
        for grad in calls:
            with torch.set_grad_enabled(grad):
                model.model.get_image_features(pixels, grid)
        return seen

    assert counted(copy.deepcopy(stock), Trained(), True) == [pytest.approx(2 * copies + other)]
    shared = copy.deepcopy(stock)
    assert share_page_encoding(shared)
    assert counted(shared, Trained(), True, False) == [pytest.approx(copies + other)]  # the no-grad call: nothing

    frozen = copy.deepcopy(stock)
    freeze_vision(frozen, tower=True, merger=False)
    cache, _ = install_feature_cache(frozen)
    assert cache is not None
    trained = Trained(vision_tower=False)
    parts = [_image_parts(arch, [1, 8, 12]), _image_parts(arch, [1, 8, 8])]
    blocks = sum(p["vision_tower"] + p["vision_attention"] for p in parts)  # two distinct pages, forward only
    merger = 2 * (2 * parts[0]["vision_merger"] + parts[1]["vision_merger"])  # 3 images, forward + weight grads
    # generation (no grad) encodes the pages; the training forward after it runs only the merger
    assert counted(frozen, trained, False, True) == [pytest.approx(blocks), pytest.approx(merger)]
