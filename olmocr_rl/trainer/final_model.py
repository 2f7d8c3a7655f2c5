"""The run's final model: saved at the end of training, or written from the last checkpoint when that save never
finished (docs/storage.md, "The final model").

- :func:`save_final`: the model (or a LoRA run's adapter, merged with ``--save_merged``) and the processor in
  ``--output_dir``; a save the disk refuses is :class:`FinalSaveError`, one line with the sizes and the free space,
  and the half-written weights are removed;
- :func:`write_from_checkpoint`: a requeued run whose last checkpoint is its last step but whose final model is
  missing or incomplete (a full disk at the final save, a kill between the last checkpoint and it) gets it from
  that checkpoint: a ``save_pretrained`` checkpoint holds the same files the final save writes (model, config,
  processor, training arguments), byte for byte, so they are copied, with no model loaded (a LoRA run's merged
  model is merged again from the adapter).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

from olmocr_rl.ranks import is_main_process
from olmocr_rl.storage import StorageError, has_model_weights, write_json_atomic
from olmocr_rl.storage.verify import format_problem

logger = logging.getLogger(__name__)

__all__ = ["FinalSaveError", "save_final", "write_from_checkpoint", "write_summary"]

#: A checkpoint's files that are training state, not part of the model the run leaves behind.
_STATE_FILES = ("trainer_state.json", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt",
                "olmocr_rl_flags.json")


class FinalSaveError(StorageError):
    """The final model could not be written; the message is the whole line (what, why, what to do)."""


def _is_state(name: str) -> bool:
    return name in _STATE_FILES or (name.startswith("rng_state") and name.endswith(".pth"))


def _model_files(checkpoint: Path) -> list[Path]:
    """The files of ``checkpoint`` the final save also writes (its top level, training state left out)."""
    return sorted(p for p in checkpoint.iterdir() if p.is_file() and not _is_state(p.name))


def _bytes(paths) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def _failure_line(exc: BaseException, output_dir: Path, step: int, needed: int | None) -> str | None:
    """The one line for a final save the disk refused (None: not the disk's doing, a bug); half-written weights at
    the top of ``output_dir`` are removed (they free room, and a requeue must not take them for whole)."""
    from olmocr_rl.storage import describe_write_failure

    reason = describe_write_failure(exc, output_dir / "model.safetensors", needed)
    if reason is None:
        return None
    for path in output_dir.glob("*.safetensors"):
        if format_problem(path, path.name):
            path.unlink(missing_ok=True)
    checkpoint = output_dir / f"checkpoint-{step}"
    stands = (f"{checkpoint.name} is whole: make room (or point --output_dir at a disk with room) and rerun with "
              "--resume_from_checkpoint, which writes the final model from it" if checkpoint.is_dir() else
              "the checkpoints are intact: make room and rerun with --resume_from_checkpoint")
    return f"saving the final model in {output_dir} failed: {reason}; {stands}"


def save_final(cfg, trainer, processor) -> None:
    """The final model and processor in ``cfg.output_dir`` (a LoRA run's adapter: :func:`_save_adapter_run`);
    FinalSaveError in one line when the disk refuses it (anything else is raised as it was: a bug)."""
    output_dir = Path(cfg.output_dir)
    step = trainer.state.global_step
    try:
        if cfg.use_peft:
            _save_adapter_run(cfg, trainer, processor)
        else:
            trainer.save_model(cfg.output_dir)
            if is_main_process(trainer.state):  # the processor beside the final model, whatever the Trainer saved
                processor.save_pretrained(cfg.output_dir)
    except Exception as exc:  # OSError, torch's bare RuntimeError, safetensors' SafetensorError (not an OSError)
        checkpoint = output_dir / f"checkpoint-{step}"
        needed = _bytes(_model_files(checkpoint)) if checkpoint.is_dir() else None
        line = _failure_line(exc, output_dir, step, needed)
        if line is None:
            raise
        raise FinalSaveError(line) from exc


def _save_adapter_run(cfg, trainer, processor) -> None:
    """A LoRA run's final output: the adapter in OUTPUT_DIR/adapter/ and, merged onto a fresh copy of the base
    model, the full model at the root (--save_merged); or the adapter alone at the root."""
    from olmocr_rl.model.adapters import ADAPTER_DIR, portable_model_name, set_adapter_base_name, write_merged

    adapter_dir = Path(cfg.output_dir) / ADAPTER_DIR if cfg.save_merged else Path(cfg.output_dir)
    trainer.save_model(str(adapter_dir))
    if not is_main_process(trainer.state):
        return
    processor.save_pretrained(adapter_dir)
    set_adapter_base_name(adapter_dir, portable_model_name(cfg.model_name))  # where soup and evaluate find it
    if cfg.save_merged:
        with _outside_zero3_init(trainer):  # the main process alone loads the base: no collective may run
            write_merged(adapter_dir, cfg.output_dir, cache_dir=cfg.cache_dir)
        logger.info("LoRA: adapter in %s, merged model in %s", adapter_dir, cfg.output_dir)


@contextlib.contextmanager
def _outside_zero3_init(trainer):
    """Under ZeRO-3, transformers builds every ``from_pretrained`` model inside ``deepspeed.zero.Init``, which
    partitions it over all processes with a broadcast; a load on the main process alone would wait for the others
    forever (or fail once they exit). Here the run's DeepSpeed config is set aside for the block, then restored."""
    from transformers.integrations import deepspeed as hf_deepspeed

    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    # the config object transformers consults: accelerate's (launched with a DeepSpeed config) or the Trainer's
    config = getattr(plugin, "dschf", None) or getattr(trainer.args, "hf_deepspeed_config", None)
    if config is None or not hf_deepspeed.is_deepspeed_zero3_enabled():
        yield
        return
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed.set_hf_deepspeed_config(config)


def write_summary(output_dir: str | os.PathLike, step: int) -> None:
    """``run_summary.json``, the final model's last file: a run whose summary is there finished its final save."""
    summary = {"global_step": step, "output_dir": str(Path(output_dir).resolve()),
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json_atomic(Path(output_dir) / "run_summary.json", summary, indent=2)


def write_from_checkpoint(cfg, checkpoint: str | os.PathLike, step: int) -> list[str]:
    """The final model of a run that trained to its last step, from that step's ``checkpoint``, in
    ``cfg.output_dir`` (global main process), then its summary; the names written. FinalSaveError in one line when
    the checkpoint's weights are in an engine's own layout (DeepSpeed, FSDP) or the disk refuses them."""
    from olmocr_rl.model.adapters import ADAPTER_DIR

    source, output_dir = Path(checkpoint), Path(cfg.output_dir)
    files = _model_files(source)
    if not has_model_weights(p.name for p in files):
        raise FinalSaveError(
            f"the final model of {output_dir} cannot be written from {source}: its weights are in a sharded "
            "engine's own layout (DeepSpeed, FSDP), which only that engine reads: rerun with --resume_from_checkpoint "
            "PATH of the checkpoint before it, which trains the last steps again and saves the final model")
    target = output_dir / ADAPTER_DIR if cfg.use_peft and cfg.save_merged else output_dir
    try:
        target.mkdir(parents=True, exist_ok=True)
        for path in files:  # under a temporary name, then renamed: a copy cut short is never taken for the file
            partial = target / f".{path.name}.partial"
            shutil.copyfile(path, partial)
            os.replace(partial, target / path.name)
        if cfg.use_peft:
            _finish_adapter(cfg, target)
        write_summary(output_dir, step)
    except Exception as exc:
        for partial in target.glob(".*.partial"):
            partial.unlink(missing_ok=True)
        line = _failure_line(exc, output_dir, step, _bytes(files))
        if line is None:
            raise
        raise FinalSaveError(line) from exc
    return [path.name for path in files] + ["run_summary.json"]


def _finish_adapter(cfg, adapter_dir: Path) -> None:
    from olmocr_rl.model.adapters import portable_model_name, set_adapter_base_name, write_merged

    set_adapter_base_name(adapter_dir, portable_model_name(cfg.model_name))
    if cfg.save_merged:
        write_merged(adapter_dir, cfg.output_dir, cache_dir=cfg.cache_dir)
