"""normalize_text, present/absent, order and the near-match search, on hand-worked cases."""

from __future__ import annotations

import pytest

from olmocr_rl.bench import load_single_test, normalize_text, prepare_text
from olmocr_rl.bench.fuzzy import first_match_start, last_match_start

BASE = {"pdf": "doc.pdf", "page": 1, "id": "t"}


def make(**fields):
    return load_single_test({**BASE, **fields})


# --- normalisation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("a<br>b<br/>c", "a b c"),
        ("a<br />b", "a<br />b"),  # only the two exact spellings are line breaks
        ("**bold** and __under__", "bold and under"),
        ("<b>x</b> <i>y</i>", "x y"),
        ("*it* and _em_", "it and em"),
        ("snake_case_name", "snakecasename"),  # paired underscores are italics markers
        # ** does not pair across a line break, but the italics pass then pairs each "**" with itself
        # (an empty italic span), so the stars still go.
        ("**a\nb**", "a b"),
        ("*a\nb*", "*a b*"),  # a lone pair across a line break survives (whitespace collapses last)
        ("a \n\t  b", "a b"),
        ("e\u0301t\u00e9", "\u00e9t\u00e9"),  # NFC
        ("‘a’ “b” „c‚", "'a' \"b\" \"c'"),
        ("a–b—c−d‑e‒f", "a-b-c-d-e-f"),
        ("5µm", "5μm"),
        ("A＿B", "A_B"),
        ("", ""),
    ],
)
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected


def test_normalize_none_is_none():
    assert normalize_text(None) is None


# --- present / absent --------------------------------------------------------------------------------


def test_present_exact_with_smart_quotes_and_emphasis():
    assert make(type="present", text="it's **Important** — really").run("Yes, it’s Important - really.") == (True, "")
    passed, why = make(type="present", text="missing words").run("nothing here")
    assert not passed and "missing words" in why


def test_case_sensitivity():
    assert not make(type="present", text="Master Bath").run("MASTER BATH")[0]
    assert make(type="present", text="Master Bath", case_sensitive=False).run("MASTER BATH")[0]


def test_max_diffs_threshold_is_one_minus_diffs_over_length():
    # Ten characters, one allowed difference: threshold 0.9. For strings of equal length
    # partial_ratio is the plain Indel ratio: one substitution = 2 indels over 20 chars = 0.9.
    test = make(type="present", text="abcdefghij", max_diffs=1)
    assert test.threshold == pytest.approx(0.9)
    assert test.run("abcdefghiX")[0]
    assert not test.run("abcdefghXY")[0]  # 1 - 4/20 = 0.8
    absent = make(type="absent", text="abcdefghij", max_diffs=1)
    assert not absent.run("abcdefghiX")[0]
    assert absent.run("abcdefghXY")[0]


def test_first_n_and_last_n_windows_are_taken_after_normalisation():
    text = "HEADER   body body FOOTER"  # normalised: "HEADER body body FOOTER"
    assert make(type="absent", text="FOOTER", first_n=10).run(text)[0]
    assert not make(type="absent", text="FOOTER", last_n=6).run(text)[0]
    assert make(type="present", text="HEADERFOOTER", first_n=6, last_n=6).run(text)[0]
    assert not make(type="present", text="body", first_n=6, last_n=6).run(text)[0]


def test_short_completions_cannot_contain_long_references():
    # partial_ratio alone would align the single space inside the reference and score 1.0.
    assert make(type="present", text="a long phrase").run("\n") == (False, make(type="present", text="a long phrase").run("\n")[1])
    assert not make(type="present", text="a long phrase").run("\n")[0]
    assert make(type="absent", text="a long phrase").run("\n") == (True, "")
    assert not make(type="present", text="x").run("")[0]
    assert make(type="absent", text="x").run("")[0]


# --- order ---------------------------------------------------------------------------------------------


def test_order_exact():
    test = make(type="order", before="Introduction", after="Methods")
    assert test.run("1 Introduction ... 2 Methods") == (True, "")
    passed, why = test.run("2 Methods ... 1 Introduction")
    assert not passed and "does not appear before" in why
    passed, why = test.run("only Methods")
    assert not passed and "'before' text 'Introduction' not found" in why


def test_order_uses_the_leftmost_before_and_rightmost_after():
    test = make(type="order", before="A1", after="B2")
    assert test.run("B2 A1 B2")[0]
    assert test.run("A1 B2 A1")[0]
    assert not test.run("B2 A1")[0]


def test_order_same_text_needs_two_occurrences():
    test = make(type="order", before="Section", after="Section", max_diffs=1)
    assert not test.run("one Section only")[0]
    assert test.run("Section and Section")[0]


def test_order_fuzzy_and_normalised():
    test = make(type="order", before="Introduction—overview", after="Methods", max_diffs=1)
    assert test.run("Intrduction-overview then Methods")[0]
    assert not test.run("Intrdction-overvew then Methods")[0]  # three edits


def test_near_match_starts_follow_fuzzysearch_grouping():
    assert first_match_start("abc", "xabcabc", 0) == 1
    assert last_match_start("abc", "xabcabc", 0) == 4
    # "helo" (one deletion) starts at 4, the exact "hello" at 12.
    assert first_match_start("hello", "say helo to hello", 1) == 4
    assert last_match_start("hello", "say helo to hello", 1) == 12
    # Overlapping candidates form one group whose best (exact) member is reported: "xaaa" at 0 is
    # also within one edit, but the exact "aaaa" at 1 wins.
    assert first_match_start("aaaa", "xaaaay", 1) == 1
    assert first_match_start("hello", "nothing similar", 1) is None


def test_prepared_text_views_are_cached_and_shared():
    prepared = prepare_text("Hello  **World**")
    assert prepared.normalized == "Hello World"
    assert prepared.normalized is prepared.normalized
    assert prepared.normalized_lower == "hello world"
    assert prepared.alnum_count == 10
    assert prepare_text(prepared) is prepared


def test_raw_text_shortcut_never_changes_a_verdict():
    # Exact tests decide from the raw text when normalisation can only change spacing and
    # typography (no markers, already NFC), or rule a text out when the reference's longest ASCII
    # word is missing and nothing can merge words. Compare with both shortcuts switched off, on
    # texts built to tempt them (markers, Kelvin sign, combining marks, fancy quotes and dashes).
    import random

    rng = random.Random(4)
    pieces = ["foo", "bar", "foobar", "Kx", "\u212ax", "e\u0301", "\u00e9", " ", "  ", "\n", "\t", "\xa0", "**", "*", "_",
              "<b>", "</b>", "<br>", "’", "'", "“", '"', "—", "-", "−", "µ", "μ", "10"]
    for _ in range(6000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        reference = "".join(rng.choice(["foo", "bar", "foobar", "Kx", " ", "10", "'", "-", "’", "µ", '"', "\u00e9"]) for _ in range(rng.randint(1, 3)))
        if not reference.strip() or not any(ch.isalnum() for ch in reference):
            continue
        kind = rng.choice(["present", "absent", "order"])
        fields = {"before": reference, "after": "bar"} if kind == "order" else {"text": reference, "last_n": rng.choice([None, 8])}
        try:
            test = make(type=kind, **fields)
        except ValueError:
            continue
        shortcut = test.run(text)[0]
        if kind == "order":
            object.__setattr__(test, "probes", (None, None))
        else:
            object.__setattr__(test, "probe", None)
            object.__setattr__(test, "raw_pattern", None)
        assert test.run(text)[0] == shortcut, (kind, text, reference)
