"""The vLLM lane: tests that run the real vLLM engine (vLLM's CPU build, ``.venv-vllm``).

``bash scripts/test.sh`` runs them in ``.venv-vllm`` (created by ``bash scripts/setup_env.sh --vllm``)
with OLMOCR_RL_VLLM_LANE=1, where a missing vLLM is an error. In the main environment, which has no
vLLM, they are skipped with that reason.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
IN_LANE = os.environ.get("OLMOCR_RL_VLLM_LANE") == "1"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.fspath)).parents]
    if HAVE_VLLM or not ours:
        return
    if IN_LANE:
        raise pytest.UsageError("the vLLM lane runs without vLLM: rebuild it with `bash scripts/setup_env.sh --vllm`")
    skip = pytest.mark.skip(reason="needs vLLM: runs in the vLLM lane (.venv-vllm, `bash scripts/test.sh`)")
    for item in ours:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def sft_model_dir(warm_tiny_model_dir) -> Path:
    """The tiny model warm-started on one page (tests/conftest.py), as the learning-signal test uses it."""
    return warm_tiny_model_dir
