"""Preemption changes nothing: a run SIGKILLed after a checkpoint and restarted on an empty folder resumes
from S3 (the real moto server on loopback, tests/s3_server.py) and continues exactly as the uninterrupted
run: same pages, same sampled completions, same rewards and losses (CPU, fp32), the same W&B run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from test_cli_e2e import REPO, cli_env, failure, offline_runs, read_metrics, run_cli, tiny_run_flags, training_steps
from test_cli_s3 import remote_files

# Every per-step number that depends on the pages, the sampled completions and the weights.
COMPARED = ("reward", "reward_std", "loss", "grad_norm", "entropy", "learning_rate", "completions/mean_length")


def exact_run_flags(model: Path, output_dir: Path) -> list:
    """8 steps over every sample page (so data order matters), a checkpoint every 4; the edit-distance
    reward differs between any two samples, so every step has a learning signal (non-zero advantages)."""
    return [*tiny_run_flags(model, output_dir, 8), "--pages", ".", "--save_steps", 4,
            "--reward_bench_edit_distance", 1.0]


def wait_for_remote(server, prefix: str, name: str, proc: subprocess.Popen, timeout: float = 540) -> bool:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if name in remote_files(server, prefix):
            return True
        time.sleep(0.1)
    return False


def per_step(records: list[dict]) -> dict[int, dict]:
    return {r["step"]: r for r in records if "reward" in r}


@pytest.mark.slow
def test_sigkill_after_checkpoint_4_then_resume_from_s3_continues_exactly(moto_s3, tmp_path, tiny_model_dir):
    # Run A: 8 steps, uninterrupted, no S3, no W&B.
    run_a = tmp_path / "a"
    a = run_cli([*exact_run_flags(tiny_model_dir, run_a), "--report_to", "none"], tmp_path)
    assert a.returncode == 0, failure(a)

    # Run B, first machine: the same run with S3 and W&B (offline), SIGKILLed once checkpoint-4 is on S3.
    save_uri = f"s3://{moto_s3.bucket}/runs/b"
    machine1 = tmp_path / "machine1"
    b_flags = [*exact_run_flags(tiny_model_dir, machine1), "--s3_save_path", save_uri, "--cache_dir",
               tmp_path / "cache", "--report_to", "wandb", "--resume_from_checkpoint"]
    log_path = tmp_path / "b1.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "olmocr_rl.grpo_train", *map(str, b_flags)], cwd=REPO,
                                env=cli_env(tmp_path), stdout=log_file, stderr=subprocess.STDOUT)
        try:
            on_s3 = wait_for_remote(moto_s3, "runs/b", "checkpoint-4/trainer_state.json", proc)
            proc.kill()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert on_s3, "checkpoint-4 never reached S3 while run B was going:\n" + log_path.read_text()[-6000:]
    assert proc.returncode == -9
    remote = remote_files(moto_s3, "runs/b")
    assert "checkpoint-8/trainer_state.json" not in remote  # killed between the two checkpoints
    wandb_record = moto_s3.client().get_object(Bucket=moto_s3.bucket, Key="runs/b/checkpoint-4/wandb_run.json")
    run_id = json.loads(wandb_record["Body"].read())["id"]
    first_runs = offline_runs(machine1)
    assert len(first_runs) == 1 and first_runs[0].name.endswith(f"-{run_id}"), first_runs
    shutil.rmtree(machine1)  # the preempted machine and its disk are gone

    # Run B, second machine: an empty folder; the same command resumes from S3's checkpoint-4.
    machine2 = tmp_path / "machine2"
    b2 = run_cli([*exact_run_flags(tiny_model_dir, machine2), *b_flags[b_flags.index("--s3_save_path"):]], tmp_path)
    assert b2.returncode == 0, failure(b2)
    log = b2.stdout + b2.stderr
    assert f"pulled {save_uri}/checkpoint-4/" in log
    assert f"loaded the model weights of {machine2 / 'checkpoint-4'} (every key)" in log
    assert f"W&B: continuing run {run_id}" in log

    # Steps 5-8 of run B equal run A's: same pages, completions, rewards, losses, gradients.
    steps_a, steps_b = per_step(read_metrics(run_a)), per_step(read_metrics(machine2))
    assert sorted(steps_b) == [1, 2, 3, 4, 5, 6, 7, 8]  # 1-4 from S3's history, 5-8 trained after the resume
    worst = {key: max(abs(steps_a[s][key] - steps_b[s][key]) for s in range(5, 9)) for key in COMPARED}
    assert all(diff <= 1e-6 for diff in worst.values()), worst
    assert any(steps_a[s]["loss"] != 0.0 for s in range(5, 9)) and all(steps_a[s]["grad_norm"] > 0 for s in range(5, 9))
    from safetensors.torch import load_file

    final_a, final_b = load_file(run_a / "model.safetensors"), load_file(machine2 / "model.safetensors")
    assert max((final_a[k] - final_b[k]).abs().max().item() for k in final_a) == 0.0

    # The resumed W&B run is the same run: its offline folder and the new checkpoint carry the same id.
    second_runs = offline_runs(machine2)
    assert len(second_runs) == 1 and second_runs[0].name.endswith(f"-{run_id}"), second_runs
    assert json.loads((machine2 / "checkpoint-8" / "wandb_run.json").read_text())["id"] == run_id
