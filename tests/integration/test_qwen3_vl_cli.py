"""Qwen3-VL and Qwen3-VL-MoE end to end through the CLIs, on folders laid out as the releases are and built
without the project's builder (tests/release_layout.py):

- each trains 3 steps with nothing but the required flags and a batch geometry (share_page_encoding on, its
  default; W&B offline; HF generation at the default 8,000-token limit): the deepstack crash is gone;
- the MoE run logs TRL's load-balancing loss (``aux_loss``);
- a MoE run mirrors its checkpoints to S3; resumed on an empty folder from S3's checkpoint-2, steps 3-4 and the
  final weights equal the uninterrupted run's bit for bit; its checkpoints soup, evaluate and report like
  Qwen2.5-VL's;
- Qwen2-VL (in the family table) trains through the CLI too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from safetensors.torch import load_file
from test_cli_e2e import BENCH, REPO, cli_env, failure, read_metrics, run_cli, tiny_run_flags, training_steps
from test_cli_s3 import remote_files
import warm_python

pytestmark = pytest.mark.slow

GEOMETRY = ["--num_generations", 2, "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 1]


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_release_folder_trains_three_steps_with_the_required_flags_only(release_folder, tmp_path, kind):
    out = tmp_path / "out"
    result = run_cli(["--train_bench_data_folder", BENCH, "--model_name", release_folder(kind), "--reward_bench",
                      *GEOMETRY, "--max_steps", 3, "--output_dir", out], tmp_path)
    assert result.returncode == 0, failure(result)
    log = result.stdout + result.stderr
    assert "vision tower: each distinct page encoded once per forward (deepstack features included)" in log
    assert "Traceback" not in log
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 3
    last = [r for r in read_metrics(out) if "reward" in r][-1]  # --logging_steps 5 (default): the last step's log
    assert last["step"] == 3
    if kind == "moe":
        assert last["aux_loss"] > 0  # the router's load-balancing loss, weighted by the config's 0.001
    else:
        assert "aux_loss" not in last
    saved = json.loads((out / "processor_config.json").read_text())  # the final model's processor, stock class named
    assert saved["processor_class"] == "Qwen3VLProcessor" and saved["image_processor"]["patch_size"] == 16
    assert (out / "model.safetensors").is_file()


def _exact_flags(model, out, steps: int) -> list:
    """Every sample page (data order matters), the edit-distance reward (a signal at every step), checkpoints
    every 2 steps, a constant learning rate (a 2-step run then schedules the same rates as a 4-step one)."""
    return [*tiny_run_flags(model, out, steps), "--pages", ".", "--reward_bench_edit_distance", 1.0,
            "--lr_schedule", "constant"]


COMPARED = ("reward", "loss", "grad_norm", "entropy", "learning_rate", "completions/mean_length", "aux_loss")


def test_moe_resumes_from_s3_exactly_then_soups_evaluates_and_reports(release_folder, moto_s3, tmp_path):
    model = release_folder("moe")
    # Run A: 4 steps, mirrored to S3 (checkpoints 2 and 4).
    save_uri = f"s3://{moto_s3.bucket}/runs/moe"
    common = ["--s3_save_path", save_uri, "--cache_dir", tmp_path / "cache", "--report_to", "none"]
    run_a = tmp_path / "a"
    a = run_cli([*_exact_flags(model, run_a, 4), *common], tmp_path)
    assert a.returncode == 0, failure(a)
    remote = remote_files(moto_s3, "runs/moe")
    assert {"checkpoint-2/model.safetensors", "checkpoint-4/optimizer.pt", "model.safetensors"} <= remote
    # As if the machine had been preempted before checkpoint-4 reached S3: a fresh machine (empty folder) then
    # resumes from S3's checkpoint-2 and trains steps 3-4 again.
    for name in remote:
        if name.startswith("checkpoint-4/"):
            moto_s3.client().delete_object(Bucket=moto_s3.bucket, Key=f"runs/moe/{name}")
    machine2 = tmp_path / "b"
    b2 = run_cli([*_exact_flags(model, machine2, 4), *common, "--resume_from_checkpoint"], tmp_path)
    assert b2.returncode == 0, failure(b2)
    log = b2.stdout + b2.stderr
    assert f"pulled {save_uri}/checkpoint-2/" in log
    assert f"loaded the model weights of {machine2 / 'checkpoint-2'} (every key)" in log
    steps_a = {r["step"]: r for r in read_metrics(run_a) if "reward" in r}
    steps_b = {r["step"]: r for r in read_metrics(machine2) if "reward" in r}
    assert training_steps(read_metrics(machine2)) == [1, 2, 3, 4]
    for step in (3, 4):
        assert {k: steps_b[step][k] for k in COMPARED} == {k: steps_a[step][k] for k in COMPARED}, step
    assert all(steps_a[s]["grad_norm"] > 0 for s in (3, 4))
    final_a, final_b = load_file(run_a / "model.safetensors"), load_file(machine2 / "model.safetensors")
    assert final_a.keys() == final_b.keys() and all((final_a[k] == final_b[k]).all() for k in final_a)
    key = "model.language_model.layers.0.mlp.experts.gate_up_proj"
    assert final_a[key].shape == (4, 128, 64)  # checkpoints keep the released expert layout

    # Soup of two checkpoints: the exact mean of every tensor, experts included; it loads and generates.
    soup = tmp_path / "soup"
    made = _run_module(tmp_path, "olmocr_rl.soup", run_a / "checkpoint-2", run_a / "checkpoint-4", soup)
    assert made.returncode == 0, made.stderr
    two, four, mean = (load_file(p / "model.safetensors") for p in (run_a / "checkpoint-2", run_a / "checkpoint-4", soup))
    assert not (two[key] == four[key]).all()
    assert all(((two[k].float() + four[k].float()) / 2 == mean[k]).all() for k in mean)

    # Evaluate the souped model on one page (bench scorer numbers), then the run's report.
    evaluated = _run_module(tmp_path, "olmocr_rl.evaluate", "--model", soup, "--bench", BENCH, "--pages",
                            "simple_lines", "--outputs", tmp_path / "eval", "--max_new_tokens", 16, "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    scores = json.loads(evaluated.stdout)
    assert scores["pages"] == ["simple_lines.pdf:1"] and 0 <= scores["overall_pass_rate"] <= 1
    assert list((tmp_path / "eval").rglob("simple_lines_pg1_repeat1.md"))
    reported = _run_module(tmp_path, "olmocr_rl.report", run_a)
    assert reported.returncode == 0, reported.stderr
    assert (run_a / "report" / "report.md").is_file() or list(run_a.rglob("report.md"))


def _run_module(tmp_path, module: str, *args) -> subprocess.CompletedProcess:
    return warm_python.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO, env=cli_env(tmp_path),
                          capture_output=True, text=True, timeout=300)


def test_qwen2_vl_trains_through_the_cli(tiny_family_dir, tmp_path):
    out = tmp_path / "out"
    result = run_cli([*tiny_run_flags(tiny_family_dir("qwen2_vl"), out, 2), "--report_to", "none"], tmp_path)
    assert result.returncode == 0, failure(result)
    assert "vision tower: each distinct page encoded once per forward" in result.stderr
    assert training_steps(read_metrics(out)) == [1, 2]
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen2_vl"
