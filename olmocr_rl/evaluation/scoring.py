"""Scoring an evaluation folder with the bench scorer, and the human report."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from olmocr_rl.bench.prepared import PROJECT_RULE, SCORING_RULES
from olmocr_rl.data.dataset import page_key
from olmocr_rl.evaluation.common import EvaluateError


# --- scoring ---------------------------------------------------------------------------------------


def check_scoring(scoring: str) -> None:
    """EvaluateError naming ``--scoring`` for an unknown rule."""
    if scoring not in SCORING_RULES:
        raise EvaluateError(f"--scoring {scoring!r} is not a scoring rule; choose one of {', '.join(SCORING_RULES)}")


def score_outputs(bench: str | os.PathLike, outputs: str | os.PathLike, *, pages: Sequence[dict] | None = None,
                  scoring: str = PROJECT_RULE) -> dict:
    """Score ``outputs`` with the bench scorer (:func:`olmocr_rl.bench.score.score_bench`) under the rule
    ``scoring``; its JSON form, with ``scoring`` (the rule's name) and ``scoring_rule`` (a line describing it).

    ``pages`` (dataset samples: ``pdf``, ``page``, ``test_ids``) restricts the score to those pages'
    tests and to the ``baseline`` tests the scorer adds for their PDFs, so held-out pages and
    ``--jsonl_filter`` runs are not charged for pages they did not transcribe. None scores the whole
    bench exactly as ``python -m olmocr_rl.bench.score --bench BENCH --outputs OUTPUTS`` does.
    Keys: ``overall_pass_rate`` (mean of per-JSONL pass rates), ``per_jsonl``, ``per_type``,
    ``missing_outputs``, ``tests``.
    """
    from olmocr_rl.bench.score import BASELINE_GROUP, BenchScore, UsageError, describe_rule, score_bench

    check_scoring(scoring)
    try:
        result = score_bench(Path(bench), Path(outputs), rule=scoring)
    except UsageError as exc:
        raise EvaluateError(f"scoring {outputs} against {bench}: {str(exc).splitlines()[0]}") from None
    if pages is not None:
        test_ids = {test_id for sample in pages for test_id in sample["test_ids"]}
        names = {page_key(sample["pdf"], sample["page"]) for sample in pages}
        prefixes = tuple(f"{os.path.splitext(sample['pdf'])[0]}_pg{sample['page']}_" for sample in pages)
        result = BenchScore(
            tests=[
                score for score in result.tests
                if score.test.id in test_ids
                or (score.group == BASELINE_GROUP and page_key(score.test.pdf, score.test.page) in names)
            ],
            missing=[pattern for pattern in result.missing if pattern.startswith(prefixes)],
        )
    scored = result.to_json()
    for score in result.tests:  # each test's page: --compare resamples pages
        scored["tests"][score.test.id]["page"] = page_key(score.test.pdf, score.test.page)
    return {"scoring": scoring, "scoring_rule": describe_rule(scoring), **scored}


def format_result(result: dict) -> str:
    """The human report: what was run, pass rate per JSONL file and type, and the overall number."""
    sampling = result["sampling"]
    if result.get("protocol") == "olmocr-pipeline":
        how = "olmOCR pipeline"
    else:
        how = "greedy" if not sampling["do_sample"] else f"temperature {sampling['temperature']:g}"
    lines = [
        f"model   {result['model']}",
        f"bench   {result['bench']}: {len(result['pages'])} page(s), {sampling['num_samples']} transcription(s) "
        f"each ({how}, max {sampling['max_new_tokens']} new tokens)",
        f"backend {result.get('backend', 'hf')}, protocol {result.get('protocol', 'single')}"
        + (f" ({result['pages_per_s']:.3f} pages/s)" if result.get("pages_per_s") else ""),
        f"outputs {result['outputs']}",
        f"scoring {result['scoring_rule']}",
        "",
    ]
    for title, table in (("JSONL", result["per_jsonl"]), ("type", result["per_type"])):
        width = max([len(title), *(len(name) for name in table)])
        lines.append(f"{title:<{width}}  pass rate  passed/total")
        lines += [f"{name:<{width}}  {100 * row['pass_rate']:8.1f}%  {row['passed']}/{row['total']}"
                  for name, row in table.items()]
        lines.append("")
    passed = sum(row["passed"] for row in result["per_jsonl"].values())
    total = sum(row["total"] for row in result["per_jsonl"].values())
    pipeline = result.get("protocol") == "olmocr-pipeline"
    lines.append(f"overall pass rate (mean of per-JSONL pass rates){' of the pipeline' if pipeline else ''}: "
                 f"{100 * result['overall_pass_rate']:.1f}% ({passed}/{total} tests)")
    model_only = result.get("model_only")
    if pipeline and model_only:
        sources = result.get("model_only_sources", {})
        lines.append(f"overall pass rate of the model alone: {100 * model_only['overall_pass_rate']:.1f}% (its "
                     f"{result.get('fallbacks', 0)} text-layer fallback(s) read as its last usable answer "
                     f"({sources.get('last_usable_answer', 0)}) or empty ({sources.get('empty', 0)}))")
    if result.get("leaderboard"):
        from olmocr_rl.evaluation.leaderboard import format_leaderboard

        boards = {"model only": model_only["leaderboard"]} if model_only else {}
        if pipeline or not boards:
            boards["pipeline" if pipeline else "score"] = result["leaderboard"]
        lines += ["", *format_leaderboard(boards), ""]
    if result.get("resumed_pages"):
        lines.append(f"note: {result['resumed_pages']} page(s) were transcribed by an earlier run of this command "
                     "(stopped, then continued)")
    if result["capped_samples"]:
        lines.append(f"note: {result['capped_samples']} transcription(s) stopped at --max_new_tokens "
                     f"{sampling['max_new_tokens']}; raise it if pages are cut off")
    if result.get("failed_requests"):
        what = "attempt(s)" if pipeline else "transcription(s)"
        lines.append(f"note: {result['failed_requests']} {what} of {result.get('requests', '?')} failed at the "
                     "backend (timeouts or errors after the retries); "
                     + ("each counts as a failed attempt" if pipeline else "their tests fail")
                     + "; the same command retries those pages")
    if result.get("pipeline"):
        lines.append(format_pipeline(result["pipeline"]))
    if result["missing_outputs"]:
        lines.append(f"missing outputs (their tests fail): {', '.join(result['missing_outputs'])}")
    return "\n".join(lines)


def format_pipeline(counts: dict) -> str:
    """The olmOCR pipeline's counts in one line each: attempts, retry causes, rotations, fallbacks."""
    attempts = ", ".join(f"{a}: {n}" for a, n in counts["finished_on_attempt"].items() if n)
    causes = ", ".join(f"{cause} {n}" for cause, n in counts["retry_causes"].items()) or "none"
    return (f"pipeline: {counts['transcriptions']} transcription(s); finished on attempt {attempts or '-'}; "
            f"retries by cause: {causes}; rotated {counts['rotated']}, kept with an invalid rotation "
            f"{counts['kept_invalid_rotation']}, text-layer fallbacks {counts['fallbacks']}")
