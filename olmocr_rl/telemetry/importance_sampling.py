"""What vLLM's importance-sampling (IS) correction did to a generation batch, from the tensors TRL computed it with.

TRL 1.16 (``GRPOTrainer._generate_and_score_completions``, with vLLM and ``vllm_importance_sampling_correction``)
forms per token ``d = (trainer log-prob - vLLM log-prob) x loss mask`` (NaN as 0). A ``token_*`` mode uses
``exp(d)`` per token; a ``sequence_*`` mode uses one ratio per sequence, ``exp(sum of its d)``: the *product* of its
per-token ratios, so a per-token bias b becomes exp(b x length) on a page. ``*_truncate`` clamps the ratio into
[C_min, C_max], ``*_mask`` sets a ratio outside it to 0 (that token, or the whole sequence, leaves the loss). TRL
returns the ratio it applies as ``importance_sampling_ratio`` and logs its mean / min / max after masking, which
does not say how much of the batch was removed.

:func:`sequence_rows` reads TRL's own tensors (``old_per_token_logps``, ``sampling_per_token_logps``, the loss mask and
the applied ``importance_sampling_ratio``) and gives one row per sequence; rows of every process are gathered and
:func:`summarize` turns them into the ``sampling/is_*`` metrics and the what-if counts of the other modes;
:func:`correction_warning` is the one-line warning for a batch that lost most of its sequences. Pure torch.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["IS_MODES", "correction_warning", "sequence_rows", "summarize"]

IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
#: Columns of a sequence row.
TOKENS, AFFECTED_TOKENS, AFFECTED, LOG_RATIO, TOKENS_OUTSIDE = range(5)
#: A step warns when more than this share of its sequences (sequence modes) or tokens (token modes) was masked
#: or truncated.
WARN_FRACTION = 0.5


def _bounds(clip_min: float | None, clip_max: float | None) -> tuple[float, float]:
    return (-math.inf if clip_min is None else clip_min), (math.inf if clip_max is None else clip_max)


def per_token_log_diff(old_logps: torch.Tensor, sampling_logps: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """TRL's per-token log difference: (trainer - vLLM) x loss mask, NaN (a token vLLM could not score) as 0."""
    return torch.nan_to_num((old_logps - sampling_logps) * loss_mask, nan=0.0)


def sequence_rows(old_logps: torch.Tensor, sampling_logps: torch.Tensor, loss_mask: torch.Tensor,
                  applied_ratio: torch.Tensor, mode: str, clip_min: float | None,
                  clip_max: float | None) -> torch.Tensor:
    """One float64 row per sequence (B, 5): loss tokens, tokens the correction masked or truncated, 1 if it masked or
    truncated the sequence (sequence modes) or any of its tokens (token modes), the sequence's log ratio (sum of its
    per-token log differences, before any bound), and its tokens whose own ratio lies outside [C_min, C_max].

    ``applied_ratio`` is TRL's ``importance_sampling_ratio``, (B, 1) in sequence modes, (B, T) in token modes:
    masked means TRL set it to 0; truncated means TRL clamped it onto a bound.
    """
    mask = loss_mask.bool()
    diff = per_token_log_diff(old_logps, sampling_logps, loss_mask)
    low, high = _bounds(clip_min, clip_max)
    token_ratio = torch.exp(diff)
    outside = ((token_ratio < low) | (token_ratio > high)) & mask
    if mode.endswith("_mask"):
        touched = applied_ratio == 0
    else:  # truncate: clamped onto a bound (compared in the ratio's own dtype, as TRL clamped it)
        touched = torch.zeros_like(applied_ratio, dtype=torch.bool)
        if clip_max is not None:
            touched |= applied_ratio >= torch.tensor(clip_max, dtype=applied_ratio.dtype)
        if clip_min is not None:
            touched |= applied_ratio <= torch.tensor(clip_min, dtype=applied_ratio.dtype)
    tokens = mask.sum(dim=1)
    if mode.startswith("sequence"):
        affected = touched.reshape(-1) & (tokens > 0)
        affected_tokens = torch.where(affected, tokens, torch.zeros_like(tokens))
    else:
        affected_tokens = (touched & mask).sum(dim=1)
        affected = affected_tokens > 0
    columns = (tokens, affected_tokens, affected, diff.sum(dim=1), outside.sum(dim=1))
    return torch.stack([c.to(torch.float64) for c in columns], dim=1)


def summarize(rows: torch.Tensor, mode: str, clip_min: float | None, clip_max: float | None) -> dict[str, Any]:
    """The batch's IS statistics from the gathered rows of every process (sequences with no loss token left out).

    ``metrics`` are the ``sampling/is_*`` keys; ``what_if`` maps every mode to the (sequence, token) fractions it
    would mask or truncate on this batch with the same bounds; ``keep_all_cap`` is the smallest C_max under which
    no sequence ratio of the batch exceeds the cap, ``median_ratio`` the median sequence ratio.
    """
    rows = rows[rows[:, TOKENS] > 0]
    if rows.shape[0] == 0:
        return {}
    tokens = rows[:, TOKENS].sum()
    log_ratio = rows[:, LOG_RATIO]
    metrics = {
        "sampling/is_masked_sequence_fraction": float(rows[:, AFFECTED].mean()),
        "sampling/is_masked_token_fraction": float(rows[:, AFFECTED_TOKENS].sum() / tokens),
        "sampling/is_token_log_diff_mean": float(log_ratio.sum() / tokens),
        "sampling/is_sequence_log_ratio/std": float(log_ratio.std(unbiased=False)),
        "sampling/is_sequence_log_ratio/min": float(log_ratio.min()),
        "sampling/is_sequence_log_ratio/max": float(log_ratio.max()),
    }
    low, high = _bounds(clip_min, clip_max)
    sequence_ratio = torch.exp(log_ratio.to(torch.float32))  # TRL's sequence ratio is float32
    seq_outside = (sequence_ratio < low) | (sequence_ratio > high)
    seq_fraction = float(seq_outside.double().mean())
    seq_token_fraction = float(rows[seq_outside, TOKENS].sum() / tokens)
    tok_any = float((rows[:, TOKENS_OUTSIDE] > 0).double().mean())
    tok_fraction = float(rows[:, TOKENS_OUTSIDE].sum() / tokens)
    what_if = {"sequence_mask": (seq_fraction, seq_token_fraction), "sequence_truncate": (seq_fraction, seq_token_fraction),
               "token_mask": (tok_any, tok_fraction), "token_truncate": (tok_any, tok_fraction)}
    return {"metrics": metrics, "what_if": what_if, "keep_all_cap": math.exp(float(log_ratio.max())),
            "median_ratio": math.exp(float(log_ratio.median())), "sequences": int(rows.shape[0])}


def _removed_share(summary: dict[str, Any], mode: str) -> float:
    key = "sequence" if mode.startswith("sequence") else "token"
    return summary["metrics"][f"sampling/is_masked_{key}_fraction"]


def _round_up(value: float) -> float:
    """Two significant figures, rounded up (a cap that keeps a ratio must not fall below it)."""
    if not math.isfinite(value) or value <= 0:
        return value
    scale = 10 ** (math.floor(math.log10(value)) - 1)
    return math.ceil(value / scale) * scale


def correction_warning(summary: dict[str, Any], mode: str, clip_min: float | None, clip_max: float | None,
                       step: int) -> str | None:
    """One warning line when the correction removed most of a batch, or scaled its sequences towards zero; else None.

    It names what the batch's numbers say would keep them: the other modes' shares at the same bounds, and the
    cap that keeps every sequence in the sequence modes.
    """
    if not summary:
        return None
    removed = _removed_share(summary, mode)
    floor = 1 / (clip_max if clip_max else 3.0)
    vanishing = summary["median_ratio"] < floor
    if removed <= WARN_FRACTION and not vanishing:
        return None
    m = summary["metrics"]
    n = summary["sequences"]
    seq_share, tok_share = m["sampling/is_masked_sequence_fraction"], m["sampling/is_masked_token_fraction"]
    verb = "masked" if mode.endswith("_mask") else "truncated"
    bounds = f"cap {clip_max}" + ("" if clip_min is None else f", clip_min {clip_min}")
    if mode.startswith("sequence"):
        what = f"{verb} {round(seq_share * n)} of {n} sequences ({100 * tok_share:.0f}% of the tokens)"
    else:
        what = f"{verb} {100 * tok_share:.1f}% of the tokens (in {round(seq_share * n)} of {n} sequences)"
    head = (f"vLLM importance sampling at step {step}: {mode} ({bounds}) {what}; mean per-token log difference "
            f"{m['sampling/is_token_log_diff_mean']:+.2e}, sequence log ratios "
            f"{m['sampling/is_sequence_log_ratio/min']:+.2f}..{m['sampling/is_sequence_log_ratio/max']:+.2f}")
    others = []
    for other in IS_MODES:
        if other != mode:
            seq, tok = summary["what_if"][other]
            share = f"{100 * seq:.0f}% of sequences" if other.startswith("sequence") else f"{100 * tok:.1f}% of tokens"
            others.append(f"{other} {'masks' if other.endswith('_mask') else 'truncates'} {share}")
    advice = f"; at these bounds {', '.join(others)}"
    cap = _round_up(summary["keep_all_cap"])
    if summary["keep_all_cap"] > (clip_max or math.inf) and summary["median_ratio"] >= floor:
        advice += f"; sequence_mask keeps every sequence with --vllm_importance_sampling_cap {cap:g}"
    if vanishing:
        advice += (f"; the median sequence ratio is {summary['median_ratio']:.1e}, so the loss is scaled towards 0: "
                   "vLLM's sampling differs from the trainer's model (top_p/top_k/min_p, penalties, min_tokens, or "
                   "the engine's dtype, --vllm_dtype)")
    return head + advice + " (docs/vllm.md)"
