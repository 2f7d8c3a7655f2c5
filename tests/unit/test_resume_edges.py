"""Resumes that used to go on silently wrong: a partial checkpoint's learning-rate schedule, flags that differ from
the checkpoint's, a frozen-tower mismatch; on a real transformers.Trainer with the trainer class's checkpoint functions, or through
the CLI's checks in-process (nothing here loads a model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fault_helpers import real_checkpoint
from test_fault_handling import SINGLE
from test_s3_only_copy import cli

from olmocr_rl import grpo_train
from olmocr_rl.config import parse_args, validate
from olmocr_rl.config.resume_flags import FLAGS_FILE, saved_flags
from olmocr_rl.storage import verify
from olmocr_rl.storage.verify import manifest_name

from olmocr_rl.trainer.checkpoint_load import load_optimizer_and_scheduler
from olmocr_rl.trainer.checkpoint_save import save_checkpoint


def line_trainer(output_dir: Path, max_steps: int = 8, learning_rate: float = 0.1):
    """A real Trainer (with the trainer class's optimizer and schedule load) on a 3-parameter regression: warmup 3 steps then a linear decay,
    a checkpoint at every step."""
    import torch
    from transformers import Trainer, TrainingArguments

    class Line(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, x, y):
            return {"loss": ((self.linear(x).squeeze(-1) - y) ** 2).mean()}

    class LineTrainer(Trainer):  # the trainer class's checkpoint overrides (a plain module: the Trainer's weights load)
        def _load_optimizer_and_scheduler(self, checkpoint):
            return load_optimizer_and_scheduler(self, checkpoint, super()._load_optimizer_and_scheduler)

        def _save_checkpoint(self, model, trial):
            return save_checkpoint(self, model, trial, super()._save_checkpoint)

    torch.manual_seed(0)
    data = [{"x": torch.randn(2), "y": torch.randn(())} for _ in range(32)]
    args = TrainingArguments(output_dir=str(output_dir), max_steps=max_steps, save_steps=1, learning_rate=learning_rate,
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


@pytest.mark.parametrize("apply", [False, True])
def test_a_new_learning_rate_on_resume_is_kept_from_the_schedule_unless_asked_for(tmp_path, apply):
    whole = line_trainer(tmp_path / "whole")
    whole.olmocr_rl_flags = {"learning_rate": 0.1}  # what grpo_train's trainers carry: every flag
    whole.train()
    expected = learning_rates(whole)
    saved = tmp_path / "whole" / "checkpoint-4"
    assert json.loads((saved / FLAGS_FILE).read_text()) == {"learning_rate": 0.1}
    assert FLAGS_FILE in json.loads((saved / manifest_name(0)).read_text())["files"]  # verified with the rest
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(saved, resumed_dir / "checkpoint-4")
    resumed = line_trainer(resumed_dir, learning_rate=0.3)
    resumed.apply_learning_rate_on_resume = apply
    resumed.train(resume_from_checkpoint=str(resumed_dir / "checkpoint-4"))
    got = {step: lr for step, lr in learning_rates(resumed).items() if step > 4}
    scale = 3.0 if apply else 1.0  # the same place on the schedule, with the new peak or the checkpoint's
    assert got == pytest.approx({step: expected[step] * scale for step in got}, rel=1e-9) and len(got) == 4


def saved_with(out: Path, *flags) -> Path:
    """checkpoint-4 of a run started with ``cli(out, *flags)``: its files, the flags it was saved with, its manifest."""
    folder = real_checkpoint(out, 4)
    (folder / FLAGS_FILE).write_text(json.dumps(saved_flags(validate(parse_args(cli(out, *flags))).flags)))
    verify.write_manifest(folder, SINGLE)
    return folder


def errors(capsys) -> tuple[list[str], str]:
    err = capsys.readouterr().err
    return [line for line in err.splitlines() if line.startswith("error:")], err


def test_each_flag_that_differs_from_the_checkpoints_is_one_line_at_resume_before_the_model_loads(tmp_path, capsys):
    out = tmp_path / "out"
    saved_with(out)
    changed = ("--learning_rate", "3e-6", "--num_generations", 8, "--seed", 7)
    assert grpo_train.main(cli(out, "--resume_from_checkpoint", *changed)) == 1
    lines, log = errors(capsys)
    said = [line.split("resuming with ", 1)[1] for line in log.splitlines() if "resuming with --" in line]
    assert said == [
        "--learning_rate 3e-06 (the checkpoint was saved with 0.0002): kept at 0.0002, since the checkpoint's "
        "learning-rate schedule state holds it and wins; pass --apply_learning_rate_on_resume to train on with 3e-06",
        "--num_generations 8 (the checkpoint was saved with 16): applied from step 5",
        "--seed 7 (the checkpoint was saved with 0): applied from step 5 to the order of the pages; the random "
        "states of sampling are the checkpoint's (restored)"]
    assert len(lines) == 1 and "model" in lines[0]  # then the (missing) model: the lines came before it loads
    assert grpo_train.main(cli(out, "--resume_from_checkpoint", "--learning_rate", "3e-6",
                               "--apply_learning_rate_on_resume")) == 1
    assert "--learning_rate 3e-06 (the checkpoint was saved with 0.0002): applied from step 5 " \
           "(--apply_learning_rate_on_resume), on the schedule's position" in capsys.readouterr().err


def test_a_frozen_tower_resumed_without_the_flag_is_refused_before_the_model_loads(tmp_path, capsys):
    out = tmp_path / "out"
    saved_with(out, "--freeze_vision_tower")
    assert grpo_train.main(cli(out, "--resume_from_checkpoint")) == 1
    lines, _log = errors(capsys)
    assert lines == [f"error: --resume_from_checkpoint: {out / 'checkpoint-4'}: --freeze_vision_tower off (the "
                     "checkpoint was saved with on): its optimizer state is for another set of trained parameters; "
                     "resume with --freeze_vision_tower, or start a new run in another --output_dir"]
