"""Partial credit per test type (olmocr_rl.bench.partial): hand-worked values, and agreement with the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmocr_rl.bench import (
    BaselineTest,
    FormatTest,
    MathTest,
    OrderTest,
    PresenceTest,
    TableTest,
    load_tests,
    prepare_text,
)
from olmocr_rl.bench.partial import FAIL_CEILING, credit, progress, run_with_credit
from olmocr_rl.data.references import find_reference

COMMON = dict(pdf="p.pdf", page=1, id="t")
REPO_SAMPLE = Path(__file__).resolve().parents[2] / "bench_data_sample"


def score(test, text):
    return run_with_credit(test, prepare_text(text))


# --- present / absent -----------------------------------------------------------------------------


def test_present_credit_is_similarity_over_threshold_minus_half():
    exact = PresenceTest(**COMMON, type="present", text="Hello world")  # threshold 1
    assert score(exact, "x Hello world y") == (True, 1.0)
    # One substitution in 11 characters: partial_ratio = 1 - 2/22 = 20/22; credit = 20/22 - 1/2 = 9/22.
    assert score(exact, "Hello wurld") == (False, pytest.approx(9 / 22))
    fuzzy = PresenceTest(**COMMON, type="present", text="Hello world", max_diffs=2)  # threshold 9/11
    # Three substitutions: ratio 1 - 6/22 = 16/22; (16/22) / (9/11) = 8/9; credit 8/9 - 1/2 = 7/18.
    assert score(fuzzy, "Hxllx wxrld") == (False, pytest.approx(7 / 18))
    assert score(fuzzy, "Hello wurld") == (True, 1.0)  # one edit is within max_diffs


def test_present_near_empty_and_unrelated_text_get_nothing():
    test = PresenceTest(**COMMON, type="present", text="The quick brown fox jumps over the lazy dog")
    for text in ("", " ", "a", "The quick"):  # shorter than the 43-char text: the near-empty guard
        assert score(test, text) == (False, 0.0)
    # Unrelated text at least as long: similarity under half the threshold scores 0.
    assert score(test, "0123456789 0123456789 0123456789 0123456789 0123") == (False, 0.0)


def test_absent_credit_falls_from_the_threshold_to_an_exact_match():
    exact = PresenceTest(**COMMON, type="absent", text="Page 7")
    assert score(exact, "nothing to see") == (True, 1.0)
    assert score(exact, "see Page 7 here") == (False, 0.0)  # there verbatim
    assert score(exact, "") == (True, 1.0)  # nothing is absent-violating; same as the verdict
    fuzzy = PresenceTest(**COMMON, type="absent", text="Hello world", max_diffs=2)  # threshold 9/11
    # One substitution: ratio 20/22 >= 9/11 fails; progress (1 - 20/22) / (1 - 9/11) = 1/2; credit 1/4.
    assert score(fuzzy, "Hello wurld") == (False, pytest.approx(0.25))
    assert score(fuzzy, "Hello world") == (False, 0.0)


# --- order ------------------------------------------------------------------------------------------


def test_order_credit_needs_both_spans_and_shrinks_with_the_gap():
    test = OrderTest(**COMMON, type="order", before="Alpha", after="Beta")
    assert score(test, "Alpha then Beta") == (True, 1.0)
    # "Beta then Alpha": L = 15, first Alpha at 10, last Beta at 0: progress 1 - 10/15 = 1/3, credit 1/6.
    assert score(test, "Beta then Alpha") == (False, pytest.approx(1 / 6))
    # Adjacent ("BetaAlpha": Alpha at 4, Beta at 0, L = 9): progress 5/9, credit 5/18 > 1/6.
    assert score(test, "BetaAlpha") == (False, pytest.approx(5 / 18))
    assert score(test, "Alpha only") == (False, 0.0)
    assert score(test, "Beta only") == (False, 0.0)


# --- table ------------------------------------------------------------------------------------------

TABLE = "| Name | Age | City |\n|---|---|---|\n| Bob | 42 | Paris |\n"


def test_table_credit_is_the_share_of_relations_that_hold():
    good = TableTest(**COMMON, type="table", cell="42", left="Bob", up="Age", right="Paris")
    assert score(good, TABLE) == (True, 1.0)
    one_wrong = TableTest(**COMMON, type="table", cell="42", left="Bob", up="Years", right="Paris")
    assert score(one_wrong, TABLE) == (False, pytest.approx(0.5 * 2 / 3))
    none_hold = TableTest(**COMMON, type="table", cell="42", left="Alice", up="Years")
    assert score(none_hold, TABLE) == (False, 0.0)
    assert score(one_wrong, "no table, just 42 next to Bob") == (False, 0.0)  # no tables
    missing = TableTest(**COMMON, type="table", cell="43", left="Bob")
    assert score(missing, TABLE) == (False, 0.0)  # no cell matches


# --- math -------------------------------------------------------------------------------------------


def test_math_credit_is_the_glyph_match_fraction():
    test = MathTest(**COMMON, type="math", math="a+b")
    assert score(test, "$$a+b+c$$") == (True, 1.0)
    # Reference glyphs a, +, b: "a" has a candidate with "+" to its right; "+" needs "b" to its right
    # (candidate has "c"); "b" does not occur: 1/3 of the glyphs, credit 1/6.
    assert score(test, "$$a+c$$") == (False, pytest.approx(1 / 6))
    # The best candidate counts: adding a worse equation changes nothing.
    assert score(test, "$$x$$ and $$a+c$$") == (False, pytest.approx(1 / 6))
    assert score(test, "$$b+a$$") == (False, 0.0)  # every glyph has the wrong neighbours
    assert score(test, "a+b in plain text") == (False, 0.0)  # no equation at all


# --- binary types -----------------------------------------------------------------------------------


def test_baseline_and_format_stay_binary():
    baseline = BaselineTest(**COMMON, type="baseline")
    assert score(baseline, "Some text") == (True, 1.0)
    assert score(baseline, "") == (False, 0.0)
    assert score(baseline, "x" + "ab" * 200) == (False, 0.0)  # runaway repetition
    bold = FormatTest(**COMMON, type="format", text="Title", format="bold")
    assert score(bold, "**Title**") == (True, 1.0)
    assert score(bold, "Title") == (False, 0.0)
    assert progress(bold, prepare_text("Titl")) == 0.0


def test_credit_of_a_pass_is_one_and_of_a_failure_at_most_the_ceiling():
    test = PresenceTest(**COMMON, type="absent", text="Hello world", max_diffs=2)
    prepared = prepare_text("Hello world")
    assert credit(True, test, prepared) == 1.0
    assert 0.0 <= credit(False, test, prepared) <= FAIL_CEILING


# --- agreement with the verdicts on real data ------------------------------------------------------


def _pages(folder: Path):
    """(tests, texts) per page: the page's tests and a few transcriptions (real outputs or references)."""
    by_page: dict = {}
    for path in sorted(folder.glob("*.jsonl")):
        for test in load_tests(path):
            by_page.setdefault((test.pdf, test.page), []).append(test)
    return by_page


def _variants(text: str) -> list[str]:
    lines = text.splitlines()
    return [text, "", text[: len(text) // 2], "\n".join(reversed(lines)), text.replace("e", "o"), text * 2]


def test_verdict_is_unchanged_and_credit_is_one_exactly_for_passes_on_the_repo_sample():
    checked = 0
    for (pdf, page), tests in _pages(REPO_SAMPLE).items():
        reference = find_reference(REPO_SAMPLE, pdf, page)
        if reference is None:
            continue
        for text in _variants(reference):
            prepared = prepare_text(text)
            for test in tests:
                passed, value = run_with_credit(test, prepared)
                assert passed == test.run(text)[0]
                assert (value == 1.0) if passed else (0.0 <= value <= FAIL_CEILING)
                checked += 1
    assert checked > 100


@pytest.mark.shared
def test_verdict_is_unchanged_and_credit_is_one_exactly_for_passes_on_real_outputs(shared_sample):
    checked = partial = 0
    for (pdf, page), tests in _pages(shared_sample).items():
        output = shared_sample / "olmocr_pipeline" / (Path(pdf).with_suffix("").as_posix() + f"_pg{page}_repeat1.md")
        if not output.is_file():
            continue
        for text in _variants(output.read_text(encoding="utf-8")):
            prepared = prepare_text(text)
            for test in tests:
                passed, value = run_with_credit(test, prepared)
                assert passed == test.run(text)[0]
                assert (value == 1.0) if passed else (0.0 <= value <= FAIL_CEILING)
                partial += 0.0 < value < 1.0
                checked += 1
    assert checked > 300 and partial > 10  # failures do get graded credit on real pages
