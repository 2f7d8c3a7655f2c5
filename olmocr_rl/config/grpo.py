"""From the resolved config to TRL's ``GRPOConfig``, with olmOCR's values where no flag exists (docs/design.md).

``grpo_train`` builds it before the model loads, so TRL's own ``__post_init__`` checks run in the preflight;
the one value that needs the tokenizer (the vision pad tokens a vLLM backend must never sample) is added by
:func:`ban_vision_pad_tokens` once the processor has loaded.
"""

from __future__ import annotations

from typing import Any

from olmocr_rl.config.options import ResolvedConfig, grpo_fields
from olmocr_rl.config.values import plain

#: The vision placeholder tokens a sampled completion must never contain (--vllm_block_image_tokens).
VISION_PAD_TOKENS = ("<|image_pad|>", "<|video_pad|>")


def grpo_config_kwargs(cfg: ResolvedConfig, reward_weights: list[float] | None = None, tokenizer=None,
                       gradient_checkpointing: bool | None = None) -> dict[str, Any]:
    """GRPOConfig's arguments. ``reward_weights`` default to the run's (``cfg.reward_weights``); ``tokenizer`` names
    the vision pad tokens a vLLM backend must never sample (without it they are added later, see the module);
    ``gradient_checkpointing`` is TRL's whole-model flag as the run's checkpointing plan decided it
    (olmocr_rl.model.grad_checkpointing; default: only ``--gradient_checkpointing true`` turns it on)."""
    if gradient_checkpointing is None:
        gradient_checkpointing = cfg.gradient_checkpointing == "true"
    on_gpu = cfg.environment.cuda
    use_vllm = cfg.vllm_mode != "none"
    generation_kwargs = plain(cfg.generation_kwargs)
    if use_vllm and tokenizer is not None:
        generation_kwargs = vllm_sampling_kwargs(generation_kwargs, tokenizer, cfg.vllm_block_image_tokens)
    kwargs: dict[str, Any] = {field: plain(getattr(cfg, name)) for name, field in grpo_fields().items()}
    kwargs.update(  # the GRPOConfig values computed from flags, or olmOCR's where no flag exists
        gradient_checkpointing=gradient_checkpointing,
        lr_scheduler_type="constant_with_warmup" if cfg.lr_schedule == "constant" else "linear",
        report_to=list(cfg.report_to) or "none",
        remove_unused_columns=False,  # pdf_path, test_ids, ... must reach the reward functions
        bf16=on_gpu, use_cpu=not on_gpu, shuffle_dataset=True, dataloader_drop_last=True,
        reward_weights=list(cfg.reward_weights if reward_weights is None else reward_weights),
        use_vllm=use_vllm, vllm_mode=cfg.vllm_mode if use_vllm else "colocate", generation_kwargs=generation_kwargs,
    )
    if cfg.eval_steps is not None:
        kwargs.update(eval_strategy="steps", eval_steps=cfg.eval_steps)
    if cfg.dataloader_num_workers == 0:
        kwargs["dataloader_persistent_workers"] = False
    if cfg.olmorl:
        from olmocr_rl.olmorl.settings import olmorl_config_overrides

        kwargs.update(olmorl_config_overrides())
    return kwargs


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


def vision_pad_tokens(tokenizer) -> list[str]:
    """The vision placeholder tokens this tokenizer knows (as strings, the form vLLM's ``bad_words`` takes)."""
    found = []
    for token in VISION_PAD_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is not None and token_id != tokenizer.unk_token_id:
            found.append(token)
    return found
