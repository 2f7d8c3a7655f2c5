"""Browser-free math: LaTeX layout + glyph-neighbour matching against olmOCR-bench's KaTeX verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmocr_rl.bench import latex, load_single_test
from olmocr_rl.bench.equations import extract_equations

BASE = {"pdf": "doc.pdf", "page": 1, "id": "t", "type": "math"}
FIXTURE = Path(__file__).parents[1] / "fixtures" / "bench" / "katex" / "katex_math_verdicts.json"


def contains(candidate: str, reference: str) -> bool:
    return latex.equation_contains(latex.layout(candidate), latex.layout(reference))


@pytest.mark.parametrize(
    "reference, candidate, expected",
    [
        # Each verdict below is KaTeX's (olmOCR-bench's renderer), checked when the fixture was made.
        (r"a \to b", r"a \rightarrow b", True),  # one glyph, →
        (r"a^{2}+b^{2}=c^{2}", r"a^2 + b^2 = c^2", True),  # spacing and braces
        (r"\left( x_{i} \right)", r"(x_i)", True),
        (r"\mathcal{I}_{i}", r"I_i", True),  # fonts are not glyph identity
        (r"\operatorname{Ann}_{R}", r"\text{Ann}_R", True),
        (r"\mu_{h}=\mu_{h^{\prime}}", r"\mu_h = \mu_{h'}", True),
        (r"\mu_{h}=\mu_{h^{\prime}}", r"\mu_{h}=\mu_{h^{'}}", False),  # a prime of a prime's level
        (r"a^{2}+b^{2}=c^{2}", r"a^{2}+b^{2}=c^{2}, \quad n \geq 1", True),  # embedded in a larger equation
        (r"E=m c^{2}", r"\mathcal{L} = \int (E = m c^{2}) dx", True),
        (r"\frac{a}{b}", r"a/b", False),
        # Scripts sit more than 5 px off their base's row, so they are nobody's left/right neighbour:
        # olmOCR-bench cannot tell a superscript from a subscript here.
        (r"x^{2}", r"x_{2}", True),
        (r"x^{2}+1", r"x_{2}+1", True),
        (r"a+b", r"(a+b)^{2}", True),
        (r"a \cdot b", r"a \times b", False),
        (r"e^{i \pi}+1=0", r"e^{i\pi}+1=1", False),
        (r"\int_{a}^{b} f(x) d x", r"\int_a^b f(x)\,dx", True),
        (r"x \leq y", r"x \le y", True),
        (r"x", r"x \label{eq:1}", False),  # KaTeX cannot render \label: the candidate matches nothing
    ],
)
def test_hand_cases(reference, candidate, expected):
    assert contains(candidate, reference) is expected


def test_reference_errors_are_load_errors():
    for bad in (r"\frac{a}{b", r"x \label{eq}", r"x^", r"\begin{eqnarray} a \end{eqnarray}", r"\dot\vec{r}", r"x_\sum{j}"):
        assert latex.syntax_problem(bad) is not None
        with pytest.raises(ValueError):
            load_single_test({**BASE, "math": bad})
    assert latex.syntax_problem(r"\begin{aligned} a &= b \\ c &= d \end{aligned}") is None


def test_extraction_order_and_delimiters():
    text = r"inline $a$ and \(b\) display $$c$$ and \[d\] and $$ $$ and \(\)e\)"
    # \( \) first, then \[ \], then $$ $$, then $ $; each pattern's matches removed before the next.
    assert extract_equations(text, ignore_dollar_delimited=False) == ("b", "\\)e", "d", "c", "", "a")
    assert extract_equations(text, ignore_dollar_delimited=True) == ("b", "\\)e", "d")
    # `.+?` needs a character between the delimiters ("\(\)e\)" above gives "\)e"); matches span lines.
    assert extract_equations("$x\ny$ $$", False) == ("x\ny",)


def test_math_test_run():
    test = load_single_test({**BASE, "math": r"\frac{\partial B}{\partial t}"})
    assert test.run(r"Faraday: \[ \nabla \times E = -\frac{\partial B}{\partial t} \]") == (True, "")
    assert test.run(r"exact $\frac{\partial B}{\partial t}$") == (True, "")
    passed, why = test.run("no equations here")
    assert not passed and why == "no equations found in the text"
    passed, why = test.run(r"\( x + y \)")
    assert not passed and "no equation matching" in why
    ignored = load_single_test({**BASE, "math": "x^{2}", "ignore_dollar_delimited": True})
    assert not ignored.run("$x^2$")[0]
    assert ignored.run(r"\(x^2\)")[0]


def test_agreement_with_katex_on_the_fixture_corpus():
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    known = {(d["reference"], d["candidate"]) for d in fixture["known_differences"]}
    mismatches = set()
    for reference, candidate, katex_verdict in fixture["pairs"]:
        ours = candidate.strip() == reference or contains(candidate.strip(), reference)
        if ours != katex_verdict:
            mismatches.add((reference, candidate))
    assert mismatches <= known, sorted(mismatches - known)[:5]
    assert len(fixture["pairs"]) > 1500 and len(known) < 0.01 * len(fixture["pairs"])
    for reference in fixture["invalid_references"]:
        assert latex.syntax_problem(reference) is not None, reference


def test_pathological_equations_are_bounded():
    assert latex.layout("{" * 5000 + "x" + "}" * 5000).error is not None  # too deep, not a crash
    assert latex.layout("x" * (latex.MAX_EQUATION_CHARS + 1)).error is not None
    long = " + ".join(f"a_{{{i}}}" for i in range(800))
    layout = latex.layout(long)
    assert layout.error is None and len(layout.glyphs) > 2000
    # Many identical glyphs: the assignment search is capped, never runaway.
    reference = latex.layout(" ".join(["a"] * 60))
    candidate = latex.layout(" ".join(["a"] * 600))
    assert latex.equation_contains(candidate, reference) in (True, False)


def test_limit_controls_follow_an_operator_as_in_katex():
    """``\\limits``/``\\nolimits`` after an operator place (or do not place) its scripts; after anything else
    the equation is invalid, as KaTeX says ("Limit controls must follow a math operator"), never a crash."""
    for valid in (r"\sum\nolimits x", r"\sum\limits_a^b x", r"\lim\limits_{n}", r"\mathop{x}\limits_a"):
        assert latex.layout(valid).error is None, valid
    assert len(latex.layout(r"\sum\nolimits x").glyphs) == len(latex.layout(r"\sum x").glyphs)
    for invalid in (r"x\limits", r"x\nolimits", r"{x}\limits", r"x^2\limits_a"):
        assert latex.layout(invalid).error == "limit controls must follow a math operator", invalid


def test_a_fraction_in_a_cramped_style_lays_out():
    """A fraction under a root in display math is in the cramped display style D' (it raised KeyError once)."""
    from olmocr_rl.bench import load_single_test

    test = load_single_test({"pdf": "a.pdf", "page": 1, "id": "t", "type": "math", "math": r"T = 2 \pi \sqrt{\frac{m}{k}}"})
    assert test.run(r"\[T = 2 \pi \sqrt{\frac{m}{k}}\]")[0]
    assert not test.run(r"\[T = 2 \pi \sqrt{\frac{k}{m}}\]")[0]
