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

from vllm_lane.lane import BENCH
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
def sft_model_dir(tmp_path_factory) -> Path:
    """The tiny model warm-started on one page (as the learning-signal test builds it)."""
    from olmocr_rl.sft import warm_start
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    out = tmp_path_factory.mktemp("vllm_lane") / "tiny-sft"
    build_tiny_model(out, seed=0, extra_corpus=read_corpus_dir(BENCH / "claude_original"))
    warm_start(out, BENCH, seed=0, steps=40, pages="simple_lines")
    return out
