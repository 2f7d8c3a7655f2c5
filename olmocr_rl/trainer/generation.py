"""Compiled static-cache decoding on the HF generation path (``--compiled_generation``).

TRL 1.16 builds its HF ``GenerationConfig`` with ``disable_compile=True`` and a dynamic KV cache, so
every decoding step of ``model.generate`` is one eager forward of the whole model: at batch G and one
token per step, kernel launches, not FLOPs, set the pace. :class:`CompiledGenerationMixin` turns on what
transformers 5.17 already offers for this:

* a **static KV cache** (``cache_implementation="static"``), whose tensors keep one shape for the whole
  generation, so the decoding step can be compiled;
* **compiled decoding**: ``generate`` compiles the one-token forward with ``torch.compile`` (the
  ``CompileConfig`` defaults: inductor, CUDA graphs) and runs the prefill eagerly;
* **bucketed prompt lengths**: the cache is sized for the longest prompt of the batch rounded up to a
  multiple of :data:`PROMPT_BUCKET` tokens, plus ``max_completion_length``. transformers keeps the
  largest cache size seen so far, so the compiled step is built once per bucket reached, not once per
  prompt length (pages of one size give one bucket for the whole run).

Sampling is unchanged: the same logits processors, the same random draws in the same order. The extra
cache positions are masked out, so the generated ids equal the stock path's under a fixed seed
(``tests/unit/test_generation.py`` compares them on CPU). vLLM backends are not affected.

Default ``auto``: on with a CUDA GPU, off on CPU, where it does not pay; the figures on both
(``scripts/bench/bench_generation.py``, the gpu_check rows) are in docs/gpu_check.md.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

__all__ = ["CompiledGenerationMixin", "PROMPT_BUCKET", "bucketed_cache_length", "enable_compiled_generation"]

#: Prompt lengths are rounded up to a multiple of this many tokens when the static cache is sized.
PROMPT_BUCKET = 256


def bucketed_cache_length(prompt_lengths, max_new_tokens: int, bucket: int = PROMPT_BUCKET) -> int:
    """Static-cache size for a generation batch: the longest prompt rounded up to ``bucket``, plus the completion."""
    longest = max(prompt_lengths)
    return -(-longest // bucket) * bucket + max_new_tokens


def enable_compiled_generation(generation_config, *, compile_on_cpu: bool = False) -> None:
    """Switch a HF ``GenerationConfig`` (TRL's ``trainer.generation_config``) to a static cache and compiled decoding.

    ``compile_on_cpu``: transformers compiles only on accelerators unless told otherwise; the tests and the CPU
    bench set it to run the compiled path on CPU.
    """
    from transformers import CompileConfig

    compile_config = CompileConfig()
    if compile_on_cpu:
        compile_config._compile_all_devices = True
    generation_config.cache_implementation = "static"
    generation_config.disable_compile = False
    generation_config.compile_config = compile_config


class CompiledGenerationMixin:
    """Sizes the static cache of each HF generation batch by its bucketed prompt length (see the module).

    ``compiled_generation`` is set by :func:`olmocr_rl.trainer.build.configure_speedups`, which also switches
    the trainer's generation config with :func:`enable_compiled_generation`.
    """

    compiled_generation = False

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
        if self.compiled_generation and not self.use_vllm and not self.use_transformers_continuous_batching:
            self.generation_config.max_cache_len = bucketed_cache_length(
                [len(ids) for ids in prompt_ids], self.max_completion_length)
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs)
