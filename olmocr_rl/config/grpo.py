"""From the resolved config to TRL's ``GRPOConfig``, with olmOCR's values where no flag exists (docs/design.md).

``grpo_train`` builds it before the model loads, so TRL's own ``__post_init__`` checks run in the preflight;
the one value that needs the tokenizer (the vision pad tokens a vLLM backend must never sample) is added by
:func:`ban_vision_pad_tokens` once the processor has loaded.
"""

from __future__ import annotations

from typing import Any

from olmocr_rl.config.flags import TRL_KNOB_FLAGS
from olmocr_rl.config.resolved import ResolvedConfig, plain
from olmocr_rl.model.families import vision_pad_tokens


def grpo_config_kwargs(cfg: ResolvedConfig, reward_weights: list[float] | None = None, tokenizer=None,
                       gradient_checkpointing: bool | None = None) -> dict[str, Any]:
    """GRPOConfig's arguments. ``reward_weights`` default to the run's (``cfg.reward_weights``); ``tokenizer`` names
    the vision pad tokens a vLLM backend must never sample (without it they are added later, see the module);
    ``gradient_checkpointing`` is TRL's whole-model flag as the run's checkpointing plan decided it
    (olmocr_rl.model.checkpointing; default: only ``--gradient_checkpointing true`` turns it on)."""
    if gradient_checkpointing is None:
        gradient_checkpointing = cfg.gradient_checkpointing == "true"
    on_gpu = cfg.environment.cuda
    use_vllm = cfg.vllm_mode != "none"
    generation_kwargs = plain(cfg.generation_kwargs)
    if use_vllm and tokenizer is not None:
        generation_kwargs = vllm_sampling_kwargs(generation_kwargs, tokenizer, cfg.vllm_block_image_tokens)
    kwargs: dict[str, Any] = dict(
        output_dir=cfg.output_dir, num_train_epochs=cfg.num_train_epochs, max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps, gradient_checkpointing=gradient_checkpointing,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant_with_warmup" if cfg.lr_schedule == "constant" else "linear",
        warmup_steps=cfg.warmup_steps, logging_steps=cfg.logging_steps, save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit, max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature, top_p=cfg.top_p, report_to=list(cfg.report_to) or "none",
        run_name=cfg.wandb_run_name,
        remove_unused_columns=False,  # pdf_path, test_ids, ... must reach the reward functions
        bf16=on_gpu, use_cpu=not on_gpu, shuffle_dataset=True, seed=cfg.seed,
        dataloader_num_workers=cfg.dataloader_num_workers, dataloader_drop_last=True,
        loss_type=cfg.loss_type, scale_rewards=cfg.scale_rewards, beta=cfg.beta,
        importance_sampling_level=cfg.importance_sampling_level,
        reward_weights=list(cfg.reward_weights if reward_weights is None else reward_weights),
        num_iterations=cfg.num_iterations, num_generations=cfg.num_generations,
        cast_lm_head_to_fp32=cfg.cast_lm_head_to_fp32,
        router_aux_loss_coef=cfg.router_aux_loss_coef,  # None: the MoE config's own; refused for a dense model first
        use_vllm=use_vllm, vllm_mode=cfg.vllm_mode if use_vllm else "colocate",
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        vllm_server_host=cfg.vllm_server_host, vllm_server_port=cfg.vllm_server_port,
        vllm_importance_sampling_correction=cfg.vllm_importance_sampling_correction,
        vllm_importance_sampling_mode=cfg.vllm_importance_sampling_mode,
        vllm_importance_sampling_clip_max=cfg.vllm_importance_sampling_cap,
        vllm_max_model_length=cfg.vllm_max_model_length, vllm_tensor_parallel_size=cfg.vllm_tensor_parallel_size,
        vllm_enable_sleep_mode=cfg.vllm_enable_sleep_mode, generation_kwargs=generation_kwargs,
        log_completions=cfg.log_completions,
        log_multimodal=cfg.log_multimodal,  # TRL's default is True: page images gathered every generation
        num_completions_to_print=cfg.num_completions_to_print,
    )
    kwargs.update(trl_knob_kwargs(cfg))
    if cfg.eval_steps is not None:
        kwargs.update(eval_strategy="steps", eval_steps=cfg.eval_steps)
    if cfg.dataloader_num_workers == 0:
        kwargs["dataloader_persistent_workers"] = False
    if cfg.olmorl:
        from olmocr_rl.olmorl.settings import olmorl_config_overrides

        kwargs.update(olmorl_config_overrides())
    return kwargs


def trl_knob_kwargs(cfg: ResolvedConfig) -> dict[str, Any]:
    """The TRL knobs (``flags.TRL_KNOB_FLAGS``) as GRPOConfig arguments: each flag is the field of its name, its
    default TRL's, so a run that sets none of them builds the same GRPOConfig as one without these flags."""
    return {name: plain(getattr(cfg, name)) for name in TRL_KNOB_FLAGS}


def build_grpo_config(cfg: ResolvedConfig, reward_weights: list[float] | None = None, tokenizer=None,
                      gradient_checkpointing: bool | None = None):
    """TRL's GRPOConfig for this run (imports trl); TRL's ``__post_init__`` raises ValueError for what it refuses."""
    from trl import GRPOConfig

    return GRPOConfig(**grpo_config_kwargs(cfg, reward_weights, tokenizer, gradient_checkpointing))


def ban_vision_pad_tokens(grpo_config, cfg: ResolvedConfig, tokenizer) -> None:
    """Add the tokenizer's vision pad tokens to a vLLM backend's ``bad_words`` in ``grpo_config.generation_kwargs``
    (with --vllm_block_image_tokens; nothing for HF generation). The one GRPOConfig value set after it is built:
    TRL reads it when the trainer is built, and ``__post_init__`` does not look at it."""
    if cfg.vllm_mode != "none":
        grpo_config.generation_kwargs = vllm_sampling_kwargs(plain(cfg.generation_kwargs), tokenizer,
                                                             cfg.vllm_block_image_tokens)


def vllm_sampling_kwargs(user_kwargs: dict | None, tokenizer, block_image_tokens: bool) -> dict | None:
    """``--generation_kwargs`` for a vLLM backend, with the vision pad tokens added to ``bad_words``."""
    kwargs = dict(user_kwargs or {})
    if block_image_tokens:
        banned = vision_pad_tokens(tokenizer)
        existing = list(kwargs.get("bad_words") or [])
        kwargs["bad_words"] = existing + [t for t in banned if t not in existing]
    return kwargs or None
