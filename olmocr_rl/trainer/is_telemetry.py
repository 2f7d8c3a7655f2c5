"""Per generation batch, how much of it vLLM's importance-sampling correction masked or truncated.

:class:`ImportanceSamplingTelemetryMixin` (in the bases of both trainers, just before ``GRPOTrainer``) wraps TRL 1.16's
``GRPOTrainer._generate_and_score_completions``: when TRL applied the correction (vLLM generation with
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

__all__ = ["ImportanceSamplingTelemetryMixin", "WARN_EVERY_STEPS"]

logger = logging.getLogger(__name__)

WARN_EVERY_STEPS = 10


class ImportanceSamplingTelemetryMixin:
    """Put just before ``trl.GRPOTrainer`` in the bases; see the module docstring. For trl==1.16.0."""

    _is_last_warning_step: int | None = None
    _is_warnings_held = 0

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.use_vllm and self.vllm_importance_sampling_correction and "importance_sampling_ratio" in output:
            self._log_importance_sampling(output)
        return output

    def _log_importance_sampling(self, output) -> None:
        mode = "train" if self.model.training else "eval"
        loss_mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            loss_mask = loss_mask * output["tool_mask"]
        rows = sequence_rows(output["old_per_token_logps"], output["sampling_per_token_logps"], loss_mask,
                             output["importance_sampling_ratio"], self.vllm_importance_sampling_mode,
                             self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max)
        rows = self.accelerator.gather(rows.to(self.accelerator.device))  # same row count on every process
        summary = summarize(rows.cpu(), self.vllm_importance_sampling_mode, self.vllm_importance_sampling_clip_min,
                            self.vllm_importance_sampling_clip_max)
        if not summary:
            return
        for key, value in summary["metrics"].items():
            self._metrics[mode][key].append(value)
        if mode == "train" and self.accelerator.is_main_process:
            self._warn_importance_sampling(summary)

    def _warn_importance_sampling(self, summary) -> None:
        step = self.state.global_step + 1
        line = correction_warning(summary, self.vllm_importance_sampling_mode, self.vllm_importance_sampling_clip_min,
                                  self.vllm_importance_sampling_clip_max, step)
        if line is None:
            return
        last = self._is_last_warning_step
        if last is not None and step - last < WARN_EVERY_STEPS:
            self._is_warnings_held += 1
            return
        if self._is_warnings_held:
            line += f" [{self._is_warnings_held} more such batches since step {last}]"
        self._is_last_warning_step, self._is_warnings_held = step, 0
        logger.warning("%s", line)

