"""The training CLI with ``--vllm_mode server`` against ``trl vllm-serve`` on loopback (vLLM's CPU build).

TRL pushes weights to the server over NCCL, which needs CUDA, so on CPU the weight transfer is skipped
(record_rollouts.py --skip-weight-transfer says so in the run's output); one step needs none, since the
server loaded the same weights. What runs for real: the server, TRL's image-feature and generation
requests, our bad_words for vision pad tokens, the encoder-cache reset after a (skipped) sync, and
the trainer's log-probs against the server's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from vllm_lane.lane import BENCH, failure, lane_env, read_metrics, run_recorded


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def vllm_server(sft_model_dir, tmp_path):
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    trl = Path(sys.executable).with_name("trl")
    process = subprocess.Popen(
        [str(trl), "vllm-serve", "--model", str(sft_model_dir), "--host", "127.0.0.1", "--port", str(port),
         "--dtype", "float32", "--max_model_len", "4096", "--gpu_memory_utilization", "0.2"],
        env=lane_env(tmp_path), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.time() + 300
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"trl vllm-serve exited {process.returncode}:\n{(tmp_path / 'server.log').read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail("trl vllm-serve did not answer /health within 300 s")
            time.sleep(2)
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def test_server_rollout_step_matches_the_trainer(sft_model_dir, vllm_server, tmp_path):
    out = tmp_path / "out"
    flags = [
        "--train_bench_data_folder", BENCH, "--model_name", sft_model_dir, "--output_dir", out, "--reward_bench",
        "--num_generations", 4, "--per_device_train_batch_size", 4, "--gradient_accumulation_steps", 1,
        "--max_steps", 1, "--max_completion_length", 128, "--vllm_mode", "server",
        "--vllm_server_host", "127.0.0.1", "--vllm_server_port", vllm_server, "--report_to", "none",
        "--no-log_completions", "--logging_steps", 1, "--target_longest_image_dim", 448, "--pages", "simple_lines",
        "--seed", 0,
    ]
    result, records = run_recorded(tmp_path, flags, skip_weight_transfer=True)
    assert result.returncode == 0, failure(result)
    assert "weight transfer skipped" in result.stdout
    config = json.loads((sft_model_dir / "config.json").read_text())
    pads = {config["image_token_id"], config["video_token_id"]}
    assert len(records) == 1 and records[0]["vllm_prompt_ids"] == records[0]["trainer_prompt_ids"]
    assert all(not pads & set(c) for c in records[0]["completion_ids"])
    gap = read_metrics(out)[0]["sampling/sampling_logp_difference/mean"]
    assert gap <= 1e-3
    print(f"server mode, step 1: mean |vLLM - trainer| log-prob {gap:.3g}")
