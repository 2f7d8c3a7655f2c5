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
