"""Plain GRPO: TRL's ``GRPOTrainer`` with the mixins every olmocr_rl run needs, and nothing else changed.

- :class:`~olmocr_rl.trainer.checkpoint_load.CheckpointLoadMixin`: a resume loads the checkpoint's weights
  (whatever key layout they were saved in) and its optimizer state on any device;
- :class:`~olmocr_rl.trainer.page_order.EpochSeededOrderMixin`: every epoch's page order comes from
  (seed, epoch), so a resumed run sees the pages it would have seen;
- :class:`~olmocr_rl.trainer.completions.CompletionsLogMixin`: the completions table works with page prompts;
- :class:`~olmocr_rl.trainer.is_telemetry.ImportanceSamplingTelemetryMixin`: how much of each batch vLLM's
  importance-sampling correction masked (``sampling/is_*``).
"""

from __future__ import annotations

from trl import GRPOTrainer

from olmocr_rl.trainer.checkpoint_load import CheckpointLoadMixin
from olmocr_rl.trainer.completions import CompletionsLogMixin
from olmocr_rl.trainer.is_telemetry import ImportanceSamplingTelemetryMixin
from olmocr_rl.trainer.page_order import EpochSeededOrderMixin

__all__ = ["PlainGRPOTrainer"]


class PlainGRPOTrainer(CheckpointLoadMixin, EpochSeededOrderMixin, CompletionsLogMixin,
                       ImportanceSamplingTelemetryMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` (plain GRPO) with the mixins of the module docstring."""
