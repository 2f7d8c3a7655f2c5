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


BENCH_DATA_SAMPLE = Path(__file__).resolve().parents[2] / "bench_data_sample"


def _warm(folder: Path) -> Path:
    """Warm-start ``folder`` in place as the Qwen2.5-VL lane model is (40 steps on simple_lines, seed 0)."""
    from olmocr_rl.model.warm_start import warm_start

    warm_start(folder, BENCH_DATA_SAMPLE, seed=0, steps=40, pages="simple_lines")
    return folder


@pytest.fixture(scope="session")
def warm_qwen3_vl_dir(tmp_path_factory) -> Path:
    """``tiny_model --family qwen3_vl`` (tokenizer also trained on the sample's transcriptions), warm-started."""
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    out = tmp_path_factory.mktemp("warm_qwen3_vl") / "model"
    build_tiny_model(out, seed=0, family="qwen3_vl", extra_corpus=read_corpus_dir(BENCH_DATA_SAMPLE / "claude_original"))
    return _warm(out)


@pytest.fixture(scope="session")
def warm_qwen3_vl_moe_release_dir(tmp_path_factory) -> Path:
    """The release-layout Qwen3-VL-MoE folder (tests/release_layout.py), warm-started."""
    from release_layout import write_release_folder

    return _warm(write_release_folder(tmp_path_factory.mktemp("warm_qwen3_vl_moe") / "model", moe=True))
