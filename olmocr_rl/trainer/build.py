"""The trainer of a run, built from its resolved config: plain TRL GRPO or OlmoRL, the rollout backend, and
the callbacks in the order their jobs need.

:func:`build_trainer` is what ``grpo_train`` calls once the model, processor, rewards and datasets exist; the
trainer's own switches (speed-ups, vLLM backend, saved flags, ...) are constructor arguments
(:func:`trainer_switches`).
The callback order is written out in :func:`add_callbacks`, one slot per job:

1. ``StepTimingCallback`` (``timing/*`` keys; the trainer inserts it when built) and, with the bench reward,
   ``DetailedRewardLoggingCallback``
   (``bench_reward/*`` keys) go *first*, before the Trainer's own reporting callbacks (W&B, TensorBoard),
   because they add keys to the ``logs`` those send;
2. the metrics file, each process's held bytes (``rank_memory.json``, once), the console table and the zero-signal
   warning (telemetry.zero_signal), after the Trainer's callbacks (they read the finished logs); the
   Trainer's progress bar stays where it is, without its raw metrics dict unless ``--console_raw_metrics``;
3. with W&B, transformers' ``WandbCallback`` is replaced in place by olmOCR's naming of it, and the run-id
   writer is added before the S3 mirror, so the id reaches S3 with the checkpoint;
4. the stop-signal handler (trainer.preemption): a SIGTERM, SIGUSR1 or SIGINT saves the step it arrived in
   and stops; it bounds the mirror's last upload;
5. the S3 mirror last: it uploads what every callback before it wrote into the checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["add_callbacks", "build_trainer", "console_detail_steps", "preemption_of", "trainer_class",
           "trainer_switches"]


def trainer_class(cfg):
    """``(class, extra constructor kwargs)``: OlmoRL with ``--olmorl``, plain GRPO otherwise."""
    if cfg.olmorl:
        from olmocr_rl.trainer.olmorl import OlmoRLGRPOTrainer

        return OlmoRLGRPOTrainer, {"active_sampling": cfg.active_sampling,
                                   "active_sampling_max_rounds": cfg.active_sampling_max_rounds}
    from olmocr_rl.trainer.plain import PlainGRPOTrainer

    return PlainGRPOTrainer, {}


def trainer_switches(cfg, padding_free: bool, shared_prefix: bool = False) -> dict:
    """The trainer's own constructor switches (``trainer/plain.py``) from the resolved config."""
    from olmocr_rl.config.resume_flags import saved_flags

    return {
        "padding_free": padding_free, "shared_prefix": shared_prefix, "compiled_generation": cfg.compiled_generation,
        "shared_prefill": cfg.shared_prefix and cfg.vllm_mode == "none",  # HF generation (trainer.shared_prefill)
        "cache_vision_features": cfg.cache_vision_features,
        "saved_flags": saved_flags(cfg.flags),  # kept in each checkpoint (trainer.checkpoint_save)
        "apply_learning_rate_on_resume": cfg.apply_learning_rate_on_resume,  # trainer.checkpoint_load
        # vLLM backends get our prompt/dtype fixes (trainer.vllm_generation); HF generation needs nothing.
        "vllm_engine_kwargs": None if cfg.vllm_mode == "none" else {
            "dtype": cfg.vllm_engine_dtype, "enforce_eager": cfg.vllm_enforce_eager},
        "label_phases": cfg.profile_step is not None,
        # server mode: the next batch is generated while this one trains (trainer.async_rollouts)
        "async_generation": cfg.async_generation, "max_staleness": cfg.max_staleness,
    }


def console_detail_steps(cfg) -> int:
    """--console_detail_steps, or by default with each checkpoint (--save_steps)."""
    return cfg.save_steps if cfg.console_detail_steps is None else cfg.console_detail_steps


def build_trainer(cfg, grpo_config, model, processor, reward_funcs, reward_names, reward_logger,
                  train_dataset, eval_dataset=None, peft_config=None):
    """The run's trainer with its callbacks in place (W&B, when asked for, is started by the caller first).

    ``peft_config`` (``--use_peft``) goes to TRL, which wraps the model with the LoRA adapters; then, with the
    vision tower frozen (by LoRA or --freeze_vision_tower), the trainer installs its per-step feature cache."""
    trainer_cls, extra = trainer_class(cfg)
    packing = sharing = None
    if cfg.padding_free:
        from olmocr_rl.trainer.padding_free import install_padding_free

        packing = install_padding_free(model)  # before the trainer wraps the model
    if cfg.shared_prefix:
        from olmocr_rl.trainer.shared_prefix import install_shared_prefix

        sharing = install_shared_prefix(model)  # the pack-aware attention too, if --padding_free did not
    trainer = trainer_cls(
        **extra, **trainer_switches(cfg, padding_free=packing is not None, shared_prefix=sharing is not None),
        model=model, args=grpo_config, processing_class=processor, reward_funcs=reward_funcs,
        train_dataset=train_dataset.to_trl_dataset(),
        eval_dataset=eval_dataset.to_trl_dataset() if eval_dataset is not None else None,
        peft_config=peft_config,
    )
    if packing:
        logger.info("training forwards: %s", packing)
    if sharing:
        logger.info("training forwards: %s", sharing)
    add_callbacks(trainer, cfg, reward_names, reward_logger, test_types=list(train_dataset.summary["tests_by_type"]))
    return trainer


def add_callbacks(trainer, cfg, reward_names: list[str], reward_logger, test_types=None) -> None:
    """The run's callbacks, in the order of the module docstring; ``test_types``: the training pages' (a column each
    in the console row)."""
    from olmocr_rl.config.rewards import REWARDS
    from olmocr_rl.telemetry.pass_rates import DetailedRewardLoggingCallback
    from olmocr_rl.telemetry.console import use_console_progress
    from olmocr_rl.telemetry.history import MetricsFileCallback, ProgressTableCallback
    from olmocr_rl.telemetry.zero_signal import ZeroSignalWarningCallback
    # The trainer put its StepTimingCallback (timing/* keys) first when it was built.
    if cfg.profile_step is not None:  # --profile_step: torch.profiler over one step, per phase
        from olmocr_rl.telemetry.profile import attach_step_profiler

        trainer.add_callback(attach_step_profiler(trainer, cfg.profile_step, cfg.output_dir))
    bench_scored = bool({reward.name for reward in REWARDS if reward.bench_tests} & set(reward_names))
    if bench_scored:
        DetailedRewardLoggingCallback.attach(trainer, reward_logger,  # bench_reward/* keys; goes first
                                             detail_steps=console_detail_steps(cfg))
    trainer.add_callback(MetricsFileCallback(Path(cfg.output_dir) / "metrics.jsonl"))
    from olmocr_rl.telemetry.rank_memory import RankMemoryCallback

    trainer.add_callback(RankMemoryCallback(cfg.output_dir))  # each process's held bytes, after the first step
    trainer.add_callback(ProgressTableCallback(test_types=test_types if bench_scored else None))
    trainer.add_callback(ZeroSignalWarningCallback())  # one line when nearly every group's rewards are identical
    use_console_progress(trainer, raw_metrics=cfg.console_raw_metrics)  # the bar, without the raw dict
    if "wandb" in cfg.report_to:
        from transformers.integrations import WandbCallback

        from olmocr_rl.telemetry.wandb_run import olmocr_wandb_callback, wandb_run_id_callback

        callbacks = trainer.callback_handler.callbacks
        for index, callback in enumerate(callbacks):
            if type(callback) is WandbCallback:
                callbacks[index] = olmocr_wandb_callback()
        trainer.add_callback(wandb_run_id_callback())
    from olmocr_rl.trainer.preemption import PreemptionCallback

    uploads = []
    if cfg.s3_save_path:
        from olmocr_rl.storage import S3SyncCallback

        uploads.append(S3SyncCallback(cfg.s3_save_path, cfg.output_dir))  # never fatal to training
    trainer.add_callback(PreemptionCallback(uploads=uploads, upload_timeout_s=cfg.preempt_upload_timeout))
    for upload in uploads:
        trainer.add_callback(upload)


def preemption_of(trainer):
    """The trainer's PreemptionCallback (added by :func:`add_callbacks`), or None."""
    from olmocr_rl.trainer.preemption import PreemptionCallback

    return next((c for c in trainer.callback_handler.callbacks if isinstance(c, PreemptionCallback)), None)
