"""Shared fixtures: the tiny local Qwen2.5-VL model (built once per session) and sample-data paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in the test suite may reach a model hub or W&B's servers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_SAMPLE = REPO_ROOT.parent / "shared" / "olmocr-bench-sample"
BENCH_DATA_SAMPLE = REPO_ROOT / "bench_data_sample"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A freshly built tiny Qwen2.5-VL folder (seed 0), shared by the whole session; do not modify it."""
    from olmocr_rl.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model") / "model", seed=0)


@pytest.fixture(scope="session")
def shared_sample() -> Path:
    """../shared/olmocr-bench-sample, or a skip where it is absent (a user's fresh clone)."""
    if not SHARED_SAMPLE.is_dir():
        pytest.skip(f"real olmOCR-bench sample absent: {SHARED_SAMPLE} (it lives beside the repo in ../shared)")
    return SHARED_SAMPLE
