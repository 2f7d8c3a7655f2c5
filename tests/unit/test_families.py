"""The family table (olmocr_rl.model.families): released presets match the published checkpoints, every
model-specific fact is read from the config, unsupported types are one clear error, and the MoE facts."""

from __future__ import annotations

import json

import pytest

from olmocr_rl.model.families import (
    FAMILIES,
    UnsupportedModelError,
    experts,
    family,
    preset_config,
    vision_layout,
    vision_tokens,
)

# Parameter counts of the released checkpoints (their model cards / safetensors index), in billions.
PUBLISHED = {("qwen2_vl", "7b"): 8.29, ("qwen2_5_vl", "3b"): 3.75, ("qwen2_5_vl", "7b"): 8.29,
             ("qwen3_vl", "2b"): 2.13, ("qwen3_vl", "4b"): 4.44, ("qwen3_vl", "8b"): 8.77,
             ("qwen3_vl_moe", "30b-a3b"): 31.07}


def _parameters(config) -> int:
    from olmocr_rl.model.loading import meta_model

    return sum(p.numel() for p in meta_model(config).parameters())


@pytest.mark.parametrize(("model_type", "shape"), sorted(PUBLISHED))
def test_released_presets_have_the_published_parameter_counts(model_type, shape):
    config = preset_config(model_type, shape)
    assert config.model_type == model_type
    assert _parameters(config) / 1e9 == pytest.approx(PUBLISHED[model_type, shape], abs=0.005)


def test_every_family_has_a_tiny_preset_and_every_preset_is_listed():
    # the CPU benchmarks' shape and the recipe's reader
    cpu_presets = {(t, "tiny") for t in FAMILIES} | {("qwen2_5_vl", "small"), ("qwen2_5_vl", "reader")}
    assert set(PUBLISHED) | cpu_presets == {(t, s) for t, f in FAMILIES.items() for s in f.shapes}
    with pytest.raises(ValueError, match="Qwen3-VL has no shape '7b'; choose one of tiny, 2b, 4b, 8b"):
        preset_config("qwen3_vl", "7b")


def test_vision_layout_is_read_from_the_config_not_assumed():
    qwen3 = vision_layout(preset_config("qwen3_vl", "8b"))
    assert (qwen3.patch_size, qwen3.merge_size, qwen3.token_block_px, qwen3.width) == (16, 2, 32, 1152)
    assert qwen3.full_attention_layers == tuple(range(27)) and qwen3.windowed_layers == () and qwen3.window_patches == 0
    assert qwen3.deepstack_layers == (8, 16, 24)
    qwen25 = vision_layout(preset_config("qwen2_5_vl", "3b"))
    assert (qwen25.patch_size, qwen25.token_block_px, qwen25.window_patches) == (14, 28, 64)  # 112 px windows
    assert qwen25.full_attention_layers == (7, 15, 23, 31) and len(qwen25.windowed_layers) == 28
    assert qwen25.deepstack_layers == ()
    # Qwen2-VL keeps its tower's width in embed_dim (hidden_size is the language model's, 3584)
    assert vision_layout(preset_config("qwen2_vl", "7b")).width == 1280
    # a checkpoint that differs from the preset is read as it is
    config = preset_config("qwen3_vl", "2b")
    config.vision_config.patch_size, config.vision_config.deepstack_visual_indexes = 14, [3]
    changed = vision_layout(config)
    assert (changed.patch_size, changed.token_block_px, changed.deepstack_layers) == (14, 28, (3,))


def test_vision_token_ids_come_from_the_config():
    config = preset_config("qwen3_vl", "tiny", vocab_size=64, token_ids={
        "<|endoftext|>": 0, "<|im_end|>": 1, "<|vision_start|>": 7, "<|vision_end|>": 8, "<|image_pad|>": 9,
        "<|video_pad|>": 10})
    assert vision_tokens(config) == (9, 10, 7, 8)
    assert vision_tokens(preset_config("qwen3_vl", "8b")) == (151655, 151656, 151652, 151653)


def test_experts_of_the_moe_and_none_for_dense_models():
    moe = experts(preset_config("qwen3_vl_moe", "30b-a3b"))
    assert (moe.num_experts, moe.top_k, moe.sparse_layers, moe.router_aux_loss_coef) == (128, 8, tuple(range(48)), 0.001)
    config = preset_config("qwen3_vl_moe", "tiny", vocab_size=64, token_ids={
        "<|endoftext|>": 0, "<|im_end|>": 1, "<|vision_start|>": 2, "<|vision_end|>": 3, "<|image_pad|>": 4,
        "<|video_pad|>": 5})
    config.text_config.mlp_only_layers = [1]
    assert experts(config).sparse_layers == (0,)
    config.text_config.mlp_only_layers, config.text_config.decoder_sparse_step = [], 2
    assert experts(config).sparse_layers == (1,)  # every second layer sparse: layer i when (i + 1) % 2 == 0
    assert experts(preset_config("qwen3_vl", "8b")) is None and not FAMILIES["qwen3_vl"].moe


def test_unsupported_types_are_one_line_naming_the_supported_ones():
    with pytest.raises(UnsupportedModelError) as error:
        family("llava")
    message = str(error.value)
    assert message.startswith("model_type 'llava' is not supported; olmocr_rl trains qwen2_vl (Qwen2-VL), "
                              "qwen2_5_vl (Qwen2.5-VL), qwen3_vl (Qwen3-VL), qwen3_vl_moe (Qwen3-VL-MoE)")
    assert "\n" not in message


def test_qwen3_5_is_refused_before_loading_with_what_is_missing(tmp_path, capsys):
    """A Qwen3.5 folder (config only: nothing else is read) stops the CLI with one line naming the gap."""
    from transformers import Qwen3_5Config

    from olmocr_rl import grpo_train
    from olmocr_rl.model.loading import ModelLoadError, load_model_and_processor

    folder = tmp_path / "qwen3_5"
    Qwen3_5Config().save_pretrained(folder)
    with pytest.raises(ModelLoadError, match="no float32 causal_conv1d kernel"):
        load_model_and_processor(str(folder))
    from conftest import BENCH_DATA_SAMPLE

    code = grpo_train.main(["--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--model_name", str(folder),
                            "--output_dir", str(tmp_path / "out"), "--reward_bench", "--num_generations", "2",
                            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
                            "--report_to", "none"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1
    assert "model_type 'qwen3_5' is not supported: Qwen3.5: its text model's gated-delta-net" in errors[0]


def test_tiny_presets_build_for_every_family(tiny_family_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    for model_type in FAMILIES:
        folder = tiny_family_dir(model_type)
        info = json.loads((folder / "olmocr_rl_tiny_model.json").read_text())
        assert info["family"] == model_type and 100_000 < info["parameters"] < 5_000_000
        model, processor = load_model_and_processor(str(folder))
        assert type(model).__name__ == FAMILIES[model_type].model_class
        assert type(processor).__name__ == FAMILIES[model_type].processor_class


def test_the_config_checks_image_token_bound_holds_for_every_family():
    """config.checks.max_image_tokens runs before any config is read and assumes 28 px per token, the smallest
    block of the families: a family with smaller blocks would need it changed."""
    from olmocr_rl.config.checks import max_image_tokens

    blocks = {vision_layout(preset_config(t, s)).token_block_px for (t, s) in PUBLISHED}
    assert min(blocks) == 28 and blocks == {28, 32}
    assert max_image_tokens(1288) == 46 * 46 >= (1288 // 32 + 1) ** 2
