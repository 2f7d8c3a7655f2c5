"""Partial credit per unit test: a score in [0, 1] for each test, for the continuous bench reward.

A test that passes scores 1.0, exactly as the binary verdict. A test that fails scores
``FAIL_CEILING * progress`` with ``progress`` in [0, 1): how close the completion came, measured with the
same normalisation, windows, tables and equation layouts the verdict used. A failing test therefore scores
at most 0.5, so passing a test is worth more than any amount of progress on it, and among completions
that fail the same test the closer one scores higher. Progress per type (docs/rewards.md has worked examples):

- ``present``: ``s`` = ``partial_ratio(text, window) / 100`` (the verdict's similarity, computed whole),
  ``t`` the test's threshold: ``progress = clamp((s / t - 0.5) / 0.5, 0, 1)`` — 0 at half the threshold, rising
  linearly towards the threshold. A window shorter than ``len(text) - max_diffs`` (the near-empty guard of
  :mod:`.types.text`) has progress 0: it cannot contain the text.
- ``absent``: fails when ``s >= t``; ``progress = (1 - s) / (1 - t)`` for ``t < 1`` (a fuzzy test whose match
  is only just good enough) and 0 for an exact test (``max_diffs: 0``: the text is there verbatim).
- ``order``: 0 unless both ``before`` and ``after`` are found (the verdict's search); then, with ``b`` the start
  of the first ``before`` match, ``a`` the start of the last ``after`` match (``b >= a``: wrong order) and ``L``
  the normalised completion's length, ``progress = 1 - (b - a) / L``.
- ``table``: 0 without tables or without a cell matching ``cell``; otherwise the largest share, over the
  matching cells, of the test's relations (up/down/left/right/top_heading/left_heading) that hold.
- ``math``: 0 without equations; otherwise the largest, over the candidates the verdict tries, share of
  reference glyphs that have a candidate glyph with the same character and same-character neighbours
  (:func:`olmocr_rl.bench.latex.glyph_match_fraction`).
- ``baseline``, ``format``, ``footnote`` and any other type: binary (progress 0), so the repetition, blank-page
  and disallowed-character checks keep their full weight.

Pure: no I/O, no state; the verdict is the test's own ``run_prepared``, untouched.
"""

from __future__ import annotations

from typing import Callable

from rapidfuzz import fuzz

from .base import BenchTest
from .fuzzy import first_match_start, last_match_start
from .latex import glyph_match_fraction, layout
from .prepared import PreparedText
from .types import MathTest, OrderTest, PresenceTest, TableTest
from .types.math_eq import MAX_CANDIDATES
from .types.table import _neighbours

__all__ = ["FAIL_CEILING", "PRESENT_FLOOR", "credit", "progress", "run_with_credit"]

#: A failing test scores at most this (times its progress, which is below 1).
FAIL_CEILING = 0.5
#: ``present``: similarity, as a share of the threshold, below which progress is 0.
PRESENT_FLOOR = 0.5


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _presence_progress(test: PresenceTest, prepared: PreparedText) -> float:
    window = test._window(prepared)
    if len(window) < len(test.reference) - test.max_diffs or not window:
        return 0.0  # the near-empty guard: too short to contain the text
    similarity = fuzz.partial_ratio(test.reference, window) / 100.0
    if test.type == "present":
        return _clamp((similarity / test.threshold - PRESENT_FLOOR) / (1.0 - PRESENT_FLOOR))
    if test.threshold >= 1.0:
        return 0.0
    return _clamp((1.0 - similarity) / (1.0 - test.threshold))


def _order_progress(test: OrderTest, prepared: PreparedText) -> float:
    content = prepared.normalized
    first_before = first_match_start(test.before, content, test.max_diffs)
    last_after = last_match_start(test.after, content, test.max_diffs)
    if first_before is None or last_after is None or not content:
        return 0.0
    return _clamp(1.0 - max(0, first_before - last_after) / len(content))


def _table_progress(test: TableTest, prepared: PreparedText) -> float:
    if not test.checks:
        return 0.0  # with no relation a matching cell passes, so a failure found no cell
    best = 0
    for table in prepared.tables(include_markdown=not test.ignore_markdown_tables):
        for cell in test._matching_cells(table):
            held = sum(
                test._relation_holds(table, _neighbours(table, cell, relation), expected, threshold)[0]
                for relation, expected, threshold in test.checks
            )
            best = max(best, held)
    return best / len(test.checks)


def _math_progress(test: MathTest, prepared: PreparedText) -> float:
    equations = prepared.equations(ignore_dollar_delimited=test.ignore_dollar_delimited)
    ranked = sorted(equations, key=lambda candidate: -fuzz.ratio(candidate, test.math))
    best = 0.0
    for candidate in ranked[:MAX_CANDIDATES]:
        candidate_layout = prepared.derived(("latex_layout", candidate), lambda _p, c=candidate: layout(c))
        best = max(best, glyph_match_fraction(candidate_layout, test.reference_layout))
        if best >= 1.0:
            break
    return best


_PROGRESS: dict[type, Callable[..., float]] = {
    PresenceTest: _presence_progress,
    OrderTest: _order_progress,
    TableTest: _table_progress,
    MathTest: _math_progress,
}


def progress(test: BenchTest, prepared: PreparedText) -> float:
    """How close a completion that *fails* ``test`` came to passing it, in [0, 1] (0 for binary types)."""
    measure = _PROGRESS.get(type(test))
    return 0.0 if measure is None else measure(test, prepared)


def credit(passed: bool, test: BenchTest, prepared: PreparedText) -> float:
    """A test's score given its verdict: 1.0 when it passed, else ``FAIL_CEILING * progress`` (at most 0.5)."""
    if passed:
        return 1.0
    return FAIL_CEILING * min(progress(test, prepared), 1.0)


def run_with_credit(test: BenchTest, prepared: PreparedText) -> tuple[bool, float]:
    """``(verdict, score)``: the test's own verdict and its partial credit."""
    passed, _explanation = test.run_prepared(prepared)
    passed = bool(passed)
    return passed, credit(passed, test, prepared)
