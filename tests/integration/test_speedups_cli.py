"""The speed-ups through the training CLI: the defaults train the stock path's numbers, and compiled HF
generation samples the stock completions.

Three runs of ``python -m olmocr_rl.grpo_train`` on the warm-started tiny model (its rewards vary, so the
loss and gradients are not zero) with the same seed, 3 steps of 2 pages x
G = 4 completions in micro-batches of 2 (so completions of different lengths share a padded block):

* defaults: ``--padding_free``, ``--shared_prefix``, ``--share_page_processing``, ``--gradient_checkpointing auto`` (nothing
  recomputes here) and ``--compiled_generation`` auto (off on CPU);
* stock: all of them off, checkpointing as TRL does it (every layer);
* compiled: the stock run with ``--compiled_generation true`` (static cache, inductor on CPU), 2 steps.

Generation does not depend on the training forward's layout, and the shared prefill of the defaults samples the
stock prefill's ids, so the completions are the same; the losses, gradient norms and entropies agree to float
rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

REPO = Path(__file__).resolve().parents[2]
STOCK = ["--no-padding_free", "--no-shared_prefix", "--no-share_page_processing", "--gradient_checkpointing", "true",
         "--compiled_generation", "false"]


def _run(model_dir, out: Path, *flags) -> tuple[list[dict], str]:
    """The per-step training records of metrics.jsonl, and the run's log."""
    args = ["--train_bench_data_folder", REPO / "bench_data_sample", "--model_name", model_dir, "--output_dir", out,
            "--reward_bench", "--reward_eos", "--num_generations", 4, "--per_device_train_batch_size", 2,
            "--gradient_accumulation_steps", 4, "--max_completion_length", 64, "--max_steps", 3, "--logging_steps", 1,
            "--save_steps", 100, "--warmup_steps", 0, "--learning_rate", 1e-3, "--temperature", 1.0,
            "--target_longest_image_dim", 448, "--report_to", "none", "--seed", 5, *flags]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    result = warm_python.run([sys.executable, "-m", "olmocr_rl.grpo_train", *map(str, args)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "timing/step_s" in r], result.stderr


def _completions(out: Path) -> list[list[str]]:
    import pandas as pd

    return [pd.read_parquet(f)["completion"].tolist() for f in sorted((out / "completions").glob("*.parquet"))]


@pytest.fixture(scope="module")
def stock_run(warm_tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("stock") / "run"
    records, _ = _run(warm_tiny_model_dir, out, *STOCK)
    return out, records


@pytest.mark.slow
def test_default_speedups_train_the_stock_numbers(warm_tiny_model_dir, tmp_path, stock_run):
    stock_out, stock = stock_run
    records, log = _run(warm_tiny_model_dir, tmp_path / "run")
    assert "gradient checkpointing off (--gradient_checkpointing auto: nothing recomputes" in log
    assert "training forwards: micro-batches packed into one row (SDPA per sequence)" in log
    assert "shared prefix: the first forward (2 rows, 2 prompts) matches the stock forward" in log
    assert "shared prefill: the first generation's prefill (8 rows, 2 prompts) matches the stock one" in log
    assert "is off for the rest of this run" not in log  # no speed-up fell back
    assert "processor: each distinct page image processed once per step" in log
    assert "HF generation: static KV cache" not in log  # auto: off on CPU
    assert _completions(tmp_path / "run") == _completions(stock_out)
    assert [r["step"] for r in records] == [r["step"] for r in stock] == [1, 2, 3]
    assert any(r["loss"] != 0 for r in stock) and any(r["timing/padding_fraction"] > 0 for r in records)
    # micro-batches of 2 rows drawn from 2 pages x 4 (shuffled by TRL): each page's prompt is kept across the step's
    # 4 micro-steps, forwarded once (or twice: without gradients, then with them in its last micro-step) instead of 4
    # times, in every step
    assert all(0 < r["timing/shared_prefix_tokens"] < 0.8 for r in records), [r["timing/shared_prefix_tokens"]
                                                                              for r in records]
    assert not any("timing/shared_prefix_tokens" in r for r in stock)
    for mine, theirs in zip(records, stock):
        for key in ("loss", "grad_norm", "entropy", "reward"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), (mine["step"], key)
        assert mine["timing/padding_fraction"] == theirs["timing/padding_fraction"]  # the same blocks, counted
        # the language model's work counted alike (from the tokens), the vision tower's where it runs: each page once
        # a step (the kept prompt's forward), not once a micro-step
        assert 0.9 * theirs["timing/model_flops"] < mine["timing/model_flops"] < theirs["timing/model_flops"]


@pytest.mark.slow
def test_the_flops_of_a_shared_page_encoding_are_the_ones_it_computes(warm_tiny_model_dir, tmp_path, stock_run):
    """Every copy of a page encoded (--no-share_page_encoding) counts more vision FLOPs than each distinct page
    once per forward (the stock run above), for the same sampled tokens (the exact counts: tests/unit/test_flops.py)."""
    _, stock = stock_run
    [unshared] = _run(warm_tiny_model_dir, tmp_path / "run", *STOCK, "--no-share_page_encoding", "--max_steps", 1)[0]
    assert unshared["timing/generated_tokens"] == stock[0]["timing/generated_tokens"]
    assert unshared["timing/model_flops"] > stock[0]["timing/model_flops"] > 0


@pytest.mark.slow
def test_compiled_generation_samples_the_stock_completions(warm_tiny_model_dir, tmp_path, stock_run):
    stock_out, stock = stock_run
    records, log = _run(warm_tiny_model_dir, tmp_path / "run", *STOCK[:-1], "true")
    assert "HF generation: static KV cache, compiled decoding, prompt lengths bucketed" in log
    # its first-batch check against the stock path passed: no fallback (olmocr_rl.model.fallback)
    assert "the first batch agrees with the stock path on 100% of the first 32 tokens" in log
    assert "--compiled_generation is off" not in log
    assert _completions(tmp_path / "run") == _completions(stock_out)
    for mine, theirs in zip(records, stock):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-4, abs=1e-6)
