"""LoRA (``--use_peft``) and the frozen vision tower with the rest of the trainer, on the tiny model: OlmoRL with
active sampling, gradient checkpointing and both vision speed-ups; a KL reference (the adapters turned off) with
two policy updates per generation batch, where the feature cache encodes each step's page once however many
forwards the step runs; and data parallel over two processes."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import warm_python
from test_active_sampling import _half_flat_bench
from test_cli_e2e import BENCH, REPO, cli_env, failure

COMMON = ["--num_generations", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
          "--max_completion_length", "8", "--target_longest_image_dim", "256", "--logging_steps", "1",
          "--save_steps", "100", "--no-log_completions", "--report_to", "none", "--vllm_mode", "none",
          "--temperature", "1.0", "--seed", "0", "--warmup_steps", "0", "--reward_bench", "--use_peft",
          "--learning_rate", "2e-3"]


def _records(out) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in r]


def _tensors(path):
    from safetensors.torch import load_file

    return load_file(path)


def test_lora_with_olmorl_active_sampling_checkpointing_and_the_vision_speedups(tiny_model_dir, tmp_path):
    from olmocr_rl import grpo_train

    out = tmp_path / "out"
    code = grpo_train.main(["--train_bench_data_folder", str(_half_flat_bench(tmp_path / "bench")),
                            "--model_name", str(tiny_model_dir), "--output_dir", str(out), "--max_steps", "3",
                            *COMMON, "--olmorl", "--active_sampling", "--gradient_checkpointing",
                            "--batched_vision_attention", "--share_page_encoding"])
    assert code == 0
    records = _records(out)
    assert [r["active_sampling/groups_kept"] for r in records] == [1.0] * 3
    assert all(r["grad_norm"] > 0 for r in records)
    base, merged = _tensors(tiny_model_dir / "model.safetensors"), _tensors(out / "model.safetensors")
    changed = {k for k in base if not torch.equal(base[k], merged[k])}
    assert changed and all(k.startswith("model.layers.") for k in changed)  # the vision side untouched


def test_kl_reference_and_two_updates_per_batch_encode_each_page_once_per_step(tiny_model_dir, tmp_path,
                                                                               monkeypatch):
    from olmocr_rl import grpo_train
    from olmocr_rl.trainer import vision_cache

    caches = []
    attach = vision_cache.attach_feature_cache
    monkeypatch.setattr(vision_cache, "attach_feature_cache", lambda trainer: caches.append(attach(trainer)))
    forwards = []
    import olmocr_rl.model.frozen_vision as frozen_vision

    cached_forward = frozen_vision._cached_forward
    monkeypatch.setattr(frozen_vision, "_cached_forward", lambda self, *a, **k: forwards.append(1) or cached_forward(
        self, *a, **k))
    out = tmp_path / "out"
    code = grpo_train.main(["--train_bench_data_folder", str(BENCH), "--pages", "simple_lines",
                            "--model_name", str(tiny_model_dir), "--output_dir", str(out), "--max_steps", "4",
                            *COMMON, "--beta", "0.04", "--num_iterations", "2", "--reward_bench_edit_distance", "1.0"])
    assert code == 0
    records = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "kl" in r]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[0]["kl"] == 0.0 and records[-1]["kl"] > 0  # the reference is the base: adapters off
    (cache,) = caches
    assert cache is not None and cache.encoded == 4  # one page, encoded once in each of the 4 steps
    assert len(forwards) >= 10 and cache.reused == len(forwards) - 4  # prefill, old and reference log-probs, training


@pytest.mark.slow
def test_lora_data_parallel_over_two_processes(tiny_model_dir, tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "configs" / "accelerate" / "cpu_ddp.yaml"), "--num_processes", "2", "--main_process_port",
               str(_free_port()), "-m", "olmocr_rl.grpo_train", "--train_bench_data_folder", str(BENCH),
               "--pages", ".", "--model_name", str(tiny_model_dir), "--output_dir", str(out), "--max_steps", "2",
               *COMMON, "--num_generations", "2", "--per_device_train_batch_size", "1",
               "--reward_bench_edit_distance", "1.0"]
    result = warm_python.run(command, cwd=REPO, env=cli_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, failure(result)
    records = _records(out)
    assert [r["step"] for r in records] == [1, 2] and all(r["grad_norm"] > 0 for r in records)
    assert (out / "adapter" / "adapter_model.safetensors").is_file() and (out / "model.safetensors").is_file()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
