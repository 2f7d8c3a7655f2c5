"""Gradient checkpointing chosen by memory (``--gradient_checkpointing auto``), or forced (``true``/``vision``/``false``).

Recomputing activations in the backward pass (TRL's default) costs about one extra forward: a third
more training FLOPs, paid on every step even when the GPU has room to keep every activation. This
module decides, before the trainer is built, how much of the model must recompute for the run's
largest micro-batch to fit:

* ``off``: nothing recomputes, when weights, gradients, AdamW state and every activation fit;
* ``vision``: only the vision tower's blocks recompute (its ~6.6 k patches a page at 1288 px are
  most of a page prompt's activations), the language model keeps its activations;
* ``partial``: the vision tower and as few decoder layers as needed (evenly spaced) recompute;
* ``full``: every layer recomputes (transformers' gradient checkpointing, what TRL turns on).

The activations are not guessed from a formula: :func:`measure_activation_facts` runs one decoder
layer and one vision block of the model's own architecture (real sizes, random weights, on the CPU,
in the training dtype) under ``torch.autograd.graph.saved_tensors_hooks`` at two lengths, and counts
the bytes autograd keeps per token / per patch (parameters excluded). The micro-batch is the largest
the flags allow: ``--per_device_train_batch_size`` rows of the longest page prompt at
``--target_longest_image_dim`` (the caller passes its image and text token counts) plus
``--max_completion_length`` tokens.

Every choice trains the same numbers (recomputation repeats the same operations); the tests compare
loss and gradients of the three. The memory budget is the GPU's (less a colocated vLLM engine's
share), or the machine's RAM on CPU; with several processes the weights are counted unsharded, so a
sharded run errs towards recomputing. A GPU whose memory cannot be read (or reads as nothing) gets the stock
plan, every layer recomputing, with one warning line (olmocr_rl.model.fallback).
"""

from __future__ import annotations

import functools
import logging
import os
import types
from dataclasses import dataclass

logger = logging.getLogger(__name__)

__all__ = ["ActivationFacts", "CheckpointPlan", "activation_bytes", "apply_checkpointing", "choose_mode",
           "evenly_spaced", "measure_activation_facts", "plan_checkpointing", "plan_for_run"]

GIB = 2**30
#: What the allocator, the CUDA context, the backward's transient gradients and the LM head's chunks may take.
HEADROOM_FRACTION = 0.15
HEADROOM_BYTES = 2 * GIB
#: Training state a parameter costs: bf16 weight, gradient and the two AdamW moments (+2 with a reference model).
STATE_BYTES_PER_PARAMETER = 8


def _size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.1f} MiB"


@dataclass(frozen=True)
class ActivationFacts:
    """Bytes autograd keeps, measured on one layer of each kind; ``*_input`` is what a checkpointed layer keeps."""

    text_per_token: float
    text_input_per_token: int
    text_layers: int
    vision_per_patch: float
    vision_input_per_patch: int
    vision_layers: int


@dataclass(frozen=True)
class CheckpointPlan:
    mode: str  # off | vision | partial (vision + text_layers decoder layers) | full
    reason: str
    text_layers: int = 0  # decoder layers that recompute under our own wrappers ("partial")


def _saved_bytes(run, parameters=()) -> int:
    """Bytes of the distinct tensors autograd saves while ``run()`` builds its graph, weights (``parameters``, and any
    view of them) excluded."""
    import torch

    weights = {p.untyped_storage().data_ptr() for p in parameters}
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sum(storages.values())


def _real(module, dtype):
    """A meta-device module with real CPU storage in ``dtype`` (small random weights, zeroed buffers)."""
    import torch

    module = module.to_empty(device="cpu").to(dtype)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0, 0.02)
        for buffer in module.buffers():
            buffer.zero_()
    return module


def measure_activation_facts(config, dtype) -> ActivationFacts | None:
    """Per-token and per-patch activation bytes of ``config``'s architecture in ``dtype`` (None: unknown layout)."""
    import torch

    from olmocr_rl.model.loading import meta_model

    try:
        model = meta_model(config).model
        text_layer = _real(model.language_model.layers[0], dtype)
        rotary = _real(model.language_model.rotary_emb, dtype)
        block = _real(model.visual.blocks[0], dtype)
    except (AttributeError, IndexError, TypeError) as exc:
        logger.info("activation sizes unknown for %s (%s)", type(config).__name__, exc)
        return None
    text, vision = config.get_text_config(), config.vision_config
    vision_head = vision.hidden_size // vision.num_heads

    def text_bytes(n: int) -> int:
        hidden = torch.zeros(1, n, text.hidden_size, dtype=dtype, requires_grad=True)
        positions = torch.arange(n).view(1, 1, -1).expand(3, 1, -1)
        embeddings = rotary(hidden, positions)
        return _saved_bytes(lambda: text_layer(hidden, attention_mask=None, position_embeddings=embeddings),
                            text_layer.parameters())

    def vision_bytes(n: int) -> int:
        hidden = torch.zeros(n, vision.hidden_size, dtype=dtype, requires_grad=True)
        cos = torch.ones(n, vision_head, dtype=dtype)
        return _saved_bytes(lambda: block(hidden, cu_seqlens=torch.tensor([0, n], dtype=torch.int32),
                                          max_seqlen=n, position_embeddings=(cos, cos)), block.parameters())

    element = torch.finfo(dtype).bits // 8
    try:
        text_per_token = (text_bytes(128) - text_bytes(64)) / 64
        vision_per_patch = (vision_bytes(128) - vision_bytes(64)) / 64
    except (RuntimeError, TypeError) as exc:  # a layer whose forward takes other inputs
        logger.info("activation sizes unknown for %s (%s)", type(config).__name__, exc)
        return None
    return ActivationFacts(
        text_per_token=text_per_token, text_input_per_token=text.hidden_size * element,
        text_layers=text.num_hidden_layers, vision_per_patch=vision_per_patch,
        vision_input_per_patch=vision.hidden_size * element, vision_layers=vision.depth,
    )


def activation_bytes(facts: ActivationFacts, *, tokens: int, patches: int, vision: bool, text_layers: int) -> float:
    """Activation bytes of a forward over ``tokens`` language-model tokens and ``patches`` vision patches, with the
    vision blocks recomputing (``vision``) and ``text_layers`` of the decoder layers recomputing.

    A recomputing layer keeps its input; while one recomputes in the backward pass its activations exist again."""
    checkpointed = min(max(text_layers, 0), facts.text_layers)
    text = (facts.text_per_token * tokens * (facts.text_layers - checkpointed)
            + facts.text_input_per_token * tokens * checkpointed + (facts.text_per_token * tokens if checkpointed else 0))
    if vision:
        vision_bytes = facts.vision_input_per_patch * patches * facts.vision_layers + facts.vision_per_patch * patches
    else:
        vision_bytes = facts.vision_per_patch * patches * facts.vision_layers
    return text + vision_bytes


def choose_mode(facts: ActivationFacts | None, *, budget_bytes: float, state_bytes: float, tokens: int,
                patches: int) -> CheckpointPlan:
    """The least recomputation whose activations fit ``budget_bytes`` beside ``state_bytes`` of weights and optimizer:
    none, then the vision tower, then the vision tower and as few decoder layers as needed, then everything."""
    if facts is None:
        return CheckpointPlan("full", "activation sizes unknown for this architecture: every layer recomputes")
    room = budget_bytes * (1 - HEADROOM_FRACTION) - HEADROOM_BYTES - state_bytes
    shape = f"{tokens:,} tokens and {patches:,} patches per micro-batch, {_size(max(room, 0))} for activations"

    def need(vision: bool, layers: int) -> float:
        return activation_bytes(facts, tokens=tokens, patches=patches, vision=vision, text_layers=layers)

    if need(False, 0) <= room:
        return CheckpointPlan("off", f"nothing recomputes: {_size(need(False, 0))} of activations ({shape})")
    for layers in range(facts.text_layers):
        if need(True, layers) <= room:
            what = "the vision tower" + (f" and {layers} of {facts.text_layers} decoder layers" if layers else "")
            return CheckpointPlan("vision" if not layers else "partial",
                                  f"{what} recompute: {_size(need(True, layers))} of activations ({shape})",
                                  text_layers=layers)
    return CheckpointPlan("full", f"every layer recomputes: {_size(need(True, facts.text_layers))} of "
                                  f"activations ({shape})", text_layers=facts.text_layers)


def _memory_budget(cfg) -> float | None:
    """Bytes training may use on this process's device: the GPU less a colocated engine's share, or the RAM.

    None when the GPU's memory cannot be read or reads as nothing: the plan is then the stock one (every layer
    recomputes), said in one warning line (olmocr_rl.model.fallback)."""
    if cfg.environment.cuda:
        import math

        import torch

        from olmocr_rl.model.fallback import fall_back, reason_of
        from olmocr_rl.ranks import local_rank

        stock = "every layer recomputing (TRL's gradient checkpointing)"
        try:
            total = float(torch.cuda.get_device_properties(local_rank()).total_memory)
        except Exception as exc:  # noqa: BLE001 - no device at this rank, a CUDA error: plan as TRL does
            fall_back("--gradient_checkpointing auto", f"the GPU's memory could not be read: {reason_of(exc)}", stock)
            return None
        if not (math.isfinite(total) and total > 0):
            fall_back("--gradient_checkpointing auto", f"the GPU's memory reads as {total:g} bytes", stock)
            return None
        if cfg.vllm_mode == "colocate":
            total *= 1 - cfg.vllm_gpu_memory_utilization
        return total
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def plan_checkpointing(cfg, config, *, image_tokens: int, text_tokens: int) -> CheckpointPlan:
    """``--gradient_checkpointing`` resolved for the model of ``config`` (a transformers config), a page prompt being
    at most ``image_tokens`` image tokens and ``text_tokens`` other tokens (the config layer knows both)."""
    import torch

    from olmocr_rl.model.colocate_memory import model_facts

    forced = {"true": "full", "false": "off", "vision": "vision"}.get(cfg.gradient_checkpointing)
    if forced:
        return CheckpointPlan(forced, f"--gradient_checkpointing {cfg.gradient_checkpointing}")
    dtype = torch.bfloat16 if cfg.environment.cuda else torch.float32
    rows = cfg.per_device_train_batch_size
    tokens = rows * (image_tokens + text_tokens + cfg.max_completion_length)
    # 2 x 2 patches merge into one image token; a frozen tower keeps no activations for the backward pass
    patches = 0 if getattr(cfg, "freeze_vision_tower", False) else rows * image_tokens * 4
    per_parameter = STATE_BYTES_PER_PARAMETER + (2 if cfg.beta > 0 else 0)
    state = model_facts(config).parameters * per_parameter * (torch.finfo(dtype).bits // 16)
    budget = _memory_budget(cfg)
    if budget is None:
        return CheckpointPlan("full", "--gradient_checkpointing auto: the GPU's memory is unknown: every layer "
                                      "recomputes")
    plan = choose_mode(measure_activation_facts(config, dtype), budget_bytes=budget, state_bytes=state,
                       tokens=tokens, patches=patches)
    return CheckpointPlan(plan.mode, f"--gradient_checkpointing auto: {plan.reason}")


def plan_for_run(cfg, *, image_tokens: int, text_tokens: int) -> CheckpointPlan:
    """:func:`plan_checkpointing` for ``--model_name``, from its config alone (before the model loads). A config that
    cannot be read plans every layer (the model load right after reports why)."""
    from transformers import AutoConfig

    from olmocr_rl.model.loading import ModelLoadError, resolve_model_path

    try:
        config = AutoConfig.from_pretrained(resolve_model_path(cfg.model_name, cache_dir=cfg.cache_dir))
    except (OSError, ValueError, ModelLoadError) as exc:
        if cfg.gradient_checkpointing != "auto":
            return plan_checkpointing(cfg, None, image_tokens=image_tokens, text_tokens=text_tokens)
        return CheckpointPlan("full", f"--gradient_checkpointing auto: no config for {cfg.model_name} ({exc})")
    return plan_checkpointing(cfg, config, image_tokens=image_tokens, text_tokens=text_tokens)


def _recompute_in_backward(layer) -> None:
    """Make ``layer`` recompute its activations in the backward pass of forwards with gradients."""
    from torch.utils.checkpoint import checkpoint

    stock = type(layer).forward  # the class's: a deep copy of the model rebinds the wrapper to the copy

    def forward(self, *args, **kwargs):
        import torch

        if self.training and torch.is_grad_enabled():
            return checkpoint(functools.partial(stock, self, **kwargs), *args, use_reentrant=False)
        return stock(self, *args, **kwargs)

    layer.forward = types.MethodType(forward, layer)
    layer._olmocr_rl_recomputes = True  # read by the batched vision attention's fallback (model.vision_speedups)


def evenly_spaced(count: int, total: int) -> list[int]:
    """``count`` of ``range(total)``, spread evenly (0 and ``total`` included as the ends)."""
    return [i for i in range(total) if (i + 1) * count // total > i * count // total]


def apply_checkpointing(model, plan: CheckpointPlan) -> str | None:
    """Install the ``vision`` / ``partial`` plans on ``model`` (``full`` is TRL's flag, ``off`` nothing); returns
    what was done for the log.

    Done by wrapping layers' ``forward`` rather than through transformers' flag, which TRL switches off and back
    on around generation for the whole model (which would turn a partial plan into a full one)."""
    if plan.mode not in ("vision", "partial"):
        return None
    inner = getattr(model, "model", None)
    blocks = [block for block in getattr(getattr(inner, "visual", None), "blocks", None) or []
              if any(p.requires_grad for p in block.parameters())]  # a frozen block has nothing to recompute for
    layers = list(getattr(getattr(inner, "language_model", None), "layers", None) or [])
    for block in blocks:
        _recompute_in_backward(block)
    chosen = evenly_spaced(plan.text_layers, len(layers)) if plan.mode == "partial" else []
    for index in chosen:
        _recompute_in_backward(layers[index])
    return f"{len(blocks)} vision blocks" + (f" and {len(chosen)} of {len(layers)} decoder layers" if chosen else "")
