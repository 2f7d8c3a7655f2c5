"""The server side of the gloo weight push (:mod:`olmocr_rl.trainer.gloo_push`): runs in vLLM's worker process.

vLLM imports :class:`GlooWeightsExtension` by name (``--worker-extension-cls``) before the worker loads the
model; importing this module registers the ``olmocr_gloo`` weight-transfer backend (vLLM's
``WeightTransferEngineFactory``, looked up when the model has loaded) and, on a CPU engine, switches off the
repacking of linear weights that would leave them without the weight loader a sync writes through.

The engine joins the trainer's gloo group as rank ``1 + worker rank``, receives each tensor the trainer
broadcasts in the announced order and loads it with the model's own ``load_weights`` (tensor-parallel shards
are cut by vLLM's weight loaders, as for a checkpoint). After the last tensor a CPU engine re-packs its MoE
experts for its kernel (:func:`olmocr_rl.trainer.vllm_generation.reprepack_cpu_moe_weights`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

from olmocr_rl.trainer.gloo_push import BACKEND, open_group
from olmocr_rl.trainer.vllm_generation import disable_cpu_weight_repacking, reprepack_cpu_moe_weights

logger = logging.getLogger(__name__)


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    world_size: int


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """Receives the trainer's weights over a gloo group (CPU tensors; the engine's device may be anything)."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo
    group = None

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        from vllm.distributed import get_world_group

        rank = 1 + get_world_group().rank
        self.group = open_group(init_info.master_address, init_info.master_port, rank, init_info.world_size)
        logger.info("gloo weight push: joined as rank %d of %d", rank, init_info.world_size)

    def start_weight_update(self) -> None:
        pass

    def update_weights(self, update_info: dict) -> None:
        # The base class synchronises the accelerator afterwards, which a CPU engine has none of.
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("gloo weight push: /update_weights before /init_weight_transfer_engine")
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes,
                                           strict=True):
            tensor = torch.empty(shape, dtype=getattr(torch, dtype_name))
            self.group.broadcast(tensor, 0).wait()
            self.model.load_weights([(name, tensor.to(self.device))])

    def finish_weight_update(self) -> None:
        if self.device.type == "cpu":
            packed = reprepack_cpu_moe_weights(self.model)
            if packed:
                logger.info("gloo weight push: re-packed the experts of %d MoE layers", packed)

    def shutdown(self) -> None:
        self.group = None


class GlooWeightsExtension:
    """vLLM worker extension whose import sets the worker up for the gloo push (see the module docstring)."""


try:
    WeightTransferEngineFactory.register_engine(BACKEND, GlooWeightTransferEngine)
except ValueError:  # imported twice in one process: registered already
    pass
if not torch.cuda.is_available():
    disable_cpu_weight_repacking()
