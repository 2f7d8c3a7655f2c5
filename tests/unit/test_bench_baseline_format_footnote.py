"""baseline, format and footnote tests on hand-worked cases."""

from __future__ import annotations

import pytest

from olmocr_rl.bench import load_single_test
from olmocr_rl.bench.types.baseline import tail_repeat_counts
from olmocr_rl.bench.types.format import formatted_spans

BASE = {"pdf": "doc.pdf", "page": 1, "id": "t"}


def make(**fields):
    return load_single_test({**BASE, **fields})


# --- baseline ----------------------------------------------------------------------------------------


def test_blank_page_counts_alphanumerics():
    test = make(type="baseline", max_length=10)
    assert test.run("abc 123 ...") == (True, "")
    assert test.run("hello world!!")[0]  # exactly 10
    passed, why = test.run("hello worlds")
    assert not passed and "11 alphanumeric" in why
    # A blank-page test checks nothing else: a degenerate tail is fine.
    assert make(type="baseline", max_length=100).run("a" * 50)[0]


def test_blank_page_can_skip_image_tags():
    text = "![a picture of a cat](img.png)"
    assert not make(type="baseline", max_length=0).run(text)[0]
    assert make(type="baseline", max_length=0, max_length_skips_image_alt_tags=True).run(text)[0]


def test_empty_or_punctuation_only_text_fails():
    assert make(type="baseline").run("") == (False, "the text contains no alphanumeric characters")
    assert not make(type="baseline").run("... !!! ---")[0]


def test_tail_repetition():
    test = make(type="baseline")
    assert test.run("Hello " + "a" * 30)[0]  # 30 repeats are allowed
    passed, why = test.run("Hello " + "a" * 31)
    assert not passed and "1-character" in why
    assert test.run("a" * 100 + " end.")[0]  # repetition not at the end is not looked at
    # Whitespace runs collapse: "ab\n\n" x 31 ends with 31 copies of "ab ".
    assert not test.run("ab\n\n" * 31)[0]
    assert test.run("ab\n\n" * 30)[0]
    assert not make(type="baseline", max_repeats=5).run("xyz" + "ha" * 6)[0]
    assert make(type="baseline", max_repeats=5).run("xyz" + "ha" * 5)[0]


def test_tail_repeat_counts_match_hand_counts():
    assert tail_repeat_counts("abcabcabcabc", 100) == (1, 1, 4, 1, 1)
    assert tail_repeat_counts("aabaabaa", 100) == (2, 1, 2, 0, 0)[:3] + (1, 1)
    assert tail_repeat_counts("a", 100) == (1, 0, 0, 0, 0)
    assert tail_repeat_counts("a" * 10000, 31) == (31, 31, 31, 31, 31)  # capped
    assert tail_repeat_counts("x  \n " + "y", 10) == (1, 1, 1, 0, 0)  # "x y"


def test_disallowed_characters():
    assert not make(type="baseline").run("Hello 世界")[0]
    assert not make(type="baseline").run("ok 😀")[0]
    assert make(type="baseline", check_disallowed_characters=False).run("Hello 世界")[0]
    assert make(type="baseline").run("مرحبا Привет Γειά")[0]


# --- format ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, text, passes",
    [
        ("heading", "# Title\n\nbody", True),
        ("heading", "Intro\n<h2 class='x'>Title</h2>", True),
        ("heading", "**Title**", False),
        ("bold", "a **Title** b", True),
        ("bold", "a __Title__ b", True),
        ("bold", "a <b>Title</b> b", True),
        ("bold", "a <STRONG>Title</STRONG> b", True),
        ("bold", "a *Title* b", False),
        ("italic", "a *Title* b", True),
        ("italic", "a _Title_ b", True),
        ("italic", "a <em>Title</em> b", True),
        ("italic", "a <i>Title</i> b", True),
        ("italic", "a **Title** b", False),  # double markers are bold, not italic
    ],
)
def test_format_spans(fmt, text, passes):
    assert make(type="format", text="Title", format=fmt).run(text)[0] is passes


def test_format_quirks_kept_from_olmocr_bench():
    # <b[^>]*> also matches <br>: the text after a <br> up to </b> counts as bold.
    assert formatted_spans("line<br>Text</b>", "bold") == ["Text"]
    # Spans may cross lines and are normalised before comparison.
    assert make(type="format", text="multi line", format="bold").run("**multi\nline**")[0]
    assert make(type="format", text="TITLE", format="heading", case_sensitive=False).run("## title")[0]


def test_formatted_spans_pairing():
    assert formatted_spans("*a* and *b* and *c", "italic") == ["a", "b"]
    assert formatted_spans("**a** **b", "bold") == ["a"]
    assert formatted_spans("x***y***z", "italic") == []  # runs of three are not single markers
    assert formatted_spans("<i>a</i><img src=x>b</i>", "italic") == ["a", "b"]


def test_format_spans_are_linear_on_unclosed_markers():
    # olmOCR-bench's (.*?) regexes go quadratic here; the scans stay linear and give the same spans.
    text = "*a " * 30000 + "<b" * 20000 + "<i>x" * 20000
    assert make(type="format", text="zzz", format="italic").run(text)[0] is False
    assert make(type="format", text="zzz", format="bold").run(text)[0] is False


# --- footnote -----------------------------------------------------------------------------------------


def test_footnote_markers():
    test = make(type="footnote", marker="1")
    assert test.run("text[^1] more")[0]
    assert not test.run("[^1]: only the definition")[0]
    assert test.run("text<sup>1</sup>")[0]
    assert test.run("text <SUP class='fn'>1</SUP>")[0]
    assert test.run("text¹")[0]
    assert not test.run("text 1")[0]
    assert make(type="footnote", marker="12").run("word¹²")[0]
    assert make(type="footnote", marker="*").run("word[^*]")[0]


def test_footnote_context():
    before = make(type="footnote", marker="1", appears_before_marker="the results")
    assert before.run("We report the results[^1].")[0]
    passed, why = before.run("Other text[^1]")
    assert not passed and "not found before" in why
    after = make(type="footnote", marker="2", appears_after_marker="See Smith (2020)")
    assert after.run("Body² and later ² See Smith, 2020.")[0]  # satisfied by the second occurrence
    both = make(type="footnote", marker="3", appears_before_marker="alpha beta", appears_after_marker="gamma delta")
    assert both.run("alpha beta³ x ... y ³gamma delta")[0]  # each constraint by a different occurrence
    # Threshold 1 - max_diffs/10 (length of "the resuls"), compared on the cleaned "theresuls" (9):
    # its best window "theresult" shares 8 letters, ratio 1 - 2/18 = 0.889.
    text = "we saw the results[^1]"
    assert not make(type="footnote", marker="1", appears_before_marker="the resuls", max_diffs=1).run(text)[0]  # 0.9
    assert make(type="footnote", marker="1", appears_before_marker="the resuls", max_diffs=2).run(text)[0]  # 0.8
