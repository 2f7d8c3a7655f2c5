"""Where a GRPO step's time goes: generation, rewards, and the rest (log-probs, forward/backward, optimizer).

:class:`StepClock` is owned by the trainer (``trainer/plain.py``), whose overrides of TRL 1.16's ``GRPOTrainer``
methods it times: ``_generate`` (sampling, HF or vLLM), ``_calculate_rewards`` (all reward functions) and
``_get_per_token_logps_and_entropies`` (every training forward, to count its padding).
:class:`StepTimingCallback` measures each optimizer step's wall time and, at every log, adds per-step means to
the logs (this process's view):

    timing/step_s  timing/generate_s  timing/reward_s  timing/train_s  timing/reward_share
    timing/generated_tokens          (completion tokens sampled for training per step on this process)
    timing/model_flops               (forward + backward FLOPs of training on this process's samples,
                                      from their token, image-token and patch counts: olmocr_rl.model.flops;
                                      the vision tower's where it runs: olmocr_rl.telemetry.vision_flops)
    timing/active_sampling_s         (OlmoRL --active_sampling: extra rounds' generation and rewards, a
                                      part of generate_s + reward_s; logged when the trainer refills)
    timing/padding_fraction          (padded positions / all positions of the (rows, prompt + completion)
                                      blocks TRL's training forwards take: what a padded forward spends on
                                      padding; --padding_free packs them away)
    timing/shared_prefix_tokens      (with --shared_prefix: the tokens the language model forwarded in the
                                      training forwards / those rows' real tokens: 1.0 where no micro-batch
                                      holds two completions of a page, about (P + G(C + 1)) / (G(P + C)) where each
                                      holds whole groups of G; trainer.shared_prefix)

``train_s`` = step − generation − rewards: old/reference log-probs, forward/backward and the
optimizer step.
"""

from __future__ import annotations

import contextlib
import time

from transformers import TrainerCallback


class _Totals:
    def __init__(self):
        self.generate_s = 0.0
        self.reward_s = 0.0
        self.refill_s = 0.0
        self.generated_tokens = 0
        self.model_flops = 0.0
        self.padded_positions = 0
        self.forward_positions = 0
        self.shared_tokens_saved = 0  # real tokens of the training forwards the shared prefix did not forward

    def reset(self):
        self.__init__()


class StepClock:
    """The trainer's step timers (``trainer/plain.py`` owns one and times its overrides with it).

    ``generation()``, ``rewards()`` and ``refill()`` time a phase; ``generated(out)`` (inside ``generation()``)
    counts what TRL's ``_generate`` returned; ``forward(attention_mask)`` counts a training forward's padding.
    ``label_phases`` also marks generation and rewards as ``torch.profiler`` ranges (``--profile_step``:
    olmocr_rl.telemetry.profile). :attr:`callback` is the :class:`StepTimingCallback` to put first.
    """

    def __init__(self, trainer, label_phases: bool = False, log_refill: bool = False, shared_prefix: bool = False):
        self.trainer = trainer
        self.totals = _Totals()
        self.label_phases = label_phases
        self.count_flops = _flops_counter(trainer, add=self._add_flops)
        self.callback = StepTimingCallback(self.totals, log_refill=log_refill, shared_prefix=shared_prefix)

    def _add_flops(self, flops: float) -> None:
        self.totals.model_flops += flops

    def _label(self, phase: str):
        if not self.label_phases:
            return contextlib.nullcontext()
        import torch

        from olmocr_rl.telemetry.profile import PHASE_PREFIX

        return torch.profiler.record_function(PHASE_PREFIX + phase)

    @contextlib.contextmanager
    def _timed(self, field: str, phase: str | None = None):
        start = time.perf_counter()
        try:
            with self._label(phase) if phase else contextlib.nullcontext():
                yield
        finally:
            setattr(self.totals, field, getattr(self.totals, field) + time.perf_counter() - start)

    @contextlib.contextmanager
    def generation(self):
        batch = _Generated()
        with self._timed("generate_s", "generate"):
            yield batch
        if batch.out is not None and getattr(self.trainer.model, "training", True):  # eval's are not trained on
            prompt_ids, completion_ids = batch.out[0], batch.out[1]
            self.totals.generated_tokens += sum(len(ids) for ids in completion_ids)
            self.totals.model_flops += self.count_flops(prompt_ids, completion_ids)

    def rewards(self):
        return self._timed("reward_s", "reward")

    def refill(self):
        return self._timed("refill_s")

    def forward(self, attention_mask) -> None:
        if getattr(self.trainer.model, "training", True):  # training forwards (old log-probs and the loss)
            self.totals.forward_positions += attention_mask.numel()
            self.totals.padded_positions += attention_mask.numel() - int(attention_mask.sum())

    def shared(self, saved_tokens: int) -> None:
        """A training forward's real tokens that the shared prefix did not forward (counted with ``forward``'s)."""
        if getattr(self.trainer.model, "training", True):
            self.totals.shared_tokens_saved += saved_tokens


class _Generated:
    """What ``_generate`` returned, handed to :meth:`StepClock.generation` to count after its timer stops."""

    out = None

    def generated(self, out) -> None:
        self.out = out


def _flops_counter(trainer, add=None):
    """``(prompt_ids, completion_ids) -> training FLOPs`` for the trainer's model (0 where it cannot count).

    With ``add`` (a function taking FLOPs), the vision tower's are counted where it runs and go to ``add``
    (olmocr_rl.telemetry.vision_flops); without, they are counted per sampled sequence, as the stock path
    computes them."""
    from olmocr_rl.model.flops import ArchFlops, trained_parts, training_flops
    from olmocr_rl.telemetry.vision_flops import install_vision_flops

    config = trainer.model.config
    try:
        arch = ArchFlops.from_config(config)
    except Exception:  # noqa: BLE001 - a model family the counter does not know: the column stays 0
        return lambda prompt_ids, completion_ids: 0.0
    image_token_id = getattr(config, "image_token_id", None)
    # A generation batch is trained num_iterations times (GRPO's mu).
    passes = getattr(trainer.args, "num_iterations", 1) or 1

    trained, at_tower = [], []  # settled at the first count: the trainer is built (PEFT wraps the model there)

    def count(prompt_ids, completion_ids) -> float:
        if not trained:
            trained.append(trained_parts(trainer.model))
            at_tower.append(add is not None and install_vision_flops(trainer.model, arch, trained[0], add))
        shapes = [(len(p), sum(1 for t in p if t == image_token_id), len(c)) for p, c in zip(prompt_ids, completion_ids)]
        return passes * training_flops(arch, shapes, trained[0], vision=not at_tower[0])

    return count


class StepTimingCallback(TrainerCallback):
    def __init__(self, totals: _Totals, log_refill: bool = False, shared_prefix: bool = False):
        self.totals = totals
        self.log_refill = log_refill  # log timing/active_sampling_s every log step, 0 included
        self.shared_prefix = shared_prefix  # log timing/shared_prefix_tokens
        self.step_s = 0.0
        self.steps = 0
        self._start: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._start is not None:
            self.step_s += time.perf_counter() - self._start
            self.steps += 1
            self._start = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or self.steps == 0 or "reward" not in logs:
            return
        n = self.steps
        t = self.totals
        logs["timing/step_s"] = self.step_s / n
        logs["timing/generate_s"] = t.generate_s / n
        logs["timing/reward_s"] = t.reward_s / n
        logs["timing/train_s"] = max(0.0, self.step_s - t.generate_s - t.reward_s) / n
        logs["timing/reward_share"] = t.reward_s / self.step_s if self.step_s > 0 else 0.0
        logs["timing/generated_tokens"] = t.generated_tokens / n
        logs["timing/model_flops"] = t.model_flops / n
        if t.forward_positions:
            logs["timing/padding_fraction"] = t.padded_positions / t.forward_positions
            real = t.forward_positions - t.padded_positions
            if self.shared_prefix and real > 0:
                logs["timing/shared_prefix_tokens"] = (real - t.shared_tokens_saved) / real
        if self.log_refill or t.refill_s > 0:
            logs["timing/active_sampling_s"] = t.refill_s / n
        self.step_s, self.steps = 0.0, 0
        t.reset()
