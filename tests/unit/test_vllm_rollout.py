"""The vLLM rollout fixes that need no engine: prompt form, banned tokens, flags, memory preflight, pool start.

The engine itself runs in the vLLM lane (tests/vllm_lane, `bash scripts/test.sh`).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_config import bench  # noqa: F401  (pytest fixture: an empty bench folder)

from olmocr_rl.config import environment as config_environment
from olmocr_rl.model.colocate_memory import GIB, ModelFacts, check_fit, model_facts
from olmocr_rl.config import ConfigError, build_grpo_config, parse_args, validate
from olmocr_rl.config.grpo import vllm_sampling_kwargs
from olmocr_rl.model.families import vision_pad_tokens
from olmocr_rl.trainer.vllm_generation import collapse_image_runs

IMG, VID = 7, 8
BENCH_DATA_SAMPLE = Path(__file__).resolve().parents[2] / "bench_data_sample"


def test_collapse_image_runs_keeps_one_placeholder_per_image():
    prompt = [1, 2, IMG, IMG, IMG, 3, IMG, IMG, 4, VID, VID, 5, 5]
    assert collapse_image_runs(prompt, [IMG, VID]) == [1, 2, IMG, 3, IMG, 4, VID, 5, 5]
    assert collapse_image_runs([IMG, VID, VID, IMG], [IMG, VID]) == [IMG, VID, IMG]  # runs of different pads
    assert collapse_image_runs([1, 2, 3], [IMG]) == [1, 2, 3]


def test_vision_pad_tokens_are_banned_for_vllm(tiny_model_dir):
    from olmocr_rl.model.loading import load_processor

    tokenizer = load_processor(str(tiny_model_dir)).tokenizer
    assert vision_pad_tokens(tokenizer) == ["<|image_pad|>", "<|video_pad|>"]
    kwargs = vllm_sampling_kwargs({"min_tokens": 4, "bad_words": ["foo"]}, tokenizer, block_image_tokens=True)
    assert kwargs == {"min_tokens": 4, "bad_words": ["foo", "<|image_pad|>", "<|video_pad|>"]}
    assert vllm_sampling_kwargs(None, tokenizer, block_image_tokens=False) is None
    assert vllm_sampling_kwargs({"seed": 1}, tokenizer, block_image_tokens=False) == {"seed": 1}


def _validate(bench, *flags, vllm=False, cuda=False, monkeypatch):
    monkeypatch.setattr(config_environment, "vllm_available", lambda: vllm)
    monkeypatch.setattr(config_environment, "cuda_available", lambda: cuda)
    args = parse_args(["--train_bench_data_folder", str(bench), "--reward_bench", "--num_generations", "2",
                       "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", *flags])
    return args, validate(args)


def test_explicit_vllm_mode_that_cannot_run_is_an_error(bench, monkeypatch):
    for mode in ("colocate", "server"):
        with pytest.raises(ConfigError, match=rf"--vllm_mode {mode} needs vLLM importable .*setup_env.sh --vllm"):
            _validate(bench, "--vllm_mode", mode, monkeypatch=monkeypatch)


def test_colocate_on_cpu_runs_the_cpu_engine_and_auto_prefers_hf(bench, monkeypatch):
    _, resolved = _validate(bench, "--vllm_mode", "colocate", vllm=True, monkeypatch=monkeypatch)
    assert resolved.vllm_mode == "colocate"
    assert any("vLLM's CPU engine" in n for n in resolved.notices)
    _, resolved = _validate(bench, vllm=True, monkeypatch=monkeypatch)  # auto on a CPU machine with vLLM
    assert resolved.vllm_mode == "none" and any("no CUDA GPU" in n and "HF generate" in n for n in resolved.notices)
    _, resolved = _validate(bench, vllm=True, cuda=True, monkeypatch=monkeypatch)
    assert resolved.vllm_mode == "colocate" and any("colocated vLLM" in n for n in resolved.notices)


def test_vllm_max_model_length_default_and_checks(bench, monkeypatch):
    args, resolved = _validate(bench, "--vllm_mode", "colocate", vllm=True, monkeypatch=monkeypatch)
    # 1288 px -> at most 46 x 46 image tokens, + 512 prompt text tokens, + 8000 completion tokens
    assert resolved.vllm_max_model_length == 46 * 46 + 512 + 8000 == 10628
    _, resolved = _validate(bench, "--target_longest_image_dim", "448", "--max_completion_length", "100",
                            "--vllm_mode", "colocate", vllm=True, monkeypatch=monkeypatch)
    assert resolved.vllm_max_model_length == 16 * 16 + 512 + 100
    with pytest.raises(ConfigError, match=r"--vllm_max_model_length 8000 leaves no room.*use 10628"):
        _validate(bench, "--vllm_max_model_length", "8000", "--vllm_mode", "colocate", vllm=True, monkeypatch=monkeypatch)
    _, resolved = _validate(bench, "--vllm_max_model_length", "9000", "--vllm_mode", "colocate", vllm=True,
                            monkeypatch=monkeypatch)
    assert resolved.vllm_max_model_length == 9000 and any("below the 10628 tokens" in n for n in resolved.notices)


def test_vllm_engine_flag_checks(bench, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match=r"--vllm_tensor_parallel_size 2 must divide .*\(3\)"):
        _validate(bench, "--vllm_mode", "colocate", "--vllm_tensor_parallel_size", "2",
                  "--gradient_accumulation_steps", "2", vllm=True, cuda=True, monkeypatch=monkeypatch)
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ConfigError, match="--vllm_enable_sleep_mode needs a CUDA GPU"):
        _validate(bench, "--vllm_mode", "colocate", "--vllm_enable_sleep_mode", vllm=True, monkeypatch=monkeypatch)
    with pytest.raises(ConfigError, match=r"--vllm_gpu_memory_utilization must be in \(0, 1\]"):
        _validate(bench, "--vllm_gpu_memory_utilization", "1.5", monkeypatch=monkeypatch)
    _, resolved = _validate(bench, monkeypatch=monkeypatch)
    assert resolved.vllm_engine_dtype == "float32"  # the trainer's dtype on CPU
    _, resolved = _validate(bench, "--vllm_dtype", "bfloat16", monkeypatch=monkeypatch)
    assert resolved.vllm_engine_dtype == "bfloat16"


def test_grpo_config_carries_the_vllm_settings(bench, monkeypatch, tiny_model_dir):
    from olmocr_rl.model.loading import load_processor

    tokenizer = load_processor(str(tiny_model_dir)).tokenizer
    args, resolved = _validate(bench, "--vllm_mode", "colocate", "--generation_kwargs", '{"min_tokens": 3}',
                               "--vllm_gpu_memory_utilization", "0.3", vllm=True, monkeypatch=monkeypatch)
    config = build_grpo_config(resolved, [1.0], tokenizer=tokenizer)
    assert config.use_vllm and config.vllm_mode == "colocate"
    assert config.vllm_max_model_length == resolved.vllm_max_model_length
    assert config.vllm_gpu_memory_utilization == 0.3 and config.vllm_tensor_parallel_size == 1
    assert config.generation_kwargs == {"min_tokens": 3, "bad_words": ["<|image_pad|>", "<|video_pad|>"]}
    args, resolved = _validate(bench, "--vllm_mode", "none", "--generation_kwargs", '{"min_new_tokens": 3}',
                               monkeypatch=monkeypatch)
    config = build_grpo_config(resolved, [1.0], tokenizer=tokenizer)
    assert not config.use_vllm and config.generation_kwargs == {"min_new_tokens": 3}  # HF: TRL masks pads itself


# --- colocate memory preflight ------------------------------------------------------------------

QWEN25_VL_7B = ModelFacts(parameters=8_292_166_656, kv_bytes_per_token_per_dtype_byte=2 * 28 * 4 * 128)


def test_released_7b_shape_facts_from_its_config():
    from conftest import released_qwen25_vl_config

    config = released_qwen25_vl_config("7b")
    facts = model_facts(config)
    assert (facts.parameters, facts.kv_bytes_per_token_per_dtype_byte) == (
        QWEN25_VL_7B.parameters, QWEN25_VL_7B.kv_bytes_per_token_per_dtype_byte)


def test_memory_fit_lines_name_the_numbers_and_the_value_to_use():
    common = dict(max_model_length=10628, engine_dtype="bfloat16")
    assert check_fit(QWEN25_VL_7B, gpu_bytes=141 * 10**9, utilization=0.15, **common) is None  # one H200
    line = check_fit(QWEN25_VL_7B, gpu_bytes=80 * GIB, utilization=0.15, **common)
    assert line.startswith("colocate does not fit one 80.0 GiB GPU: the colocated vLLM engine needs 18.0 GiB "
                           "(15.4 GiB bfloat16 weights of 8.29B parameters + 0.6 GiB KV cache for one 10,628-token")
    assert "trainer needs at least 61.8 GiB" in line and "--vllm_mode server" in line and "\n" not in line
    # engine share too small on its own: the utilisation that fits
    line = check_fit(QWEN25_VL_7B, gpu_bytes=141 * 10**9, utilization=0.1, **common)
    assert "gives vLLM 13.1 GiB" in line and line.endswith("which needs 61.8 GiB)")
    assert "use --vllm_gpu_memory_utilization 0.14" in line
    assert check_fit(QWEN25_VL_7B, gpu_bytes=141 * 10**9, utilization=0.14, **common) is None
    # too generous a share squeezes the trainer
    line = check_fit(QWEN25_VL_7B, gpu_bytes=141 * 10**9, utilization=0.6, **common)
    assert "leaves the trainer 52.5 GiB" in line and "use --vllm_gpu_memory_utilization 0.52" in line
    # several processes: the trainer part is sharded and not checked; tensor parallel splits the engine
    assert check_fit(QWEN25_VL_7B, gpu_bytes=80 * GIB, utilization=0.25, single_process=False, **common) is None
    line = check_fit(QWEN25_VL_7B, gpu_bytes=80 * GIB, utilization=0.12, single_process=False, tensor_parallel=2,
                     **common)  # 7.7 GiB of weights and 0.3 GiB of KV per GPU + 2 GiB runtime = 10.0 GiB
    assert "split over 2 GPUs" in line and line.endswith("use --vllm_gpu_memory_utilization 0.13")
    assert check_fit(QWEN25_VL_7B, gpu_bytes=80 * GIB, utilization=0.13, single_process=False, tensor_parallel=2,
                     **common) is None
    # the engine alone exceeds the GPU: splitting the engine is the fix, not sharding the trainer
    line = check_fit(QWEN25_VL_7B, gpu_bytes=16 * GIB, utilization=0.9, single_process=False, **common)
    assert line.startswith("colocate does not fit one 16.0 GiB GPU: the colocated vLLM engine needs 18.0 GiB")
    assert "--vllm_tensor_parallel_size (now 1)" in line and "trainer needs" not in line


def test_memory_preflight_counts_every_expert_of_a_moe_model():
    """Qwen3-VL-30B-A3B: the engine and the trainer hold all 128 experts of each layer (31.07B parameters), not
    the 3B a token uses; one H200 cannot hold them with their gradients and AdamW state."""
    from olmocr_rl.model.families import preset_config

    facts = model_facts(preset_config("qwen3_vl_moe", "30b-a3b"))
    assert (facts.parameters, facts.kv_bytes_per_token_per_dtype_byte) == (31_070_754_032, 2 * 48 * 4 * 128)
    assert facts.lora_parameters is None  # LoRA's default MLP targets are no linear layers in a MoE
    line = check_fit(facts, gpu_bytes=141 * 10**9, utilization=0.15, max_model_length=5628, engine_dtype="bfloat16")
    assert line.startswith("colocate does not fit one 131.3 GiB GPU: the colocated vLLM engine needs 60.4 GiB "
                           "(57.9 GiB bfloat16 weights of 31.07B parameters")
    assert "the trainer needs at least 231.5 GiB" in line and "shard the trainer" in line  # 8 bytes x 31.07B
    dense = model_facts(preset_config("qwen3_vl", "8b"))  # Qwen3-VL-8B fits one H200 at the default share
    assert dense.kv_bytes_per_token_per_dtype_byte == 2 * 36 * 8 * 128
    assert check_fit(dense, gpu_bytes=141 * 10**9, utilization=0.15, max_model_length=5628, engine_dtype="bfloat16",
                     reference_model=True) is None


def test_cli_stops_before_loading_when_colocate_cannot_fit(tmp_path, monkeypatch, capsys):
    """A 7B config (no weights) on a pretend 80 GiB GPU: one error line, exit 1, no model loaded."""
    import torch
    from conftest import released_qwen25_vl_config

    from olmocr_rl import grpo_train

    model = tmp_path / "qwen-7b-shape"
    released_qwen25_vl_config("7b").save_pretrained(model)
    monkeypatch.setattr(config_environment, "vllm_available", lambda: True)
    monkeypatch.setattr(config_environment, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=80 * GIB))

    def no_loading(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr("olmocr_rl.model.loading.load_model_and_processor", no_loading)
    code = grpo_train.main([
        "--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--model_name", str(model),
        "--output_dir", str(tmp_path / "out"), "--reward_bench", "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--vllm_mode", "colocate",
        "--report_to", "none",
    ])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(err) == 1
    assert err[0].startswith("error: colocate does not fit one 80.0 GiB GPU: the colocated vLLM engine needs 18.0 GiB")


def test_reward_pool_uses_forkserver_once_vllm_is_up(monkeypatch):
    from olmocr_rl.rewards.evaluator import default_start_method

    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert default_start_method() == ("fork" if sys.platform.startswith("linux") else "spawn")
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    assert default_start_method() == ("forkserver" if sys.platform.startswith("linux") else "spawn")


def test_tiny_model_declares_a_video_processor(tiny_model_dir):
    """Stock processors (vLLM's, AutoProcessor with torchvision) refuse a Qwen2.5-VL folder without one."""
    config = json.loads((tiny_model_dir / "processor_config.json").read_text())
    video, image = config["video_processor"], config["image_processor"]
    assert video["video_processor_type"] == "Qwen2VLVideoProcessor"
    assert {k: v for k, v in video.items() if k != "video_processor_type"} == \
        {k: v for k, v in image.items() if k != "image_processor_type"}
