"""vLLM importance-sampling telemetry: the pure statistics, and the mixin on TRL's own ratio arithmetic.

The trainer tests run TRL 1.16's ``_generate_and_score_completions`` on the tiny model with vLLM's part faked: the
"vLLM" log-probs are the trainer's own minus a known bias per token, so every number the telemetry reports has a
closed form (a sequence of L tokens has log ratio L x bias), and TRL's applied ratios are there to compare with.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

from olmocr_rl.telemetry.importance_sampling import correction_warning, sequence_rows, summarize

# --- the pure statistics on hand-made tensors -------------------------------------------------------------------

OLD = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, 0.0], [-1.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
# per-token (trainer - vLLM) differences: row 0: +0.5 x 3, row 1: -1.0, +0.2, row 2: +0.1
SAMPLING = OLD - torch.tensor([[0.5, 0.5, 0.5], [-1.0, 0.2, 9.0], [0.1, 7.0, 7.0]])


def test_sequence_mask_reads_the_zeroed_ratios():
    applied = torch.tensor([[0.0], [math.exp(-0.8)], [math.exp(0.1)]])  # row 0 (e^1.5 > cap 3) masked by TRL
    rows = sequence_rows(OLD, SAMPLING, MASK, applied, "sequence_mask", None, 3.0)
    assert rows[:, 0].tolist() == [3, 2, 1] and rows[:, 1].tolist() == [3, 0, 0] and rows[:, 2].tolist() == [1, 0, 0]
    torch.testing.assert_close(rows[:, 3], torch.tensor([1.5, -0.8, 0.1], dtype=torch.float64))
    summary = summarize(rows, "sequence_mask", None, 3.0)
    m = summary["metrics"]
    assert m["sampling/is_masked_sequence_fraction"] == pytest.approx(1 / 3)
    assert m["sampling/is_masked_token_fraction"] == pytest.approx(3 / 6)
    assert m["sampling/is_token_log_diff_mean"] == pytest.approx((1.5 - 0.8 + 0.1) / 6)
    assert (m["sampling/is_sequence_log_ratio/min"], m["sampling/is_sequence_log_ratio/max"]) == pytest.approx((-0.8, 1.5))
    # no per-token ratio is outside [0, 3]: the token modes would keep everything
    assert summary["what_if"]["token_mask"] == (0.0, 0.0)
    assert summary["what_if"]["sequence_truncate"] == pytest.approx((1 / 3, 0.5))
    assert summary["keep_all_cap"] == pytest.approx(math.exp(1.5))


def test_token_truncate_counts_clamped_tokens_and_their_sequences():
    applied = torch.tensor([[1.2, 1.2, 1.2], [0.5, 1.2, 1.0], [1.1, 1.0, 1.0]])  # clip_min 0.5 clamped one token
    rows = sequence_rows(OLD, SAMPLING, MASK, applied, "token_truncate", 0.5, 2.0)
    assert rows[:, 1].tolist() == [0, 1, 0] and rows[:, 2].tolist() == [0, 1, 0]
    assert rows[:, 4].tolist() == [0, 1, 0]  # e^-1.0 < 0.5
    m = summarize(rows, "token_truncate", 0.5, 2.0)["metrics"]
    assert m["sampling/is_masked_token_fraction"] == pytest.approx(1 / 6)
    assert m["sampling/is_masked_sequence_fraction"] == pytest.approx(1 / 3)


def test_masked_padding_and_nan_logprobs_count_as_nothing():
    sampling = SAMPLING.clone()
    sampling[0, 0] = float("nan")  # a token vLLM could not score: TRL gives it ratio 1
    applied = torch.ones(3, 1)
    rows = sequence_rows(OLD, sampling, MASK, applied, "sequence_mask", None, 3.0)
    assert rows[0, 3].item() == pytest.approx(1.0)  # only the two scored tokens' 0.5 each
    empty = sequence_rows(OLD, SAMPLING, torch.zeros_like(MASK), torch.zeros(3, 1), "sequence_mask", None, 3.0)
    assert summarize(empty, "sequence_mask", None, 3.0) == {}


def test_the_warning_names_the_modes_and_the_cap_that_keep_the_batch():
    rows = torch.tensor([[1000, 1000, 1, 3.0, 0], [1000, 1000, 1, 2.5, 0], [1000, 0, 0, 0.5, 0]], dtype=torch.float64)
    summary = summarize(rows, "sequence_mask", None, 3.0)
    line = correction_warning(summary, "sequence_mask", None, 3.0, step=7)
    assert "\n" not in line and "step 7: sequence_mask (cap 3.0) masked 2 of 3 sequences (67% of the tokens)" in line
    assert "token_mask masks 0.0% of tokens" in line and "token_truncate truncates 0.0% of tokens" in line
    assert "sequence_mask keeps every sequence with --vllm_importance_sampling_cap 21" in line  # e^3 = 20.09
    one_masked = torch.tensor([[10, 10, 1, 3.0, 0], [10, 0, 0, 0.1, 0], [10, 0, 0, 0.0, 0]], dtype=torch.float64)
    assert correction_warning(summarize(one_masked, "sequence_mask", None, 3.0), "sequence_mask", None, 3.0, 1) is None


def test_the_warning_fires_when_ratios_vanish_without_any_mask():
    rows = torch.tensor([[500, 0, 0, -20.0, 0], [500, 0, 0, -25.0, 0], [500, 0, 0, -1.0, 0]], dtype=torch.float64)
    line = correction_warning(summarize(rows, "sequence_mask", None, 3.0), "sequence_mask", None, 3.0, 2)
    assert "masked 0 of 3 sequences" in line and "the median sequence ratio is 2.1e-09" in line
    assert "top_p/top_k/min_p" in line


# --- the mixin on TRL's arithmetic ------------------------------------------------------------------------------

LENGTHS = [20, 60, 100, 140, 180, 220, 260, 300]  # one page x G = 8 completions


def _trainer(model_dir, tmp_path, mode: str, cap: float | None, clip_min: float | None = None, length: int = 320):
    from datasets import Dataset
    from PIL import Image
    from trl import GRPOConfig

    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.trainer.plain import PlainGRPOTrainer

    model, processor = load_model_and_processor(str(model_dir))
    prompt = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    dataset = Dataset.from_list([{"prompt": prompt, "image": Image.new("RGB", (64, 64), "white")}])
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, num_generations=8,
                      per_device_train_batch_size=8, gradient_accumulation_steps=1, max_completion_length=length,
                      vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_max=cap,
                      vllm_importance_sampling_clip_min=clip_min, logging_steps=1, seed=0)
    trainer = PlainGRPOTrainer(model=model, args=args, processing_class=processor,
                               reward_funcs=[lambda completions, **kw: [float(len(c[0]["content"]) % 3) for c in completions]],
                               train_dataset=dataset)
    trainer.use_vllm = True  # TRL's vLLM arithmetic; the "engine" below is a stand-in
    return trainer, [dict(dataset[0]) for _ in range(8)]


def _fake_vllm(trainer, bias: float | None):
    """Completions of LENGTHS tokens whose "vLLM" log-probs are the trainer's minus ``bias`` (0 on the first call,
    which records the trainer's log-probs)."""
    ids = [[200 + (i * 7 + t) % 300 for t in range(n)] for i, n in enumerate(LENGTHS)]
    state = {"logps": None}

    def generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if state["logps"] is None:
            return [list(c) for c in ids], [[0.0] * len(c) for c in ids]
        return [list(c) for c in ids], [[lp - bias for lp in row[:len(c)]] for row, c in zip(state["logps"], ids)]

    trainer._generate_single_turn = generate_single_turn
    return state


def _run(trainer, inputs, bias, caplog):
    """One generation batch with "vLLM" log-probs = the trainer's - ``bias``; the priming pass leaves no trace."""
    state = _fake_vllm(trainer, bias)
    trainer.model.train()
    first = trainer._generate_and_score_completions(inputs)  # the trainer's own log-probs, exactly
    state["logps"] = first["old_per_token_logps"].tolist()
    for values in trainer._metrics["train"].values():
        values.clear()
    trainer._is_telemetry.last_warning_step = None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="olmocr_rl.trainer.is_telemetry"):
        return trainer._generate_and_score_completions(inputs)


def test_masked_fraction_under_sequence_mask_matches_trls_applied_ratios(tiny_model_dir, tmp_path, caplog):
    trainer, inputs = _trainer(tiny_model_dir, tmp_path, "sequence_mask", 3.0)
    output = _run(trainer, inputs, 0.01, caplog)  # a sequence of L tokens: log ratio 0.01 L, ratio > 3 from L = 110
    applied = output["importance_sampling_ratio"].flatten()
    assert (applied == 0).tolist() == [n > 110 for n in LENGTHS]  # TRL masked exactly these
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("sampling/is_")}
    assert metrics["sampling/is_masked_sequence_fraction"] == pytest.approx(5 / 8)
    assert metrics["sampling/is_masked_token_fraction"] == pytest.approx(sum(n for n in LENGTHS if n > 110) / sum(LENGTHS))
    assert metrics["sampling/is_token_log_diff_mean"] == pytest.approx(0.01, rel=1e-3)
    assert metrics["sampling/is_sequence_log_ratio/max"] == pytest.approx(3.0, rel=1e-3)
    # the kept sequences' ratios are exp of the log ratios the telemetry reports
    rows = sequence_rows(output["old_per_token_logps"], output["sampling_per_token_logps"], output["completion_mask"],
                         output["importance_sampling_ratio"], "sequence_mask", None, 3.0)
    kept = applied > 0
    torch.testing.assert_close(applied[kept].double(), torch.exp(rows[kept, 3]), rtol=1e-5, atol=0)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "masked 5 of 8 sequences (86% of the tokens)" in warnings[0], warnings
    assert "token_truncate truncates 0.0% of tokens" in warnings[0]
    assert "--vllm_importance_sampling_cap 21" in warnings[0]  # e^3.0 = 20.1 keeps all eight


def test_token_truncate_on_the_same_batch_touches_nothing(tiny_model_dir, tmp_path, caplog):
    trainer, inputs = _trainer(tiny_model_dir, tmp_path, "token_truncate", 3.0)
    _run(trainer, inputs, 0.01, caplog)
    metrics = trainer._metrics["train"]
    assert metrics["sampling/is_masked_sequence_fraction"] == [0.0]
    assert metrics["sampling/is_masked_token_fraction"] == [0.0]
    assert not caplog.records


def test_agreeing_logprobs_give_zero_and_no_warning(tiny_model_dir, tmp_path, caplog):
    trainer, inputs = _trainer(tiny_model_dir, tmp_path, "sequence_mask", 1.001, clip_min=0.999)
    _run(trainer, inputs, 0.0, caplog)
    metrics = trainer._metrics["train"]
    assert metrics["sampling/is_masked_sequence_fraction"] == [0.0]
    assert metrics["sampling/is_token_log_diff_mean"] == [0.0]
    assert not caplog.records


def test_without_vllm_nothing_is_logged(tiny_model_dir, tmp_path):
    trainer, inputs = _trainer(tiny_model_dir, tmp_path, "sequence_mask", 3.0, length=8)
    trainer.use_vllm = False  # HF generation: TRL applies no correction
    trainer.model.train()
    trainer._generate_and_score_completions(inputs)
    assert not [k for k in trainer._metrics["train"] if k.startswith("sampling/is_")]
