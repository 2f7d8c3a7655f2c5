"""A LoRA run (``--use_peft``) preempted and resumed from S3 continues exactly: SIGKILL after its checkpoint-4
(the adapter, optimizer and RNG states) reached the moto server on loopback, restart in an empty folder,
and steps 5-8 equal the uninterrupted run's bit for bit (CPU, fp32), as do its final adapter and the merged
model at the output folder's root (``--save_merged``). The frozen vision tower's feature cache is on (LoRA
freezes the tower), so the resumed steps also show the cache changes nothing across a resume.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from test_cli_e2e import REPO, cli_env, failure, read_metrics, run_cli
from test_cli_s3 import remote_files
from test_preemption import COMPARED, exact_run_flags, per_step, wait_for_remote
import warm_python

LORA = ["--use_peft", "--lora_r", 8, "--learning_rate", 2e-3]


def _tensors(path):
    from safetensors.torch import load_file

    return load_file(path)


@pytest.mark.slow
def test_lora_run_killed_after_checkpoint_4_resumes_from_s3_exactly(moto_s3, tmp_path, tiny_model_dir):
    run_a = tmp_path / "a"
    a = run_cli([*exact_run_flags(tiny_model_dir, run_a), *LORA, "--report_to", "none"], tmp_path, fresh=True)
    assert a.returncode == 0, failure(a)
    assert (run_a / "checkpoint-4" / "adapter_model.safetensors").is_file()
    assert not (run_a / "checkpoint-4" / "model.safetensors").exists()  # checkpoints hold the adapter only

    save_uri = f"s3://{moto_s3.bucket}/runs/lora"
    machine1 = tmp_path / "machine1"
    b_flags = [*exact_run_flags(tiny_model_dir, machine1), *LORA, "--s3_save_path", save_uri, "--cache_dir",
               tmp_path / "cache", "--report_to", "none", "--resume_from_checkpoint"]
    log_path = tmp_path / "b1.log"
    with log_path.open("w") as log_file:
        proc = warm_python.popen([sys.executable, "-m", "olmocr_rl.grpo_train", *map(str, b_flags)], cwd=REPO,
                                env=cli_env(tmp_path), stdout=log_file, stderr=subprocess.STDOUT)
        try:
            on_s3 = wait_for_remote(moto_s3, "runs/lora", "checkpoint-4/trainer_state.json", proc)
            proc.kill()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert on_s3, "checkpoint-4 never reached S3:\n" + log_path.read_text()[-6000:]
    assert "checkpoint-8/trainer_state.json" not in remote_files(moto_s3, "runs/lora")
    shutil.rmtree(machine1)

    machine2 = tmp_path / "machine2"
    b2 = run_cli([*exact_run_flags(tiny_model_dir, machine2), *b_flags[b_flags.index("--use_peft"):]], tmp_path)
    assert b2.returncode == 0, failure(b2)
    log = b2.stdout + b2.stderr
    assert f"pulled {save_uri}/checkpoint-4/" in log
    assert f"loaded the LoRA adapter of {machine2 / 'checkpoint-4'}" in log
    assert "each page's vision features computed once per step (merger frozen too)" in log

    steps_a, steps_b = per_step(read_metrics(run_a)), per_step(read_metrics(machine2))
    assert sorted(steps_b) == list(range(1, 9))
    worst = {key: max(abs(steps_a[s][key] - steps_b[s][key]) for s in range(5, 9)) for key in COMPARED}
    assert all(diff == 0.0 for diff in worst.values()), worst
    assert all(steps_a[s]["grad_norm"] > 0 for s in range(5, 9))

    # The final output: the merged model at the root, the adapter beside it, both equal to run A's; on S3 too.
    for rel in ("model.safetensors", "adapter/adapter_model.safetensors"):
        final_a, final_b = _tensors(run_a / rel), _tensors(machine2 / rel)
        assert final_a.keys() == final_b.keys()
        assert max((final_a[k] - final_b[k]).abs().max().item() for k in final_a) == 0.0, rel
    base, merged = _tensors(tiny_model_dir / "model.safetensors"), _tensors(machine2 / "model.safetensors")
    assert base.keys() == merged.keys() and any(not (base[k] == merged[k]).all() for k in base)
    config = json.loads((machine2 / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model_dir.resolve()) and config["r"] == 8
    remote = remote_files(moto_s3, "runs/lora")
    assert {"model.safetensors", "config.json", "adapter/adapter_model.safetensors", "adapter/adapter_config.json",
            "checkpoint-8/adapter_model.safetensors"} <= remote
