"""Qwen3-VL on the real vLLM engine (CPU build, fp32, colocated), with the guarantees the Qwen2.5-VL lane checks:
the prompt vLLM expands is token for token the trainer's, no vision pad token is sampled, and the mean
|vLLM log-prob - trainer log-prob| stays <= 1e-3 at every one of 3 steps at learning rate 1e-3 (a missed weight
sync or a stale encoder cache shows from step 2 on). Qwen3-VL differs from Qwen2.5-VL in its processor (16 px
patches, mean/std 0.5), interleaved M-RoPE, deepstack layers and (MoE) experts that vLLM 0.31 stores in the
released layout and its CPU kernel packs.

Also here, because this environment can import torchvision: the fast image processor the released folders name
against the PIL one the CPU trainer uses.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from vllm_lane.lane import failure, read_metrics, run_recorded
from vllm_lane.test_vllm_colocate import (MAX_LOGP_GAP, check_engine, check_prompts_and_pads, colocate_flags,
                                         vision_pad_ids)


def _check_run(model_dir, tmp_path, extra: list) -> list[float]:
    out = tmp_path / "out"
    # + the edit-distance reward: the warm model can pass every bench test of the page, and a group of equal
    # rewards would train nothing (the weights must move for steps 2-3 to test the sync)
    flags = colocate_flags(model_dir, out) + ["--pages", "simple_lines", "--reward_bench_edit_distance", 1.0, *extra]
    result, records = run_recorded(tmp_path, flags)
    assert result.returncode == 0, failure(result)
    check_engine(result.stderr, compiled=False)
    check_prompts_and_pads(records, vision_pad_ids(model_dir), steps=3)
    metrics = read_metrics(out)
    gaps = [m["sampling/sampling_logp_difference/mean"] for m in metrics]
    assert len(gaps) == 3 and max(gaps) <= MAX_LOGP_GAP, gaps
    before, after = load_file(model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert max((after[k] - before[k]).abs().max().item() for k in before) > 1e-3  # the weights moved
    print(f"{model_dir.parent.name} {extra}: mean |vLLM - trainer| log-prob per step {gaps}; "
          f"max {[m['sampling/sampling_logp_difference/max'] for m in metrics]}")
    return gaps


@pytest.mark.parametrize("arm", [[], ["--olmorl"]], ids=["plain", "olmorl"])
def test_qwen3_vl_vllm_logprobs_equal_the_trainers_at_every_step(warm_qwen3_vl_dir, tmp_path, arm):
    _check_run(warm_qwen3_vl_dir, tmp_path, arm)


def test_qwen3_vl_moe_release_folder_vllm_logprobs_equal_the_trainers(warm_qwen3_vl_moe_release_dir, tmp_path):
    """Experts synced transposed to the released layout, and re-packed for vLLM's CPU MoE kernel after each sync
    (without that: 0.02-0.04 from the first sync on)."""
    _check_run(warm_qwen3_vl_moe_release_dir, tmp_path, [])


def test_fast_image_processor_and_the_pil_one_agree(release_folder):
    """Equal where the page needs no resize; where it does, PIL's and torchvision's bicubic differ by rounding:
    at most 2 grey levels on under 1 % of the values. The grid (hence the prompt) is always the same."""
    from transformers import AutoImageProcessor
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from olmocr_rl.model.loading import torchvision_available

    assert torchvision_available()
    folder = release_folder("dense")
    fast, pil = AutoImageProcessor.from_pretrained(folder), Qwen2VLImageProcessorPil.from_pretrained(folder)
    assert type(fast).__name__ == "Qwen2VLImageProcessor"  # what "Qwen2VLImageProcessorFast" names in 5.17
    rng = np.random.default_rng(0)
    for width, height, resized in ((1280, 992, False), (1288, 1000, True), (448, 346, True), (301, 403, True)):
        page = Image.fromarray((rng.random((height, width, 3)) * 255).astype("uint8"))
        a, b = fast(images=[page], return_tensors="pt"), pil(images=[page], return_tensors="pt")
        assert a["image_grid_thw"].tolist() == b["image_grid_thw"].tolist()
        levels = (a["pixel_values"] - b["pixel_values"]).abs() * 255 * 0.5  # std 0.5: one grey level = 2/255
        if not resized:
            assert levels.max().item() < 1e-3
        else:
            assert levels.max().item() <= 2.0 + 1e-3 and (levels > 1e-3).float().mean().item() < 0.01
