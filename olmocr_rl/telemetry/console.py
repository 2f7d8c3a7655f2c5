"""What a run prints: one compact row per logging step under the progress bar, tables now and then, little else.

- :func:`write` prints a line above the Trainer's progress bar (tqdm's ``write``), so rows and tables never land
  in the middle of the bar's line.
- :class:`ConsoleProgressCallback` is transformers' ``ProgressCallback`` (the bar) without its printing of the
  raw metrics dict at every log, unless ``raw_metrics`` (``--console_raw_metrics``); every key still reaches
  metrics.jsonl and W&B.
- :func:`filter_startup_noise` drops, once per process, start-up messages that carry nothing for the user:
  transformers' "The tokenizer has new PAD/BOS/EOS tokens ..." (logged when the Trainer aligns the model's
  special-token ids with its tokenizer, at every trainer construction; the alignment itself still happens).
"""

from __future__ import annotations

import logging

from tqdm.auto import tqdm
from transformers.trainer_callback import ProgressCallback

__all__ = ["ConsoleProgressCallback", "filter_startup_noise", "use_console_progress", "write"]

#: Start of each message :func:`filter_startup_noise` drops, with the logger that emits it.
NOISE = {"transformers.trainer_utils": ("The tokenizer has new PAD/BOS/EOS tokens",)}


def write(text: str) -> None:
    """Print ``text`` (one or more lines) above the progress bar, or plainly when there is none."""
    tqdm.write(text)


class ConsoleProgressCallback(ProgressCallback):
    """The progress bar; the raw metrics dict only with ``raw_metrics``."""

    def __init__(self, raw_metrics: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.raw_metrics = raw_metrics

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.raw_metrics:
            super().on_log(args, state, control, logs=logs, **kwargs)


def use_console_progress(trainer, raw_metrics: bool) -> None:
    """Replace the trainer's ``ProgressCallback`` (if it shows one) by :class:`ConsoleProgressCallback` in place."""
    callbacks = trainer.callback_handler.callbacks
    for index, callback in enumerate(callbacks):
        if type(callback) is ProgressCallback:
            callbacks[index] = ConsoleProgressCallback(raw_metrics=raw_metrics, max_str_len=callback.max_str_len)


class _DropMessages(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def filter_startup_noise() -> None:
    """Install the filters of ``NOISE`` (idempotent)."""
    for name, starts in NOISE.items():
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in target.filters):
            target.addFilter(_DropMessages(starts))
