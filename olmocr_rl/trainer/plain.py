"""Plain GRPO: TRL's ``GRPOTrainer`` with the mixins every olmocr_rl run needs, and nothing else changed.

- :class:`~olmocr_rl.trainer.checkpoint_load.CheckpointLoadMixin`: a resume loads the checkpoint's weights
  (whatever key layout they were saved in) and its optimizer state on any device;
- :class:`~olmocr_rl.trainer.checkpoint_save.CheckpointSaveMixin`: a checkpoint is written whole (trainer_state.json
  atomically), its node manifest last, and a full disk is one line;
- :class:`~olmocr_rl.trainer.page_order.EpochSeededOrderMixin`: every epoch's page order comes from
  (seed, epoch), so a resumed run sees the pages it would have seen;
- :class:`~olmocr_rl.trainer.completions.CompletionsLogMixin`: the completions table works with page prompts;
- :class:`~olmocr_rl.trainer.is_telemetry.ImportanceSamplingTelemetryMixin`: how much of each batch vLLM's
  importance-sampling correction masked (``sampling/is_*``);
- :class:`~olmocr_rl.trainer.padding_free.PaddingFreeMixin` (``--padding_free``) and
  :class:`~olmocr_rl.trainer.generation.CompiledGenerationMixin` (``--compiled_generation``): exact speed-ups of the
  training forwards and of HF generation, switched on by :func:`olmocr_rl.trainer.build.configure_speedups`.

Building one first checks TRL's private surface (:func:`olmocr_rl.trainer.compat.check_trainer_surface`).
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

from olmocr_rl.trainer.checkpoint_load import CheckpointLoadMixin
from olmocr_rl.trainer.checkpoint_save import CheckpointSaveMixin
from olmocr_rl.trainer.compat import check_trainer_surface
from olmocr_rl.trainer.completions import CompletionsLogMixin
from olmocr_rl.trainer.generation import CompiledGenerationMixin
from olmocr_rl.trainer.is_telemetry import ImportanceSamplingTelemetryMixin
from olmocr_rl.trainer.padding_free import PaddingFreeMixin
from olmocr_rl.trainer.page_order import EpochSeededOrderMixin

__all__ = ["PlainGRPOTrainer"]


class PlainGRPOTrainer(CheckpointLoadMixin, CheckpointSaveMixin, EpochSeededOrderMixin, CompletionsLogMixin,
                       ImportanceSamplingTelemetryMixin, PaddingFreeMixin, CompiledGenerationMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` (plain GRPO) with the mixins of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_trainer_surface(args, kwargs)  # CompatError (one line naming the point and the pin) before TRL runs
        super().__init__(*args, **kwargs)
