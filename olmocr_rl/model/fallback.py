"""Self-checks of the speed-ups that are on by default only with a CUDA GPU, and their one-line fallback.

``--compiled_generation``, ``--batched_vision_attention`` and the GPU memory reading of
``--gradient_checkpointing auto`` are on by default where a GPU is, on what GPUs generally do rather than on a
run of this code there. Each checks itself on its first use (an exception, a result unlike the stock path's
on the first batch) and, when the check fails, the run goes on with the stock path for good, saying so in
one warning line made by :func:`fall_back`: the flag, the reason, and that the stock path runs. Nothing is
silently different: the batch whose check failed is the stock path's result too.

The checks:

* ``--batched_vision_attention`` (olmocr_rl.model.vision_speedups): the first vision attention call runs
  the stock per-window loop as well and compares (:func:`relative_difference` within
  :func:`tolerance` of the dtype); any exception of the batched call, then or later, also falls back;
* ``--compiled_generation`` (olmocr_rl.trainer.generation): the first HF generation batch is generated again
  on the stock path from the same random state; the compiled ids must share most of their first tokens
  with the stock ids; a compile error, then or on a later batch, also falls back;
* ``--gradient_checkpointing auto`` (olmocr_rl.model.grad_checkpointing): a GPU whose memory cannot be read, or
  reads as nothing, gets the stock plan (every layer recomputes).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

__all__ = ["compute_dtype", "fall_back", "fallbacks", "relative_difference", "reason_of", "tolerance"]

#: Every fallback of this process as (flag, reason), in order (read by the tests; the log has each line).
_FALLBACKS: list[tuple[str, str]] = []

#: Largest ||batched - stock|| / ||stock|| accepted, by floating-point width in bits (bf16 and fp16: 16).
RELATIVE_TOLERANCE = {64: 1e-10, 32: 1e-4, 16: 2e-2}


def fall_back(flag: str, reason: str, stock: str = "the stock path") -> None:
    """Log the one warning line of a speed-up turned off for the rest of the run, and record it."""
    _FALLBACKS.append((flag, reason))
    logger.warning("WARNING: %s is off for the rest of this run (%s); %s runs instead", flag, reason, stock)


def fallbacks() -> list[tuple[str, str]]:
    """The fallbacks of this process so far, as (flag, reason)."""
    return list(_FALLBACKS)


def reason_of(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first[:200]}" if first else type(exc).__name__


def tolerance(dtype) -> float:
    """The relative difference accepted between a speed-up's result and the stock one in ``dtype``."""
    import torch

    bits = torch.finfo(dtype).bits if dtype.is_floating_point else 64
    return RELATIVE_TOLERANCE.get(bits, RELATIVE_TOLERANCE[16])


def compute_dtype(model, result_dtype):
    """The least precise dtype a result of ``model`` went through: its own (``result_dtype``), the model's floating
    weights' (a bf16 model's log-probs come out in fp32, but carry bf16 rounding) and autocast's where it is on.
    The tolerance of a first-use check is that dtype's: measured on an H200, the 3B shape in bf16, the shared
    prefix's first log-probs differed from the stock forward's by 0.0033 (relative), bf16 rounding, which the
    fp32 tolerance of its fp32 output had turned off."""
    import torch

    dtypes = {result_dtype} | {p.dtype for p in model.parameters() if p.is_floating_point()}
    for device_type in {p.device.type for p in model.parameters()}:
        if torch.is_autocast_enabled(device_type):
            dtypes.add(torch.get_autocast_dtype(device_type))
    return min(dtypes, key=lambda dtype: (torch.finfo(dtype).bits, str(dtype)))


def relative_difference(result, stock) -> float:
    """||result - stock|| / ||stock|| in float64 (inf for different shapes or a non-finite result)."""
    import torch

    if result.shape != stock.shape:
        return float("inf")
    result, stock = result.detach().double(), stock.detach().double()
    if not torch.isfinite(result).all():
        return float("inf")
    scale = torch.linalg.vector_norm(stock).item()
    difference = torch.linalg.vector_norm(result - stock).item()
    return difference / scale if scale > 0 else difference
