"""Checkpoint saving that a run needs beyond TRL's own: whole files, a manifest written last, one line for a full disk.

The trainer (``trainer/plain.py``) routes the Trainer's ``_save_checkpoint`` through :func:`save_checkpoint`:

- ``trainer_state.json`` is written whole or not at all (a temporary name, then a rename; transformers writes
  it in place);
- once every rank's files are written (a barrier), each machine's main process writes the run's flags
  (``olmocr_rl_flags.json``: a resume compares its own with them, config.resume_flags) and the checkpoint's node
  manifest (storage.verify: every file, its size and checksum), the last file of the checkpoint: a resume
  takes only a checkpoint whose files agree with it;
- an ``OSError`` of the disk (full, read-only, not writable; torch's writer reports a full disk as a bare
  ``RuntimeError``) becomes :class:`CheckpointSaveError`, one line naming the folder and the bytes needed;
  the half-written folder is removed, and the checkpoints before it are left as they were (the Trainer
  rotates old checkpoints only after a save succeeded).

docs/storage.md ("Verified checkpoints", "The output folder") has the whole picture.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from olmocr_rl.ranks import barrier, is_local_main_process, is_main_process
from olmocr_rl.storage import StorageError, current_topology, describe_write_failure
from olmocr_rl.storage.checkpoints import local_checkpoints
from olmocr_rl.storage.s3 import PARTIAL_SUFFIX
from olmocr_rl.storage.verify import write_manifest

logger = logging.getLogger(__name__)

__all__ = ["CheckpointSaveError", "atomic_state_json", "checkpoint_size_estimate",
           "save_checkpoint"]


class CheckpointSaveError(StorageError):
    """A checkpoint could not be written for a reason of the disk; the message (one line) says which and what to do."""


@contextlib.contextmanager
def atomic_state_json(state):
    """While active, ``state.save_to_json(path)`` writes a temporary file beside ``path`` and renames it."""
    original = type(state).save_to_json

    def save_to_json(json_path: str) -> None:
        partial = f"{json_path}{PARTIAL_SUFFIX}"
        try:
            original(state, partial)
            os.replace(partial, json_path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)

    state.save_to_json = save_to_json  # an instance attribute: dataclasses.asdict(state) sees only the fields
    try:
        yield
    finally:
        vars(state).pop("save_to_json", None)


def checkpoint_size_estimate(trainer, failed: Path) -> int:
    """Bytes a checkpoint takes: the newest other checkpoint's size, else the weights plus the optimizer's state."""
    for _step, path in local_checkpoints(failed.parent):
        if path != failed:
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    import torch

    total = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
    optimizer = getattr(trainer, "optimizer", None)
    for values in getattr(optimizer, "state", {}).values():
        total += sum(v.numel() * v.element_size() for v in values.values() if isinstance(v, torch.Tensor))
    return total


def save_checkpoint(trainer, model, trial, original) -> None:
    """``original(model, trial)`` (the parent class's save) with whole state files, the node manifest last, and one
    line (CheckpointSaveError) when the disk is why the save failed."""
    folder = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"
    existed = folder.exists()
    try:
        with atomic_state_json(trainer.state):
            original(model, trial)
    except Exception as exc:
        line = describe_write_failure(exc, folder, checkpoint_size_estimate(trainer, folder))
        if line is None:
            raise
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        previous = [path.name for _step, path in local_checkpoints(folder.parent) if path != folder]
        kept = f"{previous[0]} is intact" if previous else "no earlier checkpoint exists"
        raise CheckpointSaveError(f"saving {folder} failed: {line}; {kept}: make room (or point --output_dir at a "
                                  "disk with room) and resume with --resume_from_checkpoint") from None
    barrier()  # every rank's files (RNG states, shards) are on disk before a manifest lists them
    if is_local_main_process(trainer.state) and folder.is_dir():
        try:
            _write_flags(trainer, folder)
            write_manifest(folder, current_topology())
        except OSError as exc:  # the checkpoint itself is whole; without a manifest its files' formats are checked
            logger.warning("no manifest for %s (%s): a resume checks its files' formats only", folder,
                           describe_write_failure(exc, folder / "olmocr_rl_manifest", None) or exc)


def _write_flags(trainer, folder: Path) -> None:
    """The run's flags beside the checkpoint (config.resume_flags compares a resume's with them), when it has them:
    by the global main process only (each machine's flags name its own --output_dir; one copy goes to S3)."""
    flags = getattr(trainer, "olmocr_rl_flags", None)
    if flags is not None and is_main_process(trainer.state):
        from olmocr_rl.config.resume_flags import FLAGS_FILE
        from olmocr_rl.storage import write_json_atomic

        write_json_atomic(folder / FLAGS_FILE, flags, indent=1)
