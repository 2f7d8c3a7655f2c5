"""Will a colocated vLLM engine and the trainer fit on one GPU? Checked before the model loads.

With ``--vllm_mode colocate`` each training process shares its GPU with a vLLM engine that may take
``--vllm_gpu_memory_utilization`` of it. That share must hold the engine's copy of the weights plus a
KV cache for at least one sequence of ``--vllm_max_model_length`` tokens (vLLM refuses to start
otherwise) plus its runtime (activations of a prefill, CUDA graphs); the rest must hold the trainer's
weights, gradients and AdamW state. Both are estimated from the model's config alone, so a recipe that
cannot fit stops in seconds with the numbers and the value to use, not after minutes of loading
(:func:`colocate_memory_problem`, the training CLI's preflight).

The trainer estimate is a floor for one process without sharding: bf16 weights, gradients and the two
AdamW moments (8 bytes a parameter, +2 with a frozen reference model for ``--beta`` > 0); activations
come on top. Under DeepSpeed/FSDP (several processes) that part is not checked.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

logger = logging.getLogger(__name__)

GIB = 2**30
#: vLLM's own working memory besides weights and KV cache (a 4,096-token prefill, vision encoder, CUDA graphs).
ENGINE_RUNTIME_BYTES = 2 * GIB
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelFacts:
    """What the memory plan needs to know about a model, read from its config."""

    parameters: int
    kv_bytes_per_token_per_dtype_byte: int  # 2 (K and V) x layers x KV heads x head size

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.kv_bytes_per_token_per_dtype_byte * dtype_bytes


def model_facts(config) -> ModelFacts:
    """Parameter count (the model built on the meta device: no memory, no weights) and KV-cache size per token."""
    from olmocr_rl.model.families import head_dim
    from olmocr_rl.model.loading import meta_model

    parameters = sum(p.numel() for p in meta_model(config).parameters())
    text = config.get_text_config()
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return ModelFacts(parameters=parameters,
                      kv_bytes_per_token_per_dtype_byte=2 * text.num_hidden_layers * kv_heads * head_dim(text))


def check_fit(
    facts: ModelFacts,
    *,
    gpu_bytes: int,
    utilization: float,
    max_model_length: int,
    engine_dtype: str,
    reference_model: bool = False,
    single_process: bool = True,
    tensor_parallel: int = 1,
) -> str | None:
    """None when engine and trainer fit on the GPU; otherwise one line with the numbers and what to change.

    With ``tensor_parallel`` > 1 the engine's weights and KV cache are split over that many GPUs.
    """
    dtype_bytes = DTYPE_BYTES[engine_dtype]
    weights = facts.parameters * dtype_bytes // tensor_parallel
    kv = facts.kv_bytes_per_token(dtype_bytes) * max_model_length // tensor_parallel
    engine_need = weights + kv + ENGINE_RUNTIME_BYTES
    trainer_need = facts.parameters * (10 if reference_model else 8) if single_process else 0
    engine_share = utilization * gpu_bytes

    def gib(n: float) -> str:
        return f"{n / GIB:.1f} GiB"

    split = f", split over {tensor_parallel} GPUs" if tensor_parallel > 1 else ""
    engine_text = (f"the colocated vLLM engine needs {gib(engine_need)} ({gib(weights)} {engine_dtype} weights of "
                   f"{facts.parameters / 1e9:.2f}B parameters{split} + {gib(kv)} KV cache for one {max_model_length:,}-token "
                   f"sequence + {gib(ENGINE_RUNTIME_BYTES)} runtime)")
    trainer_text = (f"the trainer needs at least {gib(trainer_need)} (bf16 weights, gradients and AdamW state"
                    f"{' and the reference model' if reference_model else ''}, before activations)")
    needed = math.ceil(engine_need / gpu_bytes * 100) / 100  # the smallest setting (in steps of 0.01) that holds vLLM
    if engine_need > gpu_bytes:
        return (f"colocate does not fit one {gib(gpu_bytes)} GPU: {engine_text}, more than the whole GPU; split the "
                f"engine with --vllm_tensor_parallel_size (now {tensor_parallel}), give vLLM GPUs of its own "
                "(--vllm_mode server), or lower --vllm_max_model_length / --max_completion_length")
    if trainer_need > gpu_bytes * (1 - needed):
        return (f"colocate does not fit one {gib(gpu_bytes)} GPU: {engine_text} and {trainer_text}; give vLLM GPUs "
                "of its own (--vllm_mode server), shard the trainer over more GPUs (DeepSpeed ZeRO-3 / FSDP), or "
                "lower --vllm_max_model_length / --max_completion_length")
    if engine_need > engine_share:
        return (f"--vllm_gpu_memory_utilization {utilization:g} gives vLLM {gib(engine_share)} of the "
                f"{gib(gpu_bytes)} GPU, but {engine_text}; use --vllm_gpu_memory_utilization {needed:.2f}"
                + (f" (leaving {gib(gpu_bytes * (1 - needed))} to the trainer, which needs {gib(trainer_need)})"
                   if single_process else ""))
    if trainer_need > gpu_bytes - engine_share:
        allowed = math.floor((gpu_bytes - trainer_need) / gpu_bytes * 100) / 100
        return (f"--vllm_gpu_memory_utilization {utilization:g} leaves the trainer {gib(gpu_bytes - engine_share)}, "
                f"but {trainer_text}; use --vllm_gpu_memory_utilization {allowed:.2f} (vLLM needs "
                f"{gib(engine_need)}, {engine_need / gpu_bytes:.2f} of the GPU)")
    return None


def colocate_memory_problem(cfg) -> str | None:
    """On a CUDA GPU: do the colocated engine and the trainer fit (olmocr_rl.model.colocate_memory)? From the config only."""
    if not cfg.environment.cuda:
        return None  # vLLM's CPU engine takes its KV cache from RAM (VLLM_CPU_KVCACHE_SPACE)
    import torch
    from transformers import AutoConfig

    from olmocr_rl.model.families import FAMILIES
    from olmocr_rl.model.loading import ModelLoadError, resolve_model_path
    from olmocr_rl.ranks import local_rank

    try:
        config = AutoConfig.from_pretrained(resolve_model_path(cfg.model_name, cache_dir=cfg.cache_dir))
    except (OSError, ValueError, ModelLoadError) as exc:  # the model load right after reports it properly
        logger.warning("colocate memory check skipped: no config for %s (%s)", cfg.model_name, exc)
        return None
    if config.model_type not in FAMILIES:
        return None  # load_model_and_processor names the supported types
    gpu_bytes = torch.cuda.get_device_properties(local_rank()).total_memory
    problem = check_fit(
        model_facts(config), gpu_bytes=gpu_bytes, utilization=cfg.vllm_gpu_memory_utilization,
        max_model_length=cfg.vllm_max_model_length, engine_dtype=cfg.vllm_engine_dtype,
        reference_model=cfg.beta > 0, single_process=cfg.num_processes == 1,
        tensor_parallel=cfg.vllm_tensor_parallel_size,
    )
    if problem is None:
        logger.info("colocate memory check: vLLM engine and trainer fit on the %.0f GiB GPU", gpu_bytes / 2**30)
    return problem
