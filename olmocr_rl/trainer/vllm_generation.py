"""vLLM rollouts that sample from the prompt the trainer scores, in the trainer's dtype.

:class:`PageVLLMGeneration`, a small subclass of TRL's ``VLLMGeneration`` swapped in only while the trainer is
built (:func:`page_vllm_generation`), guarantees what the pinned TRL does not:

* colocate mode: vLLM sees each image as one placeholder, so the prompt it expands is token for token the
  trainer's (TRL hands it the already expanded run of ``<|image_pad|>`` tokens); server mode is left alone;
* image and video pad tokens are never sampled (vLLM's ``bad_words``, ``--vllm_block_image_tokens``; the
  ``generation_kwargs`` come from ``config.grpo.vllm_sampling_kwargs``);
* the colocated engine runs in ``--vllm_dtype`` (default: the trainer's dtype);
* vLLM's encoder cache is reset with every weight sync (the colocated engine's, or the server's
  ``/reset_encoder_cache``);
* Qwen3-VL-MoE's expert weights are synced in the released layout (``_iter_named_params``), and on the CPU
  engine packed again after each sync (:func:`reprepack_cpu_moe_weights`); on CPU the linear-weight
  repacking that drops TRL's ``weight_loader`` is switched off;
* without CUDA, server mode pushes weights over gloo (TRL's push needs NCCL) to a server started with
  :func:`olmocr_rl.trainer.gloo_push.server_flags`;
* with ``--async_generation`` (server mode), the client answers from what the trainer's
  :class:`~olmocr_rl.trainer.async_rollouts.RolloutPipeline` sent ahead, and a weight push happens only when
  ``--max_staleness`` needs it, after the request in flight;
* with LoRA (``--use_peft``), the merged weights are computed out of place
  (``olmocr_rl.model.adapters.merged_named_parameters``), so the frozen base never moves; with sharded weights
  (ZeRO-3, FSDP2) from the gathered shards (:func:`_gathered_merged_parameters`), never TRL's in-place merge.

docs/vllm.md ("What was wrong, and the fix") has each problem, how it showed and what was measured.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Sequence

from olmocr_rl.model.families import FAMILIES, vision_pad_ids

logger = logging.getLogger(__name__)

def collapse_image_runs(prompt_ids: Sequence[int], pad_ids: Sequence[int]) -> list[int]:
    """``prompt_ids`` with every run of one pad token shortened to a single token.

    This is the form a vLLM multimodal processor expects from a token prompt: one placeholder per image,
    which it expands to the image's feature count. Runs of different pad tokens stay separate.
    """
    pads = set(pad_ids)
    out: list[int] = []
    for token in prompt_ids:
        if token in pads and out and out[-1] == token:
            continue
        out.append(token)
    return out


def model_family(model):
    """The :class:`~olmocr_rl.model.families.Family` of the trainer's model, or None (a model of another kind)."""
    return FAMILIES.get(getattr(getattr(model, "config", None), "model_type", None))


def disable_cpu_weight_repacking() -> None:
    """vLLM CPU only: keep linear layers as plain parameters so a weight sync can load them (colocated engine, or
    the server's worker through :mod:`olmocr_rl.trainer.gloo_worker`).

    Two repacking paths replace a layer's weight by an empty parameter: oneDNN's (any dtype), and, for a
    bfloat16/float16 engine on a CPU with AMX tiles, the sgl-kernel one (``check_cpu_sgl_kernel``), which is what
    an engine in bfloat16 beside a float32 trainer hit at its first weight sync.
    """
    import vllm._custom_ops as ops
    from vllm.model_executor.layers import utils as layer_utils

    ops._supports_onednn = False
    layer_utils.check_cpu_sgl_kernel = lambda n, k, dtype: False


def _sharded_parameters(accelerator) -> bool:
    """DeepSpeed ZeRO-3 or FSDP: each process holds a shard of the weights (a merge must gather them)."""
    state = accelerator.state
    zero3 = state.deepspeed_plugin is not None and state.deepspeed_plugin.zero_stage == 3
    return zero3 or getattr(state, "fsdp_plugin", None) is not None


def _gathered_merged_parameters(model, accelerator):
    """LoRA with sharded weights: the merged weights, out of place, whole. ZeRO-3 gathers every partition for the
    walk (``deepspeed.zero.GatheredParameters``); FSDP2's parameters are DTensors, so each merged value (base +
    B @ A on the shards) is gathered with ``full_tensor``. Every process walks the same names (collectives)."""
    from olmocr_rl.model.adapters import merged_named_parameters

    gather = contextlib.nullcontext()
    if accelerator.state.deepspeed_plugin is not None:
        import deepspeed

        gather = deepspeed.zero.GatheredParameters(list(model.parameters()))
    with gather:
        for name, value in merged_named_parameters(model):
            full_tensor = getattr(value, "full_tensor", None)
            yield name, full_tensor() if callable(full_tensor) else value


def reprepack_cpu_moe_weights(model) -> int:
    """vLLM CPU only: put the experts of every MoE layer back into the CPU kernel's packed layout after a sync.

    vLLM's CPU MoE kernel packs each layer's expert weights once, after the checkpoint loads; TRL's weight sync
    writes the new weights through the layer's weight loader in the plain layout, which the kernel then reads as
    packed (mean |vLLM - trainer| log-prob 0.02-0.04 from the first sync of a random tiny Qwen3-VL-MoE, the
    vision and router untouched). Packing keeps shapes, so the new weights are packed in place. A kernel that
    also padded the expert width (a width not a multiple of its alignment) cannot be followed: error.
    ``model`` is the engine's model (colocated: the driver worker's; server: the worker's). Returns the number of
    layers re-packed.
    """
    from vllm._custom_ops import cpu_prepack_moe_weight
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    packed = 0
    for module in model.modules():
        kernel = getattr(getattr(getattr(module, "quant_method", None), "moe_kernel", None), "fused_experts", None)
        if not isinstance(kernel, CPUUnquantizedExperts) or getattr(kernel, "_use_zentorch", False):
            continue
        width = kernel.moe_config.intermediate_size_per_partition
        if kernel._padded_intermediate_size(kernel.moe_config) != width:
            raise RuntimeError(
                f"vLLM's CPU MoE kernel padded the expert width {width} (to "
                f"{kernel._padded_intermediate_size(kernel.moe_config)}), and a weight sync cannot follow the padding: "
                "use a model whose moe_intermediate_size is a multiple of 32, or a GPU")
        for name in ("w13_weight", "w2_weight"):
            weight = getattr(module, name)
            weight.data.copy_(cpu_prepack_moe_weight(weight.data, kernel.isa))
        packed += 1
    return packed


def _server_client_class(base: type, pipeline) -> type:
    """TRL's server client, pushing over gloo where CUDA is absent (TRL's NCCL push needs it: trainer/gloo_push.py)
    and answering from what ``pipeline`` sent ahead with ``--async_generation`` (trainer/async_rollouts.py)."""
    import torch

    if not torch.cuda.is_available():
        from olmocr_rl.trainer.gloo_push import client_class

        base = client_class()
    if pipeline is not None:
        from olmocr_rl.trainer.async_rollouts import prefetching_client

        base = prefetching_client(base, pipeline)
    return base


def _generation_class():
    """Build the subclass lazily: importing TRL's vLLM module imports vLLM."""
    from trl.generation import vllm_generation as trl_vllm

    class PageVLLMGeneration(trl_vllm.VLLMGeneration):
        """TRL's vLLM backend with the fixes described in this module's docstring."""

        #: extra ``vllm.LLM`` arguments for the colocated engine (e.g. ``dtype``), set by the factory.
        engine_kwargs: dict[str, Any] = {}
        #: server mode with ``--async_generation``: the trainer's RolloutPipeline, set by the factory.
        pipeline = None

        def _init_vllm(self):
            import torch

            if self.mode == "colocate" and not torch.cuda.is_available():
                disable_cpu_weight_repacking()
            base_llm, base_client = trl_vllm.LLM, trl_vllm.VLLMClient
            extra = dict(self.engine_kwargs)

            def llm_with_engine_kwargs(*args, **kwargs):
                logger.info("colocated vLLM engine: %s", ", ".join(f"{k}={v}" for k, v in sorted(extra.items())))
                return base_llm(*args, **{**kwargs, **extra})

            trl_vllm.LLM = llm_with_engine_kwargs  # TRL builds the engine by this module-level name
            if self.mode == "server":  # TRL builds the server's client by this module-level name
                trl_vllm.VLLMClient = _server_client_class(base_client, self.pipeline)
            try:
                super()._init_vllm()
            finally:
                trl_vllm.LLM, trl_vllm.VLLMClient = base_llm, base_client

        def _iter_named_params(self):
            from olmocr_rl.model.adapters import is_peft_model, merged_named_parameters

            if is_peft_model(self.model) and _sharded_parameters(self.accelerator):
                named = _gathered_merged_parameters(self.model, self.accelerator)  # never TRL's in-place merge
            elif is_peft_model(self.model):
                named = merged_named_parameters(self.model)
            else:
                named = super()._iter_named_params()
            # vLLM 0.31 reads Qwen3-VL-MoE's stacked experts in the released layout, the transpose of the live one
            # (model.families.Family.released_transposed); everything else goes as it is.
            family = model_family(self.model)
            suffixes = family.released_transposed if family else ()
            for name, param in named:
                yield name, (param.transpose(1, 2) if suffixes and name.endswith(suffixes) else param)

        def sync_weights(self):
            pipeline = self.pipeline if self.mode == "server" else None
            if pipeline is not None and not pipeline.push_due():  # --max_staleness lets the server's weights stay
                return
            super().sync_weights()  # with a pipeline, the client's push first waits for the request in flight
            if pipeline is not None:
                pipeline.pushed()
            # TRL resets only the prefix cache; vLLM also keeps the vision tower's outputs per image, and a
            # page seen again (next epoch, or a repeated page) would be read with the old weights' features.
            if self.mode == "colocate":
                import torch

                family = model_family(self.model)
                if not torch.cuda.is_available() and family is not None and family.moe:  # vLLM's CPU engine
                    reprepack_cpu_moe_weights(self.llm.llm_engine.model_executor.driver_worker.model_runner.model)
                self.llm.llm_engine.reset_encoder_cache()
            elif self.accelerator.is_main_process:
                # `trl vllm-serve` runs vLLM's server in dev mode, which has this endpoint (empty reply).
                url = f"{self.vllm_client.base_url}/reset_encoder_cache"
                response = self.vllm_client.session.post(url)
                if response.status_code != 200:
                    raise RuntimeError(f"vLLM server: POST {url} answered {response.status_code} {response.text[:200]}; "
                                       "start it with `trl vllm-serve` (vLLM's dev mode endpoints)")

        def generate(self, prompts, images, num_generations, profiler=None):
            if self.mode == "colocate" and images is not None:
                pad_ids = vision_pad_ids(self.processing_class)
                prompts = [collapse_image_runs(ids, pad_ids) for ids in prompts]
            # The trainer keeps its own (expanded) prompt ids; only vLLM's view of the prompt changes.
            return super().generate(prompts, images, num_generations, profiler=profiler)

    return PageVLLMGeneration


@contextlib.contextmanager
def page_vllm_generation(engine_kwargs: dict[str, Any] | None = None, pipeline=None) -> Iterator[type]:
    """While the trainer is built, make TRL's GRPOTrainer use :class:`PageVLLMGeneration`.

    ``engine_kwargs`` go to ``vllm.LLM`` for the colocated engine (TRL passes no dtype of its own); ``pipeline``
    (server mode, ``--async_generation``) is the trainer's :class:`~olmocr_rl.trainer.async_rollouts.RolloutPipeline`.
    """
    from trl.trainer import grpo_trainer

    generation_cls = type("PageVLLMGeneration", (_generation_class(),),
                          {"engine_kwargs": dict(engine_kwargs or {}), "pipeline": pipeline})
    original = grpo_trainer.VLLMGeneration
    grpo_trainer.VLLMGeneration = generation_cls
    try:
        yield generation_cls
    finally:
        grpo_trainer.VLLMGeneration = original
