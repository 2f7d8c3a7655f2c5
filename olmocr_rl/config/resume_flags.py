"""A resume whose flags differ from the ones its checkpoint was saved with: one line per flag, said before the model
loads -- applied, kept from the checkpoint (and why), or refused.

Each checkpoint holds the flags of the run that saved it, ``checkpoint-N/olmocr_rl_flags.json``
(:data:`FLAGS_FILE`, written by trainer.checkpoint_save beside the weights). A resume compares this run's flags
with them (:func:`compare_with_checkpoint`):

* refused: what changes which parameters are trained (``--freeze_vision_tower``, ``--freeze_vision_merger`` of a
  full fine-tune; ``--lora_r``, ``--lora_alpha``, ``--lora_target_modules``, ``--lora_modules_to_save`` of a
  LoRA run): the optimizer's state would not fit them (``--use_peft`` itself is refused by
  trainer.adapter_checkpoint);
* kept from the checkpoint: ``--learning_rate`` (the schedule's state holds the rate it was saved with and
  wins, unless ``--apply_learning_rate_on_resume``); ``--seed`` is applied to the page order, while the random
  states of sampling are the checkpoint's;
* not compared: where the run reads and writes (folders, S3, logging, W&B) and the resume flags themselves;
* applied from the next step: every other flag (``--num_generations``, ``--temperature``, the rewards ...).

A checkpoint without the file (saved before it existed) is not compared.
"""

from __future__ import annotations

import json
from pathlib import Path

FLAGS_FILE = "olmocr_rl_flags.json"

FROZEN = ("freeze_vision_tower", "freeze_vision_merger")  # what a full fine-tune trains
ADAPTED = ("lora_r", "lora_alpha", "lora_target_modules", "lora_modules_to_save")  # what a LoRA run trains
NOT_COMPARED = frozenset({
    "config", "output_dir", "cache_dir", "s3_save_path", "resume_from_checkpoint", "allow_partial_resume",
    "apply_learning_rate_on_resume", "overwrite_output_dir", "preempt_upload_timeout", "report_to", "wandb_project",
    "wandb_run_name", "log_completions", "num_completions_to_print", "log_multimodal", "logging_steps",
    "profile_step", "train_bench_data_folder", "eval_bench_data_folder", "model_name", "use_peft",
})


def saved_flags(flags) -> dict:
    """``cfg.flags`` as the JSON a checkpoint keeps (tuples become lists; anything else unusual becomes text)."""
    return json.loads(json.dumps(dict(flags), default=str))


def read_saved_flags(checkpoint: str | Path) -> dict | None:
    """The flags ``checkpoint`` was saved with, or None (no file: saved before it existed, or unreadable)."""
    try:
        saved = json.loads((Path(checkpoint) / FLAGS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def _show(value) -> str:
    return "unset" if value is None else ("on" if value is True else "off" if value is False else str(value))


def compare_with_checkpoint(flags, checkpoint: str | Path, step: int | None = None) -> tuple[list[str], str | None]:
    """``(lines, refusal)``: one line per flag that differs from the checkpoint's (see the module docstring), and
    the one refusal line (None when the resume may go on)."""
    saved = read_saved_flags(checkpoint)
    if saved is None:
        return [], None
    now = saved_flags(flags)
    at = f" from step {step + 1}" if step is not None else ""
    lines, refusal = [], None
    for name in sorted(set(now) & set(saved)):
        if name in NOT_COMPARED or now[name] == saved[name] or name in (FROZEN if now.get("use_peft") else ADAPTED):
            continue
        head = f"--{name} {_show(now[name])} (the checkpoint was saved with {_show(saved[name])})"
        if name in (ADAPTED if now.get("use_peft") else FROZEN):
            again = (f"--{name}" if saved[name] else f"--no-{name}") if isinstance(saved[name], bool) else \
                f"--{name} {_show(saved[name])}"
            refusal = refusal or (f"{head}: its optimizer state is for another set of trained parameters; resume "
                                  f"with {again}, or start a new run in another --output_dir")
        elif name == "learning_rate" and not now.get("apply_learning_rate_on_resume"):
            lines.append(f"{head}: kept at {_show(saved[name])}, since the checkpoint's learning-rate schedule "
                         "state holds it and wins; pass --apply_learning_rate_on_resume to train on with "
                         f"{_show(now[name])}")
        elif name == "learning_rate":
            lines.append(f"{head}: applied{at} (--apply_learning_rate_on_resume), on the schedule's position")
        elif name == "seed":
            lines.append(f"{head}: applied{at} to the order of the pages; the random states of sampling are the "
                         "checkpoint's (restored)")
        else:
            lines.append(f"{head}: applied{at}")
    return lines, refusal
