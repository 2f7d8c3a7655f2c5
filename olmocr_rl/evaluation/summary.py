"""An evaluation's results from its page records: the scores (as written, and the model-only score), the leaderboard
rows with their intervals, and ``evaluation.json``'s counts (what produced each scored text, failed requests, the
pipeline's attempts)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

from olmocr_rl.evaluation.folder import test_set_digest, versions
from olmocr_rl.evaluation.leaderboard import leaderboard
from olmocr_rl.evaluation.protocol import TEMPERATURE_BY_ATTEMPT

#: What produced a scored transcription (``outcome``), every key always present.
OUTCOMES = ("answer", "kept-invalid-rotation", "fallback", "error")
SCORE_KEYS = ("overall_pass_rate", "per_jsonl", "per_type", "missing_outputs")


def pipeline_counts(repeats: Sequence[dict], max_attempts: int) -> dict:
    """The pipeline's report: transcriptions finished per attempt, retry causes, rotations, kept invalid rotations,
    fallbacks (and how the model-only score read them)."""
    answered = [r for r in repeats if r["outcome"] in ("answer", "kept-invalid-rotation")]
    per_attempt = Counter(r["attempts"] for r in answered)
    return {
        "max_attempts": max_attempts,
        "temperature_by_attempt": list(TEMPERATURE_BY_ATTEMPT),
        "finished_on_attempt": {str(a): per_attempt.get(a, 0) for a in range(1, max_attempts + 1)},
        "retry_causes": dict(sorted(Counter(cause for r in repeats for cause in r["causes"]).items())),
        "rotated": sum(r["rotation"] != 0 for r in answered),
        "kept_invalid_rotation": sum(r["outcome"] == "kept-invalid-rotation" for r in repeats),
        "fallbacks": sum(r["outcome"] == "fallback" for r in repeats),
        "fallbacks_scored_as_the_models_last_usable_answer": sum(r["outcome"] == "fallback" and r["model_attempt"] > 0
                                                                 for r in repeats),
        "transcriptions": len(repeats),
    }


def model_only_sources(repeats: Sequence[dict]) -> dict:
    """What the model-only score read for each transcription."""
    return {"answer": sum(r["outcome"] in ("answer", "kept-invalid-rotation") for r in repeats),
            "last_usable_answer": sum(r["outcome"] == "fallback" and r["model_attempt"] > 0 for r in repeats),
            "empty": sum(r["outcome"] == "fallback" and r["model_attempt"] == 0 for r in repeats),
            "failed": sum(r["outcome"] == "error" for r in repeats)}


def counts(run, records: Sequence[dict]) -> dict:
    """``evaluation.json``'s counts over every page (this session's and earlier ones)."""
    repeats = [r for record in records for r in record["repeats"]]
    outcomes = Counter(r["outcome"] for r in repeats)
    errors = [r.get("error") for r in repeats if r.get("error")]
    out = {
        "generated_tokens": sum(r["tokens"] for r in repeats),
        "capped_samples": sum(r["finish"] == "length" and r["outcome"] == "answer" for r in repeats),
        "requests": sum(r["attempts"] for r in repeats) if run.pipeline else len(repeats),
        "failed_requests": sum(r["failed_requests"] for r in repeats),
        "first_failure": errors[0] if errors else None,
        "transcription_sources": {outcome: outcomes.get(outcome, 0) for outcome in OUTCOMES},
        "fallbacks": outcomes.get("fallback", 0),
        "model_only_sources": model_only_sources(repeats),
    }
    if run.pipeline:
        out["pipeline"] = pipeline_counts(repeats, run.max_attempts)
    return out


def results(run, records: Sequence[dict], *, resumed: int, seconds: float, resamples: int, score: Callable,
            model_only_folder: str) -> dict:
    """Score the folder (and its model-only folder under the pipeline), write ``scores.json``,
    ``scores_model_only.json`` and ``evaluation.json``, and return the result (the scorer's keys and the summary's)."""
    chosen = [run.sample(i) for i in run.selected]
    scores = score(run.bench, run.folder.path, pages=chosen, scoring=run.scoring)
    board = leaderboard(scores, resamples, run.seed)
    model_scores = None
    if run.pipeline:
        (run.folder.path / model_only_folder).mkdir(exist_ok=True)
        model_scores = score(run.bench, run.folder.path / model_only_folder, pages=chosen, scoring=run.scoring)
    model_only = {key: (model_scores or scores)[key] for key in SCORE_KEYS}
    model_only["leaderboard"] = leaderboard(model_scores, resamples, run.seed) if model_scores else board
    model_only["same_as_scored"] = model_scores is None or all(
        model_scores["tests"][t]["repeat_passes"] == scores["tests"][t]["repeat_passes"] for t in scores["tests"])
    transcribed = len(records) - resumed
    sampling = run.sampling
    summary = {
        "model": run.model, "bench": run.bench, "outputs": str(run.folder.path), "backend": run.flags.backend,
        "protocol": run.flags.protocol,
        "server_model": (run.flags.server_model or run.model) if run.flags.backend == "server" else None,
        "pages": [run.key(i) for i in run.selected],
        "sampling": {"num_samples": sampling.num_samples, "do_sample": sampling.do_sample,
                     "temperature": sampling.temperature if not run.pipeline else None,
                     "max_new_tokens": run.max_new_tokens, "batch_size": run.flags.batch_size or 1, "seed": run.seed,
                     "image_dim": run.dataset.target_longest_image_dim},
        "seed": run.seed, "scoring": scores["scoring"], "test_set": test_set_digest(list(scores["tests"])),
        **counts(run, records),
        "model_only": model_only, "leaderboard": board,
        "resumed_pages": resumed, "generate_s": round(seconds, 3),
        "pages_per_s": round(transcribed / seconds, 4) if seconds and transcribed else None,
        "versions": versions(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    run.folder.finish(scores, model_scores, summary)
    return {**scores, **summary}
