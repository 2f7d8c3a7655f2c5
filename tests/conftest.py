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
def warm_tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny model (seed 0, tokenizer also trained on the sample's transcriptions) warm-started for 40
    steps on one page (simple_lines), as the learning-signal demo starts; shared, do not modify it."""
    from olmocr_rl.model.warm_start import warm_start
    from olmocr_rl.tiny_model import build_tiny_model, read_corpus_dir

    out = tmp_path_factory.mktemp("warm_tiny_model") / "tiny-sft"
    build_tiny_model(out, seed=0, extra_corpus=read_corpus_dir(BENCH_DATA_SAMPLE / "claude_original"))
    warm_start(out, BENCH_DATA_SAMPLE, seed=0, steps=40, pages="simple_lines")
    return out


def released_qwen25_vl_config(size: str):
    """The released Qwen2.5-VL-3B or -7B architecture as a config (no weights), for size and FLOP arithmetic."""
    from transformers import Qwen2_5_VLConfig

    text = {"3b": dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2),
            "7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4)}[size]
    return Qwen2_5_VLConfig(
        text_config=dict(**text, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                  "mrope_section": [16, 24, 24]}),
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                           out_hidden_size=text["hidden_size"], fullatt_block_indexes=[7, 15, 23, 31],
                           window_size=112),
        tie_word_embeddings=size == "3b",
    )


@pytest.fixture(scope="session")
def shared_sample() -> Path:
    """../shared/olmocr-bench-sample, or a skip where it is absent (a user's fresh clone)."""
    if not SHARED_SAMPLE.is_dir():
        pytest.skip(f"real olmOCR-bench sample absent: {SHARED_SAMPLE} (it lives beside the repo in ../shared)")
    return SHARED_SAMPLE
