"""Per generation batch, how much of it vLLM's importance-sampling correction masked or truncated.

:class:`ImportanceSamplingTelemetry` (owned by the trainer, ``trainer/plain.py``) reads each batch TRL 1.16's
``GRPOTrainer._generate_and_score_completions`` returns: when TRL applied the correction (vLLM generation with
``vllm_importance_sampling_correction``), it reads the tensors TRL returned (``old_per_token_logps``,
``sampling_per_token_logps``, ``completion_mask`` x ``tool_mask``, ``importance_sampling_ratio``), gathers one row per
sequence from every process (:mod:`olmocr_rl.telemetry.importance_sampling`) and adds to TRL's metrics of the batch:

    sampling/is_masked_sequence_fraction   sequences masked or truncated (sequence modes); sequences with any
                                           masked or truncated token (token modes)
    sampling/is_masked_token_fraction      loss tokens whose weight the correction masked or truncated
    sampling/is_token_log_diff_mean        mean per-token (trainer - vLLM) log-prob, signed: the drift a
                                           sequence ratio multiplies by its length
    sampling/is_sequence_log_ratio/std|min|max  each sequence's log ratio before any bound

TRL averages them between logging steps like its own, so they reach metrics.jsonl, W&B and the console row. A
batch where the correction removed more than half the sequences (sequence modes) or tokens (token modes), or
scaled the median sequence towards 0, logs one warning naming what would keep them, at most every
``WARN_EVERY_STEPS`` steps (the count of batches in between is given). The batch itself is TRL's, untouched.
"""

from __future__ import annotations

import logging

from olmocr_rl.telemetry.importance_sampling import correction_warning, sequence_rows, summarize

__all__ = ["ImportanceSamplingTelemetry", "WARN_EVERY_STEPS"]

logger = logging.getLogger(__name__)

WARN_EVERY_STEPS = 10


class ImportanceSamplingTelemetry:
    """The IS metrics of each generation batch, and the warning's pacing; see the module docstring."""

    def __init__(self) -> None:
        self.last_warning_step: int | None = None
        self.warnings_held = 0

    def observe(self, trainer, output) -> None:
        """Add the batch's ``sampling/is_*`` metrics to TRL's when TRL applied the correction to it."""
        if trainer.use_vllm and trainer.vllm_importance_sampling_correction and "importance_sampling_ratio" in output:
            self.log(trainer, output)

    def log(self, trainer, output) -> None:
        mode = "train" if trainer.model.training else "eval"
        loss_mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            loss_mask = loss_mask * output["tool_mask"]
        mode_, low, high = (trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_min,
                            trainer.vllm_importance_sampling_clip_max)
        rows = sequence_rows(output["old_per_token_logps"], output["sampling_per_token_logps"], loss_mask,
                             output["importance_sampling_ratio"], mode_, low, high)
        rows = trainer.accelerator.gather(rows.to(trainer.accelerator.device))  # same row count on every process
        summary = summarize(rows.cpu(), mode_, low, high)
        if not summary:
            return
        for key, value in summary["metrics"].items():
            trainer._metrics[mode][key].append(value)
        if mode == "train" and trainer.accelerator.is_main_process:
            self.warn(trainer, summary)

    def warn(self, trainer, summary) -> None:
        step = trainer.state.global_step + 1
        line = correction_warning(summary, trainer.vllm_importance_sampling_mode,
                                  trainer.vllm_importance_sampling_clip_min, trainer.vllm_importance_sampling_clip_max,
                                  step)
        if line is None:
            return
        last = self.last_warning_step
        if last is not None and step - last < WARN_EVERY_STEPS:
            self.warnings_held += 1
            return
        if self.warnings_held:
            line += f" [{self.warnings_held} more such batches since step {last}]"
        self.last_warning_step, self.warnings_held = step, 0
        logger.warning("%s", line)
