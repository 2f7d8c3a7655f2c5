"""What each training process holds, measured once, right after the first optimizer step.

Under FSDP2 (and DeepSpeed ZeRO-3) each process keeps a shard of every sharded weight, of its gradient and of
its optimizer state; under data parallel every process keeps all of them. :class:`RankMemoryCallback` counts
the bytes of the tensors this process actually holds (a sharded parameter's local shard, ``DTensor.to_local``),
next to the full (unsharded) sizes, gathers the counts of all processes, logs one line per process, and the
main process writes them to ``OUTPUT_DIR/rank_memory.json``: the figures the preflight's sharded arithmetic
(model.colocate_memory) is checked against.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

__all__ = ["RankMemoryCallback", "held_bytes"]


def _local(tensor):
    """The part of ``tensor`` this process stores (a DTensor's local shard, else the tensor itself)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def held_bytes(model, optimizer=None) -> dict[str, int]:
    """Bytes this process holds: trainable and frozen parameters, gradients, optimizer state (each local), and the
    full sizes of the parameters (what one unsharded copy takes). Under ZeRO-3 a parameter's own partition
    (``ds_tensor``) counts; its gradients live in DeepSpeed's flat partition buffers, not in ``.grad``, and count 0
    here."""
    counts = dict.fromkeys(("trainable_parameters", "frozen_parameters", "gradients", "optimizer_state",
                            "trainable_parameters_full", "frozen_parameters_full"), 0)
    for param in model.parameters():
        kind = "trainable_parameters" if param.requires_grad else "frozen_parameters"
        shard = getattr(param, "ds_tensor", None)  # DeepSpeed ZeRO-3: the partition this process owns
        counts[kind] += _nbytes(_local(param) if shard is None else shard)
        counts[kind + "_full"] += getattr(param, "ds_numel", param.numel()) * param.element_size()
        if param.grad is not None:
            counts["gradients"] += _nbytes(_local(param.grad))
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                if hasattr(value, "numel") and value.dim() > 0:  # Adam's moments (its step count is a scalar)
                    counts["optimizer_state"] += _nbytes(_local(value))
    return counts


def _gather(counts: dict[str, int]) -> list[dict[str, int]]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [counts]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, counts)
    return gathered


class RankMemoryCallback(TrainerCallback):
    """Counts, gathers, logs and (main process) writes each process's held bytes after the first optimizer step."""

    def __init__(self, output_dir):
        self.path = Path(output_dir) / "rank_memory.json"
        self.done = False

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.done or model is None:
            return
        self.done = True
        ranks = _gather(held_bytes(model, optimizer))
        if not state.is_world_process_zero:
            return
        mib = 1 << 20
        for rank, c in enumerate(ranks):
            logger.info("rank %d/%d holds: parameters %.2f MiB trainable (of %.2f) + %.2f MiB frozen (of %.2f), "
                        "gradients %.2f MiB, optimizer state %.2f MiB", rank, len(ranks),
                        c["trainable_parameters"] / mib, c["trainable_parameters_full"] / mib,
                        c["frozen_parameters"] / mib, c["frozen_parameters_full"] / mib, c["gradients"] / mib,
                        c["optimizer_state"] / mib)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"processes": len(ranks), "ranks": ranks}, indent=1) + "\n")
