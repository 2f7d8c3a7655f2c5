"""Checkpoint loading that a resumed run needs beyond TRL's own.

:class:`CheckpointLoadMixin` (in the bases of both trainers, before ``GRPOTrainer``) routes the Trainer's
``_load_from_checkpoint`` and ``_load_optimizer_and_scheduler`` through the two functions below, so a
trainer built directly (not through grpo_train) resumes correctly too.

- :func:`load_checkpoint_weights`: the Trainer's ``_load_from_checkpoint`` reads ``model.safetensors``
  with ``load_state_dict``, but ``save_pretrained`` writes Qwen2.5-VL in its released key layout
  (``visual.*``, ``model.layers.*``) while the live model is ``model.visual.*``,
  ``model.language_model.*``: every key missed and a resumed run went on from the *initial* weights
  (with the checkpoint's optimizer state). The replacement loads the checkpoint as a model folder
  (``from_pretrained`` applies the key conversion) and copies its weights in, refusing any mismatch.
  DeepSpeed and FSDP checkpoints (their own, live-layout files) keep the Trainer's path. LoRA checkpoints
  (``--use_peft``: the adapter only) keep it too, after the checks of
  :func:`olmocr_rl.trainer.adapter_checkpoint.load_adapter_checkpoint`.
- :func:`load_optimizer_and_scheduler`: several CPU processes could not load ``optimizer.pt`` (the
  Trainer's map_location ``cpu:0`` is not one torch.load can restore to).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def _plain_hf_checkpoint(trainer, checkpoint: str) -> bool:
    """A ``save_pretrained`` folder the Trainer would read with ``load_state_dict`` (no engine of its own)."""
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return False
    return any(os.path.isfile(os.path.join(checkpoint, name)) for name in _HF_WEIGHTS)


def load_checkpoint_weights(trainer, checkpoint: str, model=None, original=None) -> None:
    """Load a ``save_pretrained`` checkpoint's weights into the trainer's model, every key or an error.

    ``original(checkpoint, model)`` (the parent class's load) handles DeepSpeed and FSDP checkpoints."""
    import torch

    model = trainer.model if model is None else model
    from olmocr_rl.trainer.adapter_checkpoint import load_adapter_checkpoint

    if load_adapter_checkpoint(trainer, checkpoint, model, original):  # a LoRA checkpoint, or a LoRA run
        return None
    if not _plain_hf_checkpoint(trainer, checkpoint):
        return original(checkpoint, model)
    from olmocr_rl.storage import CheckpointMismatchError

    first = next(iter(model.parameters()))
    saved = type(model).from_pretrained(checkpoint, dtype=first.dtype)
    state = saved.state_dict()
    fix = "resume with the --model_name the run started from, or start a new run in another --output_dir"
    with torch.no_grad():
        try:
            result = model.load_state_dict(state, strict=False)
        except RuntimeError as exc:  # a tensor of another shape
            size = next((line.strip() for line in str(exc).splitlines() if "size mismatch" in line), str(exc))
            raise CheckpointMismatchError(f"{checkpoint} does not fit the model ({size}); {fix}") from None
    del saved, state
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointMismatchError(f"{checkpoint} does not match the model: missing {result.missing_keys[:5]}, "
                                      f"unexpected {result.unexpected_keys[:5]}; {fix}")
    logger.info("loaded the model weights of %s (every key)", checkpoint)


def load_optimizer_and_scheduler(trainer, checkpoint: str | None, original) -> None:
    """``original(checkpoint)`` (the parent class's optimizer/scheduler load), with the CPU device made
    loadable for torch.load.

    Several processes on CPU have ``args.device`` ``cpu:0``, which the Trainer passes to ``torch.load``
    as map_location, and torch cannot restore storages there ("don't know how to restore data location
    ... cpu:0"): a multi-process CPU run could not resume at all. The load is unchanged otherwise.
    """
    import torch

    device = getattr(trainer.args, "device", None)
    if checkpoint is None or getattr(device, "type", None) != "cpu" or getattr(device, "index", None) is None:
        return original(checkpoint)
    real_load = torch.load

    def load(*args, **kwargs):
        location = kwargs.get("map_location")
        if isinstance(location, torch.device) and location.type == "cpu":
            kwargs["map_location"] = "cpu"
        return real_load(*args, **kwargs)

    torch.load = load
    try:
        return original(checkpoint)
    finally:
        torch.load = real_load


class CheckpointLoadMixin:
    """Put before ``GRPOTrainer`` in the bases: ``train(resume_from_checkpoint=...)`` loads the checkpoint's
    weights (whatever key layout they were saved in) and its optimizer state on any device."""

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        return load_checkpoint_weights(self, resume_from_checkpoint, model, super()._load_from_checkpoint)

    def _load_optimizer_and_scheduler(self, checkpoint):
        return load_optimizer_and_scheduler(self, checkpoint, super()._load_optimizer_and_scheduler)
