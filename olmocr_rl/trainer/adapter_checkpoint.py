"""Resuming a LoRA run (``--use_peft``): its checkpoints hold the adapter only (``adapter_model.safetensors``),
read back by the Trainer's own PEFT path (``PeftModel.load_adapter``) onto the base of ``--model_name``.

Before that path runs, :func:`load_adapter_checkpoint` refuses, with one line, what it would load wrongly or
fail on deep inside: a LoRA checkpoint into a full fine-tune or the reverse, and an adapter of another
shape (rank, alpha, target layers, modules trained in full) than the run's ``--lora_*`` flags give.
"""

from __future__ import annotations

import json
import logging
import os

from olmocr_rl.model.adapters import ADAPTER_CONFIG, is_peft_model

logger = logging.getLogger(__name__)

#: The adapter settings a checkpoint must share with the run to resume it.
_SHAPE = ("r", "lora_alpha", "target_modules", "modules_to_save", "use_dora", "use_rslora")
_FIX = "resume with the flags the run started with, or start a new run in another --output_dir"


def _saved_adapter(checkpoint: str) -> dict | None:
    path = os.path.join(checkpoint, ADAPTER_CONFIG)
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def _comparable(value):
    return sorted(value) if isinstance(value, (list, tuple, set)) else value


def kind_mismatch(checkpoint: str, use_peft: bool) -> str | None:
    """A LoRA checkpoint for a full fine-tune or the reverse, said in one line (checked before the model loads)."""
    saved = _saved_adapter(checkpoint) is not None
    if saved == use_peft:
        return None
    if use_peft:
        return f"{checkpoint} holds a full model and this run trains LoRA adapters (--use_peft); {_FIX}"
    return f"{checkpoint} holds a LoRA adapter and this run trains the full model (no --use_peft); {_FIX}"


def load_adapter_checkpoint(trainer, checkpoint: str, model, original) -> bool:
    """Handle ``checkpoint`` if it or the model is LoRA (True: done); False: not an adapter case at all.

    ``original(checkpoint, model)`` is the Trainer's own load, which reads the adapter."""
    from olmocr_rl.storage import CheckpointMismatchError

    saved = _saved_adapter(checkpoint)
    peft = is_peft_model(model)
    if saved is None and not peft:
        return False
    problem = kind_mismatch(checkpoint, peft)
    if problem:
        raise CheckpointMismatchError(problem)
    current = model.peft_config["default"].to_dict()
    for key in _SHAPE:
        if _comparable(saved.get(key)) != _comparable(current.get(key)):
            raise CheckpointMismatchError(f"{checkpoint}: its adapter has {key} {saved.get(key)!r}, this run "
                                          f"{current.get(key)!r}; {_FIX}")
    original(checkpoint, model)
    logger.info("loaded the LoRA adapter of %s", checkpoint)
    return True
