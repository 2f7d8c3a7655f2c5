"""vLLM importance-sampling telemetry with the real engine: masked where engine and trainer disagree, zero where not.

The warm-started tiny model, colocated vLLM, one step of one page x 4 completions (8 for the bfloat16 engine, with
bounds [0.995, 1.005]: ``BF16_TIGHT``). Bounds [0.98, 1.02] on the
sequence ratio (``--vllm_importance_sampling_clip_min`` / ``--vllm_importance_sampling_cap``) make a short run
telling: an engine in bfloat16 beside a float32 trainer moves ~60-token completions' ratios by several percent,
an engine in float32 by about 1e-5. A third run shows why gpu_check forces lengths with ``ignore_eos``, not
``min_tokens``: the latter masks EOS out of vLLM's logits, so its processed log-probs sit below the trainer's on
every token.
"""

from __future__ import annotations

import json

import pytest

from vllm_lane.lane import BENCH, failure, read_metrics, run_recorded

TIGHT = ["--vllm_importance_sampling_clip_min", 0.98, "--vllm_importance_sampling_cap", 1.02]


def flags(model, out, dtype: str, *extra) -> list:
    return [
        "--train_bench_data_folder", BENCH, "--model_name", model, "--output_dir", out, "--reward_bench",
        "--pages", "simple_lines", "--num_generations", 4, "--per_device_train_batch_size", 4,
        "--gradient_accumulation_steps", 1, "--max_steps", 1, "--max_completion_length", 128,
        "--vllm_mode", "colocate", "--vllm_dtype", dtype, "--report_to", "none", "--no-log_completions",
        "--logging_steps", 1, "--target_longest_image_dim", 448, "--learning_rate", 1e-6, "--warmup_steps", 0,
        "--save_steps", 100000, "--seed", 0, "--vllm_enforce_eager", *extra,
    ]


def _run(sft_model_dir, tmp_path, dtype, *extra):
    out = tmp_path / "out"
    result, _ = run_recorded(tmp_path, flags(sft_model_dir, out, dtype, *extra))
    assert result.returncode == 0, failure(result)
    (metrics,) = read_metrics(out)
    warnings = [line for line in result.stderr.splitlines() if "vLLM importance sampling at step" in line]
    return metrics, warnings


#: The bfloat16 run's bounds and group: how far bf16 moves a sequence's ratio depends on the CPU's bf16 kernels
#: (0.75 of 4 sequences masked at [0.98, 1.02] on one machine, 0.5 on an AMD EPYC), so the bounds are tighter and
#: the group larger than the fp32 run needs, where the drift is about 1e-5.
BF16_TIGHT = ["--vllm_importance_sampling_clip_min", 0.995, "--vllm_importance_sampling_cap", 1.005,
              "--num_generations", 8, "--per_device_train_batch_size", 8]


def test_bf16_engine_beside_an_fp32_trainer_masks_sequences_and_warns(sft_model_dir, tmp_path):
    metrics, warnings = _run(sft_model_dir, tmp_path, "bfloat16", *BF16_TIGHT)
    print({k: v for k, v in metrics.items() if k.startswith("sampling/")})
    assert metrics["sampling/is_masked_sequence_fraction"] > 0.5, metrics
    assert metrics["sampling/is_masked_token_fraction"] > 0
    assert metrics["sampling/is_sequence_log_ratio/std"] > 0.02
    assert metrics["sampling/importance_sampling_ratio/min"] == 0.0  # TRL's own: a masked sequence's ratio is 0
    assert len(warnings) == 1 and "sequence_mask (cap 1.005, clip_min 0.995) masked" in warnings[0], warnings


def test_fp32_engine_forced_to_length_with_ignore_eos_masks_nothing(sft_model_dir, tmp_path):
    metrics, warnings = _run(sft_model_dir, tmp_path, "float32", *TIGHT,
                             "--generation_kwargs", json.dumps({"ignore_eos": True}))
    assert metrics["completions/mean_length"] == 128  # forced to the length
    assert metrics["sampling/is_masked_sequence_fraction"] == 0.0
    assert metrics["sampling/is_masked_token_fraction"] == 0.0
    assert abs(metrics["sampling/is_token_log_diff_mean"]) < 1e-4
    assert warnings == []
    print({k: v for k, v in metrics.items() if k.startswith("sampling/")})


@pytest.mark.slow
def test_min_tokens_biases_every_tokens_ratio(sft_model_dir, tmp_path):
    metrics, warnings = _run(sft_model_dir, tmp_path, "float32", "--generation_kwargs", json.dumps({"min_tokens": 128}))
    assert metrics["completions/mean_length"] == 128
    # vLLM's processed log-probs are renormalised without EOS: each token's sits above the trainer's
    assert metrics["sampling/is_token_log_diff_mean"] < -1e-3
    assert metrics["sampling/is_sequence_log_ratio/max"] < 0  # every sequence's ratio below 1
    assert metrics["sampling/is_masked_sequence_fraction"] == 0.0  # nothing masked at cap 3, yet the loss fades:
    assert len(warnings) == 1 and "so the loss is scaled towards 0" in warnings[0], warnings
    print({k: v for k, v in metrics.items() if k.startswith("sampling/")}, warnings)
