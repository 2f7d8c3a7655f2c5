"""Which process is this one: the single notion of "main process" for the training CLI and storage.

The launchers (accelerate, torchrun) set ``RANK`` (the global rank) and ``LOCAL_RANK`` (the rank on this
machine); a single process has neither and is rank 0. A Trainer computes its
``state.is_world_process_zero`` / ``state.is_local_process_zero`` from the same variables, so where a
Trainer state is at hand (callbacks) it is passed in and read, and before a Trainer exists the environment
is: both give the same answer.
"""

from __future__ import annotations

import os

__all__ = ["barrier", "global_rank", "is_local_main_process", "is_main_process", "local_rank", "world_size"]


def global_rank() -> int:
    """This process's rank among all processes (``RANK``); 0 when single-process."""
    return int(os.environ.get("RANK", "0") or 0)


def local_rank() -> int:
    """This process's rank on its machine (``LOCAL_RANK``); 0 when single-process."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def world_size() -> int:
    """How many processes train together (``WORLD_SIZE``); 1 when single-process."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def is_main_process(state=None) -> bool:
    """The global main process (rank 0): writes the run summary, the W&B run, the metrics history.

    ``state``: a TrainerState (or anything with ``is_world_process_zero``), read instead of the environment.
    """
    return bool(state.is_world_process_zero) if state is not None else global_rank() == 0


def is_local_main_process(state=None) -> bool:
    """The main process of this machine (local rank 0): mirrors this machine's disk to S3.

    ``state``: a TrainerState (or anything with ``is_local_process_zero``), read instead of the environment.
    """
    return bool(state.is_local_process_zero) if state is not None else local_rank() == 0


def barrier() -> None:
    """Wait for every process (torch.distributed's barrier) when several train; nothing otherwise."""
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
