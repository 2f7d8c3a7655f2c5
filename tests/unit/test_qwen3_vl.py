"""Qwen3-VL and Qwen3-VL-MoE folders as released (tests/release_layout.py, not the project's builder) and as
``tiny_model --family`` writes them: they load without torchvision with every processor setting read, the
image-only processor records the stock class, MoE experts keep the released layout on disk, and the MoE
router loss reaches TRL.

The released folders name ``Qwen2VLImageProcessorFast`` (torchvision's processor), which cannot be built
here. What is checked here: the PIL processor the loader builds takes every setting of the folder's
``preprocessor_config.json`` (16 px patches, merge 2, mean and std 0.5, the pixel budget), its pixel values
equal those of a PIL processor built by hand with those settings and the hand-computed normalisation and grid.
The comparison with torchvision's processor itself runs in the vLLM lane, whose environment can import it
(tests/vllm_lane/test_vllm_qwen3_vl.py: equal where no resize is needed, within 2 grey levels of bicubic rounding
on about 0.4 % of the values where one is).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from olmocr_rl.model.loading import load_model_and_processor


def _page(width: int, height: int, seed: int = 0) -> Image.Image:
    return Image.fromarray((np.random.default_rng(seed).random((height, width, 3)) * 255).astype("uint8"))


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_release_folder_loads_with_the_pil_processor_and_every_setting(release_folder, kind):
    folder = release_folder(kind)
    model, processor = load_model_and_processor(str(folder))
    assert type(model).__name__ == ("Qwen3VLMoeForConditionalGeneration" if kind == "moe" else
                                    "Qwen3VLForConditionalGeneration")
    assert type(processor).__name__ == "Qwen3VLProcessor" and "ImageOnly" in type(processor).__qualname__
    image_processor = processor.image_processor
    assert type(image_processor).__name__ == "Qwen2VLImageProcessorPil"
    settings = json.loads((folder / "preprocessor_config.json").read_text())
    assert settings["image_processor_type"] == "Qwen2VLImageProcessorFast"
    for key, value in settings.items():
        if key not in ("image_processor_type", "processor_class"):
            assert (dict(getattr(image_processor, key)) if key == "size" else list(getattr(image_processor, key))
                    if isinstance(value, list) else getattr(image_processor, key)) == value, key
    # the chat template of chat_template.json, not the tokenizer's (it has none)
    assert processor.chat_template == json.loads((folder / "chat_template.json").read_text())["chat_template"]


def test_release_processor_pixels_equal_a_processor_built_from_its_settings(release_folder):
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    _, processor = load_model_and_processor(str(release_folder("dense")), load_model=False)
    by_hand = Qwen2VLImageProcessorPil(size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16,
                                       merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    page = _page(1288, 1000)  # a 1288 px page: each side rounded to 32 px blocks -> 1280 x 992 -> 80 x 62 patches
    ours, theirs = processor.image_processor(images=[page], return_tensors="pt"), by_hand(images=[page], return_tensors="pt")
    assert ours["image_grid_thw"].tolist() == theirs["image_grid_thw"].tolist() == [[1, 62, 80]]
    assert torch.equal(ours["pixel_values"], theirs["pixel_values"])
    assert ours["pixel_values"].shape == (62 * 80, 3 * 2 * 16 * 16)
    # mean and std 0.5: white is (1 - 0.5) / 0.5 = 1, black -1 (CLIP's mean and std would give 1.93 and -1.79)
    for colour, value in ((255, 1.0), (0, -1.0)):
        flat = processor.image_processor(images=[Image.new("RGB", (640, 512), (colour,) * 3)], return_tensors="pt")
        assert flat["image_grid_thw"].tolist() == [[1, 32, 40]]
        torch.testing.assert_close(flat["pixel_values"], torch.full_like(flat["pixel_values"], value))
    # the prompt holds one image token per merged 2 x 2 block: 62 x 80 / 4
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Transcribe."}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[page], return_tensors="pt")
    assert int((inputs["input_ids"] == processor.image_token_id).sum()) == 62 * 80 // 4
    assert "mm_token_type_ids" in inputs  # Qwen3-VL's M-RoPE needs them


def test_image_only_processor_saves_the_stock_class(release_folder, tmp_path):
    _, processor = load_model_and_processor(str(release_folder("dense")), load_model=False)
    processor.save_pretrained(tmp_path)
    saved = "".join(p.read_text() for p in tmp_path.glob("*.json"))
    assert '"processor_class": "Qwen3VLProcessor"' in saved and "ImageOnly" not in saved


@pytest.mark.parametrize("model_type", ["qwen3_vl", "qwen3_vl_moe"])
def test_tiny_model_writes_the_release_layout(tiny_family_dir, model_type):
    folder = tiny_family_dir(model_type)
    image = json.loads((folder / "preprocessor_config.json").read_text())
    video = json.loads((folder / "video_preprocessor_config.json").read_text())
    assert not (folder / "processor_config.json").exists()
    assert (image["image_processor_type"], image["processor_class"]) == ("Qwen2VLImageProcessorFast", "Qwen3VLProcessor")
    assert (video["video_processor_type"], video["processor_class"]) == ("Qwen3VLVideoProcessor", "Qwen3VLProcessor")
    for settings in (image, video):
        assert (settings["patch_size"], settings["merge_size"], settings["image_mean"], settings["image_std"]) == \
            (16, 2, [0.5] * 3, [0.5] * 3)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type and config["vision_config"]["deepstack_visual_indexes"] == [0, 1]
    assert config["text_config"]["rope_parameters"]["mrope_interleaved"] is True


def test_moe_experts_stay_in_the_released_layout_through_a_save(release_folder, tiny_family_dir, tmp_path):
    """Released Qwen3-VL-MoE stores experts as (experts, in, out); transformers 5.17 trains with the transpose and
    would save that, which vLLM 0.31 cannot load. Loading and saving through the package keeps the release's."""
    from safetensors.torch import load_file

    folder = release_folder("moe")
    key = "model.language_model.layers.0.mlp.experts.gate_up_proj"
    on_disk = load_file(folder / "model.safetensors")
    model, _ = load_model_and_processor(str(folder))
    live = dict(model.named_parameters())
    assert on_disk[key].shape == (4, 128, 64) and live[key].shape == (4, 64, 128)  # hidden 128, 2 x 32 expert width
    assert torch.equal(on_disk[key].transpose(1, 2), live[key])
    model.save_pretrained(tmp_path / "saved")
    saved = load_file(tmp_path / "saved" / "model.safetensors")
    assert saved.keys() == on_disk.keys() and all(torch.equal(saved[k], on_disk[k]) for k in on_disk)
    built = load_file(tiny_family_dir("qwen3_vl_moe") / "model.safetensors")
    assert built[key].shape == (4, 128, 64)  # the builder writes the released layout too
    reloaded = type(model).from_pretrained(tmp_path / "saved")
    assert all(torch.equal(p, live[n]) for n, p in reloaded.named_parameters())


def test_moe_router_loss_reaches_trl_and_the_flag_sets_it(release_folder, tmp_path):
    """TRL adds the load-balancing loss only for text configs with ``output_router_logits`` (transformers 5.17
    leaves it out of Qwen3-VL-MoE's); the loader adds it, and --router_aux_loss_coef overrides the config's."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, processor = load_model_and_processor(str(release_folder("moe")))
    assert model.config.get_text_config().output_router_logits is False
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Hi"}]}] * 2)
    for coef, enabled, weight in ((None, True, 0.001), (0.05, True, 0.05), (0.0, False, 0.0)):
        args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                          max_steps=1, report_to="none", use_cpu=True, router_aux_loss_coef=coef)
        trainer = GRPOTrainer(model=model, args=args, processing_class=processor,
                              reward_funcs=lambda completions, **kw: [0.0] * len(completions), train_dataset=dataset)
        assert (trainer.aux_loss_enabled, trainer.router_aux_loss_coef) == (enabled, weight)


def test_router_aux_loss_flag_is_refused_for_a_dense_model_before_it_loads(release_folder, tmp_path, capsys,
                                                                           monkeypatch):
    from conftest import BENCH_DATA_SAMPLE

    from olmocr_rl import grpo_train

    def no_loading(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr("olmocr_rl.model.loading.load_model_and_processor", no_loading)
    common = ["--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--output_dir", str(tmp_path / "out"),
              "--reward_bench", "--num_generations", "2", "--per_device_train_batch_size", "2",
              "--gradient_accumulation_steps", "1", "--report_to", "none"]
    dense = release_folder("dense")
    code = grpo_train.main([*common, "--model_name", str(dense), "--router_aux_loss_coef", "0.01"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 1 and errors == [
        f"error: --router_aux_loss_coef 0.01: {dense} is a dense Qwen3-VL model (model_type 'qwen3_vl'), not a "
        "mixture of experts, so it has no router loss; drop the flag"]
    assert grpo_train.main([*common, "--model_name", str(dense), "--router_aux_loss_coef", "-1"]) == 2
    assert "--router_aux_loss_coef must be >= 0 (got -1.0)" in capsys.readouterr().err


def test_deepstack_mergers_are_mergers_for_freezing_and_the_preflight(tiny_family_dir):
    """Qwen3-VL's deepstack mergers project into the language model like its merger (families.merger_modules):
    --freeze_vision_merger freezes them, --freeze_vision_tower does not, and the preflight counts them as merger."""
    from olmocr_rl.model.colocate_memory import model_facts
    from olmocr_rl.model.families import preset_config
    from olmocr_rl.model.flops import ArchFlops
    from olmocr_rl.model.frozen_vision import freeze_vision, vision_trainability

    model, _ = load_model_and_processor(str(tiny_family_dir("qwen3_vl")))
    deepstack = list(model.model.visual.deepstack_merger_list.parameters())
    freeze_vision(model, tower=True, merger=False)
    assert all(p.requires_grad for p in deepstack) and not model.model.visual.blocks[0].attn.qkv.weight.requires_grad
    assert vision_trainability(model).merger_frozen is False
    freeze_vision(model, tower=False, merger=True)
    assert not any(p.requires_grad for p in deepstack) and vision_trainability(model).merger_frozen is True
    config = preset_config("qwen3_vl", "8b")
    facts = model_facts(config)
    assert facts.vision_merger_parameters == ArchFlops.from_config(config).merger_params  # merger + 3 deepstack
    assert facts.vision_merger_parameters > 4 * 1152 * 4 * 1152 * 3


def test_tiny_model_cli_takes_a_family_and_refuses_a_shape_it_lacks(tmp_path, capsys):
    from olmocr_rl.tiny_model import main

    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "bad"), "--family", "qwen3_vl", "--shape", "7b"])
    assert stop.value.code == 2 and "--shape 7b: Qwen3-VL has tiny, 2b, 4b, 8b" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    assert main([str(tmp_path / "moe"), "--family", "qwen3_vl_moe"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote tiny Qwen3-VL-MoE to {tmp_path / 'moe'} (")
    assert json.loads((tmp_path / "moe" / "config.json").read_text())["text_config"]["num_local_experts"] == 4  # transformers writes num_experts under this name
