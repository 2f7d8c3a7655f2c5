"""Will a colocated vLLM engine and the trainer fit on one GPU? Checked before the model loads.

With ``--vllm_mode colocate`` each training process shares its GPU with a vLLM engine that may take
``--vllm_gpu_memory_utilization`` of it. That share must hold the engine's copy of the weights plus a
KV cache for at least one sequence of ``--vllm_max_model_length`` tokens (vLLM refuses to start
otherwise) plus its runtime (activations of a prefill, CUDA graphs); the rest must hold the trainer's
weights, gradients and AdamW state. Both are estimated from the model's config alone, so a recipe that
cannot fit stops in seconds with the numbers and the value to use, not after minutes of loading
(:func:`colocate_memory_problem`, the training CLI's preflight).

The trainer estimate is a floor for one process without sharding (:func:`trainer_bytes`), activations on top:

* full fine-tuning: bf16 weights, gradients and the two AdamW moments, 8 bytes a trained parameter; a frozen
  part (``--freeze_vision_tower``, ``--freeze_vision_merger``) has weights only, 2 bytes; a ``--beta`` > 0
  reference model is another bf16 copy of every weight;
* LoRA (``--use_peft``): the frozen bf16 base, 2 bytes a parameter, plus the adapters in fp32 (PEFT keeps
  them so), 16 bytes an adapter parameter (weight, gradient, two moments), plus the modules trained in full
  (``--lora_modules_to_save``), 8 bytes each beside their frozen original; no reference model (TRL turns
  the adapters off for it).

Several processes (:func:`sharded_trainer_bytes`, per GPU): DDP keeps the one-process floor on every GPU.
DeepSpeed and accelerate's FSDP2 keep fp32 master state under bf16 mixed precision: 16 bytes a trained
parameter (bf16 weight 2 + bf16 gradient 2 + fp32 master and two moments 12 under ZeRO; fp32 weight 4 +
fp32 gradient 4 + two fp32 moments 8 under FSDP2, which upcasts what trains), frozen weights and the reference
model in bf16. ZeRO-2 shards the gradients and the fp32 state over N GPUs and keeps every bf16 weight (and a
full reference model) on each; ZeRO-3 and FSDP2 shard all of it, so a GPU holds 1/N. In fp32 (no mixed
precision, the CPU runs) FSDP2's frozen weights take 4 bytes. The FSDP2 figure is the bytes each CPU process
holds in the suite's two-process run (telemetry.rank_memory), to the byte.
When the trainer does not fit, the
refusal names what would make it fit, with these numbers: ``--use_peft``, ``--freeze_vision_tower``, ...
"""

from __future__ import annotations

import logging
import math
import os
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
    vision_tower_parameters: int = 0  # the ViT blocks and patch embedding (--freeze_vision_tower)
    vision_merger_parameters: int = 0  # the projector into the language model (--freeze_vision_merger)
    lora_parameters: int | None = 0  # the adapters the run's --lora_* flags put on this model (None: they
    #                                   cannot be placed, e.g. the default MLP targets of a MoE model)
    lora_saved_parameters: int | None = 0  # --lora_modules_to_save

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.kv_bytes_per_token_per_dtype_byte * dtype_bytes


@dataclass(frozen=True)
class Training:
    """What the trainer trains (its memory floor depends on it)."""

    use_peft: bool = False
    freeze_vision_tower: bool = False
    freeze_vision_merger: bool = False
    reference_model: bool = False  # --beta > 0

    def describe(self) -> str:
        if self.use_peft:
            return "the frozen bf16 base weights + the LoRA adapters' fp32 weights, gradients and AdamW state"
        frozen = " and ".join(part for part, on in (("vision tower", self.freeze_vision_tower),
                                                     ("merger", self.freeze_vision_merger)) if on)
        return ("bf16 weights, gradients and AdamW state" + (f" (the {frozen} frozen: weights only)" if frozen else "")
                + (" and the reference model" if self.reference_model else ""))


def trainer_bytes(facts: ModelFacts, training: Training) -> int:
    """The trainer's memory floor in bytes (module docstring), activations not counted."""
    if training.use_peft:
        if facts.lora_parameters is None:
            raise ValueError("the --lora_* flags place no adapters on this model; the LoRA plan reports why")
        return 2 * facts.parameters + 16 * facts.lora_parameters + 8 * facts.lora_saved_parameters
    frozen = (facts.vision_tower_parameters if training.freeze_vision_tower else 0) + (
        facts.vision_merger_parameters if training.freeze_vision_merger else 0)
    reference = 2 * facts.parameters if training.reference_model else 0
    return 8 * (facts.parameters - frozen) + 2 * frozen + reference


#: The engines :func:`sharded_trainer_bytes` knows (``ddp``: every GPU holds the one-process floor).
SHARDING_ENGINES = ("ddp", "zero2", "zero3", "fsdp2")


def sharded_trainer_bytes(facts: ModelFacts, training: Training, *, engine: str, processes: int,
                          mixed_precision: bool = True) -> int:
    """The trainer's memory floor on each of ``processes`` GPUs under ``engine`` (module docstring)."""
    if engine not in SHARDING_ENGINES:
        raise ValueError(f"engine {engine!r}: one of {', '.join(SHARDING_ENGINES)}")
    if engine == "ddp" or processes == 1:
        return trainer_bytes(facts, training)
    if training.use_peft:
        if facts.lora_parameters is None:
            raise ValueError("the --lora_* flags place no adapters on this model; the LoRA plan reports why")
        trained = facts.lora_parameters + facts.lora_saved_parameters
        frozen, reference = facts.parameters, 0
    else:
        frozen = (facts.vision_tower_parameters if training.freeze_vision_tower else 0) + (
            facts.vision_merger_parameters if training.freeze_vision_merger else 0)
        trained, reference = facts.parameters - frozen, facts.parameters if training.reference_model else 0
    frozen_bytes = 2 if mixed_precision else 4
    if engine == "zero2":  # bf16 weights and reference whole on each GPU; gradients and fp32 state sharded
        return 2 * (trained + frozen + reference) + math.ceil(14 * trained / processes)
    return math.ceil((16 * trained + frozen_bytes * frozen + 2 * reference) / processes)


def engine_from_environment(env) -> str:
    """The sharding engine ``accelerate launch`` set up for this process (its ACCELERATE_* variables)."""
    if env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        stage = env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
        return "zero3" if stage == "3" else "zero2"
    if env.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return "fsdp2"
    return "ddp"


def model_facts(config, lora: dict | None = None) -> ModelFacts:
    """Parameter counts (the model built on the meta device: no memory, no weights) and KV-cache size per token.

    ``lora``: the run's ``r``, ``target_modules`` and ``modules_to_save`` (olmocr_rl.model.adapters.adapter_plan);
    default: the --lora_* defaults."""
    from olmocr_rl.model.adapters import LORA_TARGET_MODULES, AdapterError, adapter_plan
    from olmocr_rl.model.families import head_dim, vision_merger_modules
    from olmocr_rl.model.loading import meta_model

    model = meta_model(config)
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    visual = model.model.visual
    mergers = vision_merger_modules(config)  # Qwen3-VL's deepstack mergers are mergers too
    merger = sum(count(module) for name, module in visual.named_children() if name in mergers)
    try:
        plan = adapter_plan(model, alpha=1, dropout=0.0, with_config=False,
                            **(lora or {"r": 16, "target_modules": LORA_TARGET_MODULES}))
        adapters, saved = plan.adapter_parameters, plan.saved_parameters
    except AdapterError:  # e.g. the default MLP targets on a MoE model (its experts are no linear layers)
        adapters = saved = None  # a --use_peft run stops on its LoRA plan before this check
    text = config.get_text_config()
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return ModelFacts(parameters=count(model),
                      kv_bytes_per_token_per_dtype_byte=2 * text.num_hidden_layers * kv_heads * head_dim(text),
                      vision_tower_parameters=count(visual) - merger, vision_merger_parameters=merger,
                      lora_parameters=adapters, lora_saved_parameters=saved)


def _ways_out(facts: ModelFacts, training: Training, room: float) -> list[str]:
    """The trainer-side flags that would make it fit in ``room`` bytes, with what it would need."""
    ways = []
    if not training.use_peft and facts.lora_parameters is not None:
        ways.append(("--use_peft", Training(use_peft=True)))
    if not training.use_peft and not training.freeze_vision_tower:
        frozen_tower = Training(freeze_vision_tower=True, freeze_vision_merger=training.freeze_vision_merger,
                                reference_model=training.reference_model)
        ways.append(("--freeze_vision_tower", frozen_tower))
    return [f"{flag} (the trainer then needs {trainer_bytes(facts, other) / GIB:.1f} GiB)"
            for flag, other in ways if trainer_bytes(facts, other) <= room]


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
    training: Training | None = None,
    trainer_need_bytes: int | None = None,
) -> str | None:
    """None when engine and trainer fit on the GPU; otherwise one line with the numbers and what to change.

    With ``tensor_parallel`` > 1 the engine's weights and KV cache are split over that many GPUs. ``training``
    says what is trained (default: every weight, with a reference model when ``reference_model``).
    """
    training = training or Training(reference_model=reference_model)
    dtype_bytes = DTYPE_BYTES[engine_dtype]
    weights = facts.parameters * dtype_bytes // tensor_parallel
    kv = facts.kv_bytes_per_token(dtype_bytes) * max_model_length // tensor_parallel
    engine_need = weights + kv + ENGINE_RUNTIME_BYTES
    if trainer_need_bytes is not None:  # several processes: the sharded per-GPU floor (sharded_trainer_bytes)
        trainer_need, single_process = trainer_need_bytes, True
    else:
        trainer_need = trainer_bytes(facts, training) if single_process else 0
    engine_share = utilization * gpu_bytes

    def gib(n: float) -> str:
        return f"{n / GIB:.1f} GiB"

    split = f", split over {tensor_parallel} GPUs" if tensor_parallel > 1 else ""
    engine_text = (f"the colocated vLLM engine needs {gib(engine_need)} ({gib(weights)} {engine_dtype} weights of "
                   f"{facts.parameters / 1e9:.2f}B parameters{split} + {gib(kv)} KV cache for one {max_model_length:,}-token "
                   f"sequence + {gib(ENGINE_RUNTIME_BYTES)} runtime)")
    trainer_text = f"the trainer needs at least {gib(trainer_need)} ({training.describe()}, before activations)"
    needed = math.ceil(engine_need / gpu_bytes * 100) / 100  # the smallest setting (in steps of 0.01) that holds vLLM
    if engine_need > gpu_bytes:
        return (f"colocate does not fit one {gib(gpu_bytes)} GPU: {engine_text}, more than the whole GPU; split the "
                f"engine with --vllm_tensor_parallel_size (now {tensor_parallel}), give vLLM GPUs of its own "
                "(--vllm_mode server), or lower --vllm_max_model_length / --max_completion_length")
    if trainer_need > gpu_bytes * (1 - needed):
        lighter = _ways_out(facts, training, gpu_bytes * (1 - needed))
        return (f"colocate does not fit one {gib(gpu_bytes)} GPU: {engine_text} and {trainer_text}; "
                + (f"train less of the model: {' or '.join(lighter)}; or " if lighter else "")
                + "give vLLM GPUs of its own (--vllm_mode server), shard the trainer over more GPUs (DeepSpeed "
                "ZeRO-3 / FSDP), or lower --vllm_max_model_length / --max_completion_length")
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
    lora = {"r": cfg.lora_r, "target_modules": cfg.lora_target_modules, "modules_to_save": cfg.lora_modules_to_save}
    training = Training(use_peft=cfg.use_peft, freeze_vision_tower=cfg.freeze_vision_tower,
                        freeze_vision_merger=cfg.freeze_vision_merger, reference_model=cfg.beta > 0 and not cfg.use_peft)
    facts = model_facts(config, lora)
    engine = engine_from_environment(os.environ)
    per_gpu = None
    if cfg.num_processes > 1 and engine != "ddp" and not (training.use_peft and facts.lora_parameters is None):
        per_gpu = sharded_trainer_bytes(facts, training, engine=engine, processes=cfg.num_processes)
    problem = check_fit(
        facts, gpu_bytes=gpu_bytes, utilization=cfg.vllm_gpu_memory_utilization,
        max_model_length=cfg.vllm_max_model_length, engine_dtype=cfg.vllm_engine_dtype,
        single_process=cfg.num_processes == 1, tensor_parallel=cfg.vllm_tensor_parallel_size, training=training,
        trainer_need_bytes=per_gpu,
    )
    if problem is None:
        logger.info("colocate memory check: vLLM engine and trainer fit on the %.0f GiB GPU", gpu_bytes / 2**30)
    return problem
