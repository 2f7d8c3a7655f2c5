"""The one trainer class: TRL's ``GRPOTrainer`` (trl==1.16.0, pinned) with what every olmocr_rl run needs.

:class:`PlainGRPOTrainer` is plain GRPO. It overrides each private TRL / transformers method it needs once, and
each override calls a helper of its own module and then the parent (nothing of TRL's is copied):

==================================== ==================================================================
``_get_train_sampler``, ``_run_epoch`` every epoch's page order from (seed, epoch) (``page_order``), which
                                     ``async_generation=`` reads ahead
``_generate``                        step timing and FLOPs (``telemetry.timing``), profiler phase labels; with
                                     ``async_generation=`` the next batch's prompts go to the server
``_generate_single_turn``            compiled static-cache HF generation, ``compiled_generation=`` (``generation``);
                                     each shared page prompt prefilled once, ``shared_prefill=`` (``shared_prefill``)
``_calculate_rewards``               timing, the completions table's page column (``completions``), and the
                                     gathered rewards kept for a subclass's objective
``_generate_and_score_completions``  IS telemetry (``is_telemetry``), then active sampling's refill rounds
                                     (``active_sampling``, ``active_sampling=``: pages from its own seeded
                                     sampler) on the subclass's keep mask; the ``async/*`` numbers of
                                     ``async_generation=`` (``async_rollouts``)
``_prepare_inputs``                  with ``shared_prefix=``, each window's micro-batches served page by page
                                     (``prefix_steps.WindowPlan``: their order within a window changes no gradient)
``_get_per_token_logps_and_entropies`` padding count (timing), the packed forward (``padding_free=``) and the
                                     shared-prefix forward (``shared_prefix=``), a page's prompt kept across the
                                     chunks of a call and the micro-steps of a window (``prefix_steps``)
``_load_from_checkpoint``, ``_load_optimizer_and_scheduler``   resume (``checkpoint_load``)
``_save_checkpoint``                 whole checkpoints with flags and manifest (``checkpoint_save``)
``log``                              the completions table as text
==================================== ==================================================================

Every switch is a constructor argument; nothing is set on the trainer after construction and no method is
replaced on an instance. A subclass adds an objective by overriding :meth:`_score_generation_batch` (our own
hook; ``trainer/olmorl.py``). Building one first checks TRL's private surface (``compat.check_trainer_surface``).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any

import torch
from trl import GRPOTrainer

from olmocr_rl.telemetry.timing import StepClock
from olmocr_rl.trainer import checkpoint_load, checkpoint_save, completions, generation
from olmocr_rl.trainer.active_sampling import ActiveSampler
from olmocr_rl.trainer.async_rollouts import RolloutPipeline
from olmocr_rl.trainer.compat import check_trainer_surface
from olmocr_rl.trainer.is_telemetry import ImportanceSamplingTelemetry
from olmocr_rl.trainer.padding_free import PackedForward
from olmocr_rl.trainer.page_order import epoch_seeded
from olmocr_rl.trainer.prefix_steps import PrefixScope, WindowPlan, page_keys
from olmocr_rl.trainer.shared_prefill import PrefillGuard, shared_prefill
from olmocr_rl.trainer.shared_prefix import SharedPrefixForward, SharedPrefixGuard

__all__ = ["PlainGRPOTrainer"]

logger = logging.getLogger(__name__)


class PlainGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` (plain GRPO) with the behaviour of the module docstring.

    Keyword arguments beyond ``GRPOTrainer``'s (all default off):
    ``padding_free`` (the model's attention already pack-aware: ``padding_free.install_padding_free``),
    ``shared_prefix`` (likewise: ``shared_prefix.install_shared_prefix``; each group's prompt forwarded once),
    ``compiled_generation`` and ``shared_prefill`` (HF generation only; ``shared_prefill.shared_prefill``),
    ``cache_vision_features`` (a frozen vision tower's per-step cache), ``saved_flags`` (kept in each checkpoint),
    ``apply_learning_rate_on_resume``, ``vllm_engine_kwargs`` (vLLM rollouts through ``vllm_generation``'s backend
    with these engine arguments), ``label_phases`` (``torch.profiler`` ranges for ``--profile_step``),
    ``active_sampling`` / ``active_sampling_max_rounds`` (needs a subclass whose ``_score_generation_batch`` returns
    a keep mask: OlmoRL), ``async_generation`` / ``max_staleness`` (server mode: the next batch is generated while
    this one trains, ``async_rollouts``).
    """

    def __init__(self, *args: Any, padding_free: bool = False, shared_prefix: bool = False,
                 shared_prefill: bool = False, compiled_generation: bool = False,
                 cache_vision_features: bool = False, saved_flags: dict | None = None,
                 apply_learning_rate_on_resume: bool = False, vllm_engine_kwargs: dict | None = None,
                 label_phases: bool = False, active_sampling: bool = False,
                 active_sampling_max_rounds: int | None = None, async_generation: bool = False,
                 max_staleness: int = 1, **kwargs: Any) -> None:
        check_trainer_surface(args, kwargs)  # CompatError (one line naming the point and the pin) before TRL runs
        config = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments.get("args")
        self.padding_free = padding_free
        self.shared_prefix = SharedPrefixGuard() if shared_prefix else None  # its first-use check and fallback
        self._window_plan = WindowPlan() if shared_prefix else None  # each window's micro-batches, page by page
        self._window_prefixes = PrefixScope()  # page prompts kept across a window's micro-steps
        self.shared_prefill = PrefillGuard() if shared_prefill else None  # likewise, for HF generation's prefill
        self.olmocr_rl_flags = saved_flags
        self.apply_learning_rate_on_resume = apply_learning_rate_on_resume
        self.compiled_generation = self.compiled_generation_checked = False
        self.stock_generation_config = None
        self._page_sampler = None
        self._rewards_per_func = None
        self._is_telemetry = ImportanceSamplingTelemetry()
        self._active_sampler = ActiveSampler(self, config, active_sampling_max_rounds) if active_sampling else None
        self._rollouts = RolloutPipeline(self, max_staleness) if async_generation else None
        if self._rollouts is not None and (vllm_engine_kwargs is None or config is None or not config.use_vllm
                                       or config.vllm_mode != "server"):
            raise ValueError("async_generation needs vLLM in server mode (use_vllm=True, vllm_mode='server') and "
                             "vllm_engine_kwargs: the server generates while the trainer trains")
        with _rollout_backend(vllm_engine_kwargs, self._rollouts):
            super().__init__(*args, **kwargs)
        if self.shared_prefix is not None:  # no graph outlives a micro-step where FSDP2 / DeepSpeed shard parameters
            self.shared_prefix.recompute = (self.accelerator.num_processes > 1 or self.is_fsdp_enabled
                                            or self.is_deepspeed_enabled)
            # DeepSpeed ZeRO-3: a prompt kept across micro-steps gave another gradient from the second optimizer step
            # on (CPU, two processes; ZeRO-2, FSDP2 and DDP gave the stock ones): it shares within a micro-batch there
            stage = getattr(getattr(self.accelerator.state, "deepspeed_plugin", None), "zero_stage", None)
            self.shared_prefix.across_steps = stage != 3
            if stage == 3:
                logger.info("shared prefix: DeepSpeed ZeRO-3, so a page's prompt is shared within a micro-batch and "
                            "by the forwards without gradients, not kept across micro-steps")
        if self.shared_prefix is not None and getattr(self, "ref_model", None) is not None:
            from olmocr_rl.trainer.shared_prefix import install_shared_prefix

            install_shared_prefix(self.ref_model)  # TRL loaded it again: its log-probs share prompts too
        self.step_clock = StepClock(self, label_phases=label_phases,
                                    log_refill=self._active_sampler is not None,
                                    shared_prefix=self.shared_prefix is not None)
        self.callback_handler.callbacks.insert(0, self.step_clock.callback)  # timing/* keys, before the reporters
        if self._rollouts is not None:
            self.callback_handler.callbacks.append(self._rollouts.callback)  # waits for a request left in flight
        if compiled_generation and not self.use_vllm:
            generation.switch_on(self)
        if cache_vision_features:
            from olmocr_rl.trainer.vision_cache import attach_feature_cache

            attach_feature_cache(self)

    # -- page order -------------------------------------------------------------------------------------------
    def _get_train_sampler(self, dataset=None):
        self._page_sampler = epoch_seeded(super()._get_train_sampler(dataset))
        return self._page_sampler

    def _run_epoch(self, model, epoch, train_dataloader, steps_in_epoch, num_update_steps_per_epoch, *args,
                   **kwargs):
        # Set here, whatever wrappers (accelerate's shards, skip_first_batches) sit around the sampler.
        if self._page_sampler is not None:
            self._page_sampler.set_epoch(epoch)
        if self._rollouts is not None:
            self._rollouts.epoch_started(epoch, steps_in_epoch, num_update_steps_per_epoch)
        return super()._run_epoch(model, epoch, train_dataloader, steps_in_epoch, num_update_steps_per_epoch, *args,
                                  **kwargs)

    # -- generation and rewards -------------------------------------------------------------------------------
    def _generate(self, *args, **kwargs):
        with self.step_clock.generation() as clock:
            out = super()._generate(*args, **kwargs)
            clock.generated(out)
            if self._rollouts is not None:
                self._rollouts.after_generation()  # the next batch goes to the server (once per batch)
        return out

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
        def generate():
            return super(PlainGRPOTrainer, self)._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                      num_generations, *args, **kwargs)

        if self.use_vllm or self.use_transformers_continuous_batching:
            return generate()
        sharing = contextlib.nullcontext() if self.shared_prefill is None else shared_prefill(
            self.accelerator.unwrap_model(self.model), self.shared_prefill)
        with sharing:
            if not self.compiled_generation:
                return generate()
            return generation.compiled_single_turn(self, prompt_ids, generate)

    def _calculate_rewards(self, inputs, prompts, completions_, completion_ids_list):
        with self.step_clock.rewards():
            completions.log_page_column(self, inputs)
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions_, completion_ids_list)
        self._rewards_per_func = rewards_per_func  # gathered over processes: a subclass's objective reads them
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        rollouts = self._rollouts if self.model.training else None
        if rollouts is not None:
            rollouts.begin_batch()
        output, keep_local = self._score_generation_batch(inputs)
        if self._active_sampler is not None and self.model.training:
            output = self._active_sampler.fill(output, keep_local)
        if rollouts is not None:
            rollouts.log()
        return output

    def _score_generation_batch(self, inputs):
        """TRL's generation and scoring of one generation batch, with the IS telemetry: ``(batch, None)``.

        The hook a subclass overrides to apply its objective; it returns this process's kept rows (a bool tensor,
        one per row) in place of None. Active sampling refills through it."""
        output = super()._generate_and_score_completions(inputs)
        self._is_telemetry.observe(self, output)
        return output, None

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self._window_plan is None or not self.model.training or self.shared_prefix.off:
            return inputs
        index = self._window_plan.serve(
            self._buffered_inputs, self._step, self.args.steps_per_generation,
            self.args.steps_per_generation * self.num_iterations, self.current_gradient_accumulation_steps,
            self.accelerator.sync_gradients)
        return self._buffered_inputs[index]

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        self.step_clock.forward(attention_mask)
        stock = PackedForward(model) if self.padding_free else model
        if not self.shared_prefix:
            return super()._get_per_token_logps_and_entropies(stock, input_ids, attention_mask, logits_to_keep, *args,
                                                              **kwargs)
        if torch.is_grad_enabled() and self.model.training:  # a micro-step: its page prompts live for the window
            plan = self._window_plan
            pages = plan.current if plan.current is not None and len(plan.current) == len(input_ids) else None
            pages = pages if self.shared_prefix.across_steps else None
            plan.current = None
            shared = SharedPrefixForward(model, stock, logits_to_keep, self.shared_prefix, pages=pages,
                                         scope=self._window_prefixes, later=plan.later if pages else frozenset(),
                                         final=self.accelerator.sync_gradients or pages is None)
        else:  # no gradients: the page prompts live for this call's chunks
            images = kwargs.get("pixel_values"), kwargs.get("image_grid_thw")
            pages = None if self.shared_prefix.off else page_keys(
                input_ids[:, :-logits_to_keep], attention_mask[:, :-logits_to_keep], *images)
            shared = SharedPrefixForward(model, stock, logits_to_keep, self.shared_prefix, pages=pages)
        out = super()._get_per_token_logps_and_entropies(shared, input_ids, attention_mask, logits_to_keep, *args,
                                                         **kwargs)
        self.step_clock.shared(shared.saved_tokens)  # timing/shared_prefix_tokens
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        completions.table_as_text(self)
        super().log(logs, start_time)

    # -- checkpoints ------------------------------------------------------------------------------------------
    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        return checkpoint_load.load_checkpoint_weights(self, resume_from_checkpoint, model,
                                                       super()._load_from_checkpoint)

    def _load_optimizer_and_scheduler(self, checkpoint):
        return checkpoint_load.load_optimizer_and_scheduler(self, checkpoint, super()._load_optimizer_and_scheduler)

    def _save_checkpoint(self, model, trial):
        return checkpoint_save.save_checkpoint(self, model, trial, super()._save_checkpoint)


def _rollout_backend(engine_kwargs: dict | None, pipeline: RolloutPipeline | None = None):
    """vLLM rollouts through olmocr_rl's backend (``vllm_generation``) while TRL builds its generator, when asked."""
    if engine_kwargs is None:
        return contextlib.nullcontext()
    from olmocr_rl.trainer.vllm_generation import page_vllm_generation

    return page_vllm_generation(engine_kwargs, pipeline)
