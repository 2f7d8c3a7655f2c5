"""python -m olmocr_rl.gpu_check on CPU: the arms train and the table has the MFU columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_on_cpu_reports_the_mfu_columns(tmp_path):
    out = tmp_path / "gpu_check.json"
    result = subprocess.run(
        [sys.executable, "-m", "olmocr_rl.gpu_check", "--steps", "2", "--arms", "grpo,lora", "--work_dir", str(tmp_path),
         "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    table = json.loads(out.read_text())
    row = table["rows"][0]
    assert table["backend"] in ("hf-generate", "vllm-colocate") and row["steps_measured"] == 1
    assert row["model_flops"] > 0 and row["train_mfu"] >= row["mfu"] > 0
    assert row["mfu"] == pytest.approx(row["model_flops"] / row["step_s"] / table["peak_flops"])
    assert row["train_mfu"] == pytest.approx(row["model_flops"] / row["train_s"] / table["peak_flops"])
    for column in ("mfu_6n", "mfu", "train_mfu"):
        assert column in result.stdout
    lora = table["rows"][1]
    assert lora["arm"] == "lora" and lora["steps_measured"] == 1 and lora["train_s"] > 0
    assert "LoRA: adapters on 14 layers of the language model" in result.stderr


@pytest.mark.slow
def test_gpu_check_on_cpu_builds_and_measures_another_family(tmp_path):
    """--family qwen3_vl_moe: the tiny MoE preset, its FLOPs counted with the routed experts only."""
    out = tmp_path / "gpu_check.json"
    result = subprocess.run(
        [sys.executable, "-m", "olmocr_rl.gpu_check", "--family", "qwen3_vl_moe", "--steps", "2", "--arms", "grpo",
         "--work_dir", str(tmp_path), "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    table = json.loads(out.read_text())
    assert (table["family"], table["shape"]) == ("qwen3_vl_moe", "tiny")
    assert "model Qwen3-VL-MoE tiny" in result.stdout
    assert table["rows"][0]["model_flops"] > 0
    assert json.loads((tmp_path / "model-qwen3_vl_moe-tiny" / "config.json").read_text())["model_type"] == "qwen3_vl_moe"


def test_gpu_check_refuses_a_shape_the_family_lacks(tmp_path):
    result = subprocess.run([sys.executable, "-m", "olmocr_rl.gpu_check", "--family", "qwen3_vl", "--shape", "7b",
                             "--work_dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "error: --shape 7b: Qwen3-VL has tiny, 2b, 4b, 8b"
    assert not list(tmp_path.glob("model-*"))
