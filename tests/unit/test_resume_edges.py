"""Resumes that used to go on silently wrong: a partial checkpoint's learning-rate schedule, flags that differ from
the checkpoint's, a frozen-tower mismatch; on a real transformers.Trainer with the checkpoint mixin, or through
the CLI's checks in-process (nothing here loads a model)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from olmocr_rl.trainer.checkpoint_load import CheckpointLoadMixin


def line_trainer(output_dir: Path, max_steps: int = 8):
    """A real Trainer (with the checkpoint mixin's optimizer and schedule load) on a 3-parameter regression: warmup 3 steps then a linear decay,
    a checkpoint at every step."""
    import torch
    from transformers import Trainer, TrainingArguments

    class Line(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, x, y):
            return {"loss": ((self.linear(x).squeeze(-1) - y) ** 2).mean()}

    class LineTrainer(CheckpointLoadMixin, Trainer):
        def _load_from_checkpoint(self, checkpoint, model=None):  # a plain module: the Trainer's own weights load
            return Trainer._load_from_checkpoint(self, checkpoint, model)

    torch.manual_seed(0)
    data = [{"x": torch.randn(2), "y": torch.randn(())} for _ in range(32)]
    args = TrainingArguments(output_dir=str(output_dir), max_steps=max_steps, save_steps=1, learning_rate=0.1,
                             warmup_steps=3, lr_scheduler_type="linear", per_device_train_batch_size=2,
                             report_to=[], use_cpu=True, disable_tqdm=True, logging_steps=1,
                             dataloader_num_workers=0)
    return LineTrainer(model=Line(), args=args, train_dataset=data)


def learning_rates(trainer) -> dict[int, float]:
    return {h["step"]: h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h}


@pytest.mark.parametrize("missing", [("optimizer.pt",), ("scheduler.pt",), ("optimizer.pt", "scheduler.pt")])
def test_a_partial_resume_goes_on_with_the_uninterrupted_runs_learning_rate(tmp_path, missing):
    whole = line_trainer(tmp_path / "whole")
    whole.train()
    expected = learning_rates(whole)
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(tmp_path / "whole" / "checkpoint-4", resumed_dir / "checkpoint-4")
    for name in missing:
        (resumed_dir / "checkpoint-4" / name).unlink()
    resumed = line_trainer(resumed_dir)
    resumed.train(resume_from_checkpoint=str(resumed_dir / "checkpoint-4"))
    got = {step: lr for step, lr in learning_rates(resumed).items() if step > 4}  # 1-4: the checkpoint's history
    assert sorted(got) == [5, 6, 7, 8]
    assert got == pytest.approx({step: expected[step] for step in got}, rel=1e-9)
    assert got[5] < expected[4]  # past the warmup's peak (step 3): not restarted at 0
