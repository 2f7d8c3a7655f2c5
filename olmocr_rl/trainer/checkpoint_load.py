"""Checkpoint loading that a resumed run needs beyond TRL's own.

The trainer (``trainer/plain.py``) routes the Trainer's ``_load_from_checkpoint`` and
``_load_optimizer_and_scheduler`` through the two functions below, so a trainer built directly (not through
grpo_train) resumes correctly too.

- :func:`load_checkpoint_weights`: the Trainer's ``_load_from_checkpoint`` reads ``model.safetensors``
  with ``load_state_dict``, but ``save_pretrained`` writes Qwen2.5-VL in its released key layout
  (``visual.*``, ``model.layers.*``) while the live model is ``model.visual.*``,
  ``model.language_model.*``, so every key would miss and a resume would go on from the *initial* weights
  (with the checkpoint's optimizer state). The replacement loads the checkpoint as a model folder
  (``from_pretrained`` applies the key conversion) and copies its weights in, refusing any mismatch.
  DeepSpeed and FSDP checkpoints (their own, live-layout files) keep the Trainer's path. LoRA checkpoints
  (``--use_peft``: the adapter only) keep it too, after the checks of
  :func:`olmocr_rl.trainer.adapter_checkpoint.load_adapter_checkpoint`.
- :func:`load_optimizer_and_scheduler`: with several CPU processes the Trainer's map_location ``cpu:0`` is not
  one torch.load can restore ``optimizer.pt`` to; within that one call, on that thread,
  torch is taught to restore ``cpu:N`` (:func:`indexed_cpu_loads`; ``torch.load`` is not replaced). A
  checkpoint without ``scheduler.pt`` or ``optimizer.pt`` (resumed only with ``--allow_partial_resume``) gets
  its learning-rate schedule moved on to the checkpoint's step (from ``scheduler.pt`` when it is there), where
  the Trainer would restart it at step 0 (warmup again).

A checkpoint of the earlier active-sampling design keeps a page position (``ActiveSamplingPosition``) that
refills no longer use: the resume says so in one warning line (:func:`note_old_active_sampling_position`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

logger = logging.getLogger(__name__)

_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def _plain_hf_checkpoint(trainer, checkpoint: str) -> bool:
    """A ``save_pretrained`` folder the Trainer would read with ``load_state_dict`` (no engine of its own)."""
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return False
    return any(os.path.isfile(os.path.join(checkpoint, name)) for name in _HF_WEIGHTS)


def note_old_active_sampling_position(checkpoint: str) -> bool:
    """One warning line (main process) when ``checkpoint`` holds the page position of the earlier active-sampling
    design, which is not used: refills come from a sampler seeded by (seed, step, round) (docs/olmorl.md)."""
    import json

    from olmocr_rl.ranks import is_main_process

    try:
        state = json.loads(open(os.path.join(checkpoint, "trainer_state.json")).read())
    except (OSError, ValueError):
        return False
    callbacks = state.get("stateful_callbacks") if isinstance(state, dict) else None
    if not isinstance(callbacks, dict) or "ActiveSamplingPosition" not in callbacks:
        return False
    if is_main_process():
        logger.warning("%s holds the page position of the earlier active-sampling design (ActiveSamplingPosition): "
                       "ignored, the run resumes at the Trainer's step and refill pages are drawn per step "
                       "(docs/olmorl.md)", checkpoint)
    return True


def load_checkpoint_weights(trainer, checkpoint: str, model=None, original=None) -> None:
    """Load a ``save_pretrained`` checkpoint's weights into the trainer's model, every key or an error.

    ``original(checkpoint, model)`` (the parent class's load) handles DeepSpeed and FSDP checkpoints."""
    import torch

    model = trainer.model if model is None else model
    note_old_active_sampling_position(checkpoint)
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
    ... cpu:0"): a multi-process CPU run could not resume at all. Within this one call, and on this thread
    only, :func:`indexed_cpu_loads` lets torch restore ``cpu:N`` as the CPU; ``torch.load`` itself is never
    replaced, and every other load (another thread's, a later one) is torch's own.
    """
    device = getattr(trainer.args, "device", None)
    indexed = not (checkpoint is None or getattr(device, "type", None) != "cpu" or getattr(device, "index", None) is None)
    try:
        with indexed_cpu_loads() if indexed else contextlib.nullcontext():
            original(checkpoint)
    except ValueError as exc:
        if "parameter group" not in str(exc):  # torch's two messages for another set of trained parameters
            raise
        from olmocr_rl.storage import CheckpointMismatchError

        raise CheckpointMismatchError(
            f"{checkpoint}: its optimizer state is for another set of trained parameters (torch: {exc}); it was "
            "saved with other --use_peft / --lora_* / --freeze_vision_tower / --freeze_vision_merger settings: resume "
            "with the ones it was saved with, or start a new run in another --output_dir") from None
    _advance_schedule(trainer, checkpoint)
    if checkpoint is not None and getattr(trainer, "apply_learning_rate_on_resume", False):
        _apply_learning_rate(trainer)
    return None


def _apply_learning_rate(trainer) -> None:
    """--apply_learning_rate_on_resume: the schedule goes on from its position with this run's learning rate as its
    peak (the checkpoint's state held the one it was saved with); the groups' ratios are kept."""
    scheduler = getattr(trainer, "lr_scheduler", None)
    if scheduler is None or not getattr(scheduler, "base_lrs", None) or not scheduler.base_lrs[0]:
        return
    scale = trainer.args.learning_rate / scheduler.base_lrs[0]
    state = scheduler.state_dict()  # its last rate is what the Trainer logs for the coming step
    state["base_lrs"] = [base * scale for base in scheduler.base_lrs]
    state["_last_lr"] = [rate * scale for rate in scheduler.get_last_lr()]
    scheduler.load_state_dict(state)
    for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs):
        group["initial_lr"] = base
        group["lr"] = group["lr"] * scale
    logger.info("--apply_learning_rate_on_resume: learning rate %.3g from here on the schedule (lr %.3g now)",
                trainer.args.learning_rate, scheduler.optimizer.param_groups[0]["lr"])


def _advance_schedule(trainer, checkpoint: str | None) -> None:
    """The Trainer restores the schedule only with the optimizer's state (both files, or neither): without
    scheduler.pt the fresh schedule is stepped to the checkpoint's step (it is a function of the step alone);
    with scheduler.pt but no optimizer state it is loaded from scheduler.pt. Either way the learning rate goes
    on where it was instead of starting over."""
    import json
    import warnings

    scheduler = getattr(trainer, "lr_scheduler", None)
    if checkpoint is None or scheduler is None:
        return
    has_schedule = os.path.isfile(os.path.join(checkpoint, "scheduler.pt"))
    if has_schedule and _has_optimizer_state(trainer, checkpoint):
        return  # the Trainer loaded both
    if has_schedule:
        import torch

        scheduler.load_state_dict(torch.load(os.path.join(checkpoint, "scheduler.pt"), weights_only=True))
        logger.warning("%s has no optimizer state: the learning-rate schedule was restored from its scheduler.pt "
                       "(lr %.3g)", checkpoint, scheduler.get_last_lr()[0])
        return
    try:
        with open(os.path.join(checkpoint, "trainer_state.json")) as handle:
            step = int(json.load(handle)["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "lr_scheduler.step() before optimizer.step()": on purpose here
        for _ in range(step):
            scheduler.step()
    logger.warning("%s has no scheduler.pt: the learning-rate schedule was moved on to step %d (lr %.3g)",
                   checkpoint, step, scheduler.get_last_lr()[0])


def _has_optimizer_state(trainer, checkpoint: str) -> bool:
    """Whether the Trainer found optimizer state to load (an engine's own layout counts as found)."""
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return True
    return any(os.path.isfile(os.path.join(checkpoint, name)) for name in ("optimizer.pt", "optimizer.bin"))


_INDEXED_CPU = threading.local()  # .depth > 0 inside indexed_cpu_loads() on this thread
_REGISTERED: list[bool] = []
_PRIORITY = 97  # after torch's own packages (cpu 10, cuda 20, ...); a deserializer only, never a tagger


def _restore_indexed_cpu(storage, location: str):
    """torch's deserializer for ``cpu:N``: the CPU, inside :func:`indexed_cpu_loads` only (else None: torch's
    own error stands)."""
    if getattr(_INDEXED_CPU, "depth", 0) > 0 and location.startswith("cpu:") and location[4:].isdigit():
        return storage  # read onto the CPU already
    return None


@contextlib.contextmanager
def indexed_cpu_loads():
    """On this thread, for the duration of the block, ``torch.load(..., map_location=torch.device("cpu", N))``
    restores to the CPU. Registered with torch once (``torch.serialization.register_package``, a deserializer that
    answers only inside this block); nothing of torch's is replaced."""
    import torch

    if not _REGISTERED:
        torch.serialization.register_package(_PRIORITY, lambda storage: None, _restore_indexed_cpu)
        _REGISTERED.append(True)
    _INDEXED_CPU.depth = getattr(_INDEXED_CPU, "depth", 0) + 1
    try:
        yield
    finally:
        _INDEXED_CPU.depth -= 1
