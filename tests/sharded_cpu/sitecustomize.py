"""Test-only shims for the sharded (FSDP2) CPU runs; Python imports this file at start-up when
``tests/sharded_cpu`` is on PYTHONPATH, which only the subprocesses of ``tests/integration/test_sharded_cpu.py``
(and its launcher dry-run check) have. Each shim is off unless its environment variable is set.

``OLMOCR_RL_TEST_FSDP_ON_CPU=1`` -- let accelerate's own FSDP2 path run on CPU (gloo).
    accelerate 1.15 decides the engine in ``AcceleratorState.__init__``: it sets ``DistributedType.FSDP``
    (and keeps the FSDP plugin it was given) only when the process group's type is one of the accelerator
    types (MULTI_GPU, MULTI_XPU, ...); a CPU process group (MULTI_CPU, gloo) never gets there, so a run
    under ``configs/accelerate/fsdp.yaml`` on CPU trains plain data parallel. The shim wraps
    ``AcceleratorState.__init__``: after accelerate's own initialisation, when the type is MULTI_CPU and
    accelerate was handed an FSDP plugin, it takes that same branch (type FSDP, the plugin kept, its mixed
    precision set, and the type written back to ``PartialState``'s shared state as accelerate's
    branch ends), nothing more. Everything after that -- ``fully_shard`` of each block, the sharded
    optimizer, gradient clipping, state-dict gathering at save -- is accelerate's and torch's unchanged code.

``OLMOCR_RL_TEST_DEEPSPEED_ON_CPU=1`` -- the same for accelerate's DeepSpeed path (ZeRO-3 under
    ``configs/accelerate/zero3.yaml``). accelerate takes DeepSpeed only for a process that is not on CPU
    (``AcceleratorState.__init__``: ``ACCELERATE_USE_DEEPSPEED and not cpu``); the shim takes that branch on a
    MULTI_CPU group (type DEEPSPEED, the plugin given its precision and selected, kept as the state's
    plugins). DeepSpeed 0.19.8 then picks its CPU accelerator, joins the gloo group torch already formed, and
    runs ZeRO-3 (partitioned parameters, gradients and optimizer state) unchanged.

    DeepSpeed's CPU accelerator also builds, with g++ at the first ``TorchBackend`` of every virtual environment,
    a shared-memory all-reduce (``deepspeed_shm_comm``: about a minute of both cores of this machine), which only
    ``inference_all_reduce`` uses -- never training, and never the GPU path. The shim has ``build_shm_op`` answer
    None (DeepSpeed's own answer where the op cannot be built), so nothing is compiled; every collective goes
    through torch.distributed (gloo) as before.

    With either variable, the project's own prediction of the engine (``olmocr_rl.storage.checkpoints.
    sharded_engines_run_here``, which labels checkpoints and refuses a resume under another engine before the
    model loads) is told the same thing: it answers True, as on a GPU.

``OLMOCR_RL_TEST_ROW_KEYED_SAMPLING=1`` -- sample the same completions whatever the process layout.
    TRL seeds every process differently and transformers samples a batch's rows from one random stream,
    so the completions of a 1-process run and a 2-process run differ, and so would their rewards. This
    shim draws each row's next token (``torch.multinomial`` on a 2-D probability matrix, inside
    ``generate``) from a generator seeded by (the trainer's global step when the step began, the generate
    call within the step, token position, global row), the global row being ``RANK * rows + i``: row i of the 1-process batch and rank i's only row draw the same number.
    The probabilities are the model's; only where the random number comes from changes. Keyed by the step
    (``CallbackHandler.on_step_begin`` records it), a run resumed from a checkpoint samples what the
    uninterrupted run sampled at the same step.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys


def _patch_accelerate_state(module) -> None:
    from accelerate.utils import DistributedType

    original = module.AcceleratorState.__init__
    if getattr(original, "_fsdp_on_cpu_shim", False):
        return

    def __init__(self, *args, fsdp_plugin=None, deepspeed_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, deepspeed_plugin=deepspeed_plugin, **kwargs)
        if self.distributed_type != DistributedType.MULTI_CPU:
            return
        if fsdp_plugin is not None and os.environ.get("OLMOCR_RL_TEST_FSDP_ON_CPU") == "1":
            self.distributed_type = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin
        elif deepspeed_plugin is not None and os.environ.get("OLMOCR_RL_TEST_DEEPSPEED_ON_CPU") == "1":
            self.distributed_type = DistributedType.DEEPSPEED
            self._mixed_precision = "no"  # DeepSpeed's own config carries the precision
            deepspeed_plugin.set_mixed_precision(self._mixed_precision)
            deepspeed_plugin.select(_from_accelerator_state=True)
            self.deepspeed_plugins = deepspeed_plugin
        else:
            return
        module.PartialState._shared_state["distributed_type"] = self.distributed_type  # as accelerate does

    __init__._fsdp_on_cpu_shim = True
    module.AcceleratorState.__init__ = __init__


def _patch_shm_op(module) -> None:
    module.build_shm_op = lambda: None


def _patch_engine_prediction(module) -> None:
    module.sharded_engines_run_here = lambda: True


class _Sampling:
    step = 0  # the trainer's global step when the step began (so a resumed run keys its steps alike)
    nth = 0  # generate calls so far in this step
    call = -1
    position = 0


def _patch_step_begin(module) -> None:
    on_step_begin = module.CallbackHandler.on_step_begin

    def keyed_step_begin(self, args, state, control):
        _Sampling.step, _Sampling.nth = state.global_step, 0
        return on_step_begin(self, args, state, control)

    module.CallbackHandler.on_step_begin = keyed_step_begin


def _patch_generation(module) -> None:
    import torch

    generate, multinomial = module.GenerationMixin.generate, torch.multinomial

    def keyed_generate(self, *args, **kwargs):
        _Sampling.call, _Sampling.position = _Sampling.step * 64 + _Sampling.nth, 0
        _Sampling.nth += 1
        return generate(self, *args, **kwargs)

    def keyed_multinomial(probs, num_samples, *args, **kwargs):
        if _Sampling.call < 0 or probs.dim() != 2 or num_samples != 1 or kwargs.get("generator") is not None:
            return multinomial(probs, num_samples, *args, **kwargs)
        rows, rank = probs.shape[0], int(os.environ.get("RANK", "0"))
        picks = []
        for i in range(rows):
            key = (_Sampling.call * 4096 + _Sampling.position) * 4096 + rank * rows + i
            picks.append(multinomial(probs[i : i + 1], 1, generator=torch.Generator().manual_seed(key)))
        _Sampling.position += 1
        return torch.cat(picks)

    keyed_generate.__wrapped__ = generate
    module.GenerationMixin.generate = keyed_generate
    torch.multinomial = keyed_multinomial


_PATCHES = {}
if "1" in (os.environ.get("OLMOCR_RL_TEST_FSDP_ON_CPU"), os.environ.get("OLMOCR_RL_TEST_DEEPSPEED_ON_CPU")):
    _PATCHES["accelerate.state"] = _patch_accelerate_state
    _PATCHES["olmocr_rl.storage.checkpoints"] = _patch_engine_prediction
if os.environ.get("OLMOCR_RL_TEST_DEEPSPEED_ON_CPU") == "1":
    _PATCHES["deepspeed.comm.torch"] = _patch_shm_op
if os.environ.get("OLMOCR_RL_TEST_ROW_KEYED_SAMPLING") == "1":
    _PATCHES["transformers.generation.utils"] = _patch_generation
    _PATCHES["transformers.trainer_callback"] = _patch_step_begin


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch right after its module is first imported (the module itself is loaded as usual)."""

    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        exec_module = spec.loader.exec_module

        def patched_exec(module):
            exec_module(module)
            _PATCHES[name](module)

        spec.loader.exec_module = patched_exec
        return spec


if _PATCHES:
    sys.meta_path.insert(0, _AfterImport())
