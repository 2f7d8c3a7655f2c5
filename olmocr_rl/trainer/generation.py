"""Compiled static-cache decoding on the HF generation path (``--compiled_generation``).

TRL 1.16 builds its HF ``GenerationConfig`` with ``disable_compile=True`` and a dynamic KV cache, so
every decoding step of ``model.generate`` is one eager forward of the whole model: at batch G and one
token per step, kernel launches, not FLOPs, set the pace. With ``compiled_generation=True`` the trainer
(``trainer/plain.py``; :func:`switch_on`, :func:`compiled_single_turn`) turns on what
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

The compiled path checks itself: its first batch is generated again on the stock path from the same random
state and compared (:func:`checked_generation`); a compile error (on any batch) or
a first batch that disagrees turns it off for the run with one warning line (olmocr_rl.model.fallback), and
that batch is the stock path's.
"""

from __future__ import annotations

import copy
import logging

logger = logging.getLogger(__name__)

__all__ = ["CHECK_TOKENS", "MIN_AGREEMENT", "PROMPT_BUCKET", "bucketed_cache_length", "checked_generation",
           "compiled_single_turn", "enable_compiled_generation", "prefix_agreement", "stop_compiled_generation",
           "switch_on"]

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


#: The first generation batch is generated again on the stock path; each compiled completion's first CHECK_TOKENS
#: tokens are compared with the stock one's up to their first difference, and on average at least MIN_AGREEMENT of
#: them must agree. Exact arithmetic agrees on all; bf16 rounding that differs between compiled and eager kernels
#: can flip a sampled token now and then (everything after it then differs too), a broken cache or mask from the
#: second token on.
CHECK_TOKENS = 32
MIN_AGREEMENT = 0.75


def prefix_agreement(compiled, stock, tokens: int = CHECK_TOKENS) -> float:
    """Mean over completions of the share of their first ``tokens`` ids before the first difference (0.0 for batches
    of different sizes)."""
    if len(compiled) != len(stock):
        return 0.0
    shares = []
    for ours, theirs in zip(compiled, stock):
        length = min(tokens, max(len(ours), len(theirs)))
        same = 0
        while same < min(length, len(ours), len(theirs)) and ours[same] == theirs[same]:
            same += 1
        shares.append(same / length if length else 1.0)
    return sum(shares) / len(shares) if shares else 1.0


def _rng_state():
    """The random state generation draws from: the CPU's and, once CUDA is in use, every GPU's."""
    import torch

    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None


def _set_rng_state(state) -> None:
    import torch

    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def switch_on(trainer) -> None:
    """Switch the trainer's HF generation to the compiled path (``compiled_generation=True`` at construction).

    TRL's own config is kept as ``stock_generation_config``, for the first batch's check and the fallback."""
    import torch

    trainer.stock_generation_config = copy.deepcopy(trainer.generation_config)
    enable_compiled_generation(trainer.generation_config, compile_on_cpu=not torch.cuda.is_available())
    trainer.compiled_generation = True
    logger.info("HF generation: static KV cache, compiled decoding, prompt lengths bucketed")


def compiled_single_turn(trainer, prompt_ids, generate):
    """TRL's ``_generate_single_turn`` (``generate()``) on the compiled path: the static cache sized by the bucketed
    prompt length, and the first batch checked (:func:`checked_generation`)."""
    trainer.generation_config.max_cache_len = bucketed_cache_length(
        [len(ids) for ids in prompt_ids], trainer.max_completion_length)
    return checked_generation(trainer, generate)


def checked_generation(trainer, generate):
    """``generate()`` on the compiled path; the first batch also on the stock path from the same random state.

    A compiled batch that raises (then or later: a new prompt bucket compiles again) is generated again on the
    stock path from the random state it started from; a first batch whose ids agree less than MIN_AGREEMENT
    with the stock ones is replaced by them. Either way the run goes on with TRL's generation config and one
    warning line. A first batch that agrees is kept, with the random state the compiled path left."""
    from olmocr_rl.model.fallback import reason_of

    before = _rng_state()
    try:
        compiled = generate()
    except Exception as exc:  # noqa: BLE001 - a compile error, an unsupported shape: the stock path runs
        stop_compiled_generation(trainer, f"compiled generation failed: {reason_of(exc)}")
        _set_rng_state(before)
        return generate()
    if trainer.compiled_generation_checked:
        return compiled
    after = _rng_state()
    _set_rng_state(before)
    compiled_config, trainer.generation_config = trainer.generation_config, trainer.stock_generation_config
    try:
        stock = generate()
    finally:
        trainer.generation_config = compiled_config
    agreement = prefix_agreement(compiled[0], stock[0])
    if agreement < MIN_AGREEMENT:
        stop_compiled_generation(
            trainer, f"on the first batch its completions agree with the stock path's on {agreement:.0%} of their "
            f"first {CHECK_TOKENS} tokens, less than the {MIN_AGREEMENT:.0%} required")
        return stock
    _set_rng_state(after)
    trainer.compiled_generation_checked = True
    logger.info("--compiled_generation: the first batch agrees with the stock path on %.0f%% of the first %d "
                "tokens", 100 * agreement, CHECK_TOKENS)
    return compiled


def stop_compiled_generation(trainer, reason: str) -> None:
    from olmocr_rl.model.fallback import fall_back

    trainer.generation_config = trainer.stock_generation_config
    trainer.compiled_generation = False
    fall_back("--compiled_generation", reason, "HF generation with TRL's dynamic cache, uncompiled")
