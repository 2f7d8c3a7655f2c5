"""``math`` test (olmOCR-bench ``MathTest``), without a browser.

Run:

1. Candidate equations are taken from the raw completion in olmOCR-bench's order
   (:func:`olmocr_rl.bench.equations.extract_equations`).
2. A candidate equal to the reference string passes at once.
3. Otherwise candidates are tried most-similar first (``fuzz.ratio``); the test passes on the first
   one whose rendering contains the reference's rendering
   (:func:`olmocr_rl.bench.latex.equation_contains`).

olmOCR-bench renders both with KaTeX in headless Chromium (docs/bench.md has the cost) and passes when the
reference's MathML is a substring of the candidate's or when every reference glyph can be mapped to
a distinct candidate glyph with the same character and the same neighbouring characters (up, down,
left, right). Here LaTeX is laid out by :mod:`olmocr_rl.bench.latex`, a small TeX-like layout of
glyphs, and the same neighbour matching is applied: see that package for the approach and its known
differences from KaTeX.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rapidfuzz import fuzz

from ..base import BenchTest
from ..errors import FieldError
from ..latex import Layout, equation_contains, layout, syntax_problem
from ..prepared import PreparedText

__all__ = ["MathTest", "MAX_CANDIDATES"]

# Rendering comparisons per test are capped: a completion with thousands of `$` pairs is compared on
# its MAX_CANDIDATES most similar equations (the ones olmOCR-bench would try first).
MAX_CANDIDATES = 256


@dataclass(frozen=True, kw_only=True)
class MathTest(BenchTest):
    """``math``: an equation of the completion renders like (or contains) the reference."""

    math: str
    ignore_dollar_delimited: bool = False

    reference_layout: Layout = field(init=False, repr=False, compare=False)

    TYPES: ClassVar[tuple[str, ...]] = ("math",)
    FIELD_KINDS: ClassVar[dict[str, str]] = {"math": "str", "ignore_dollar_delimited": "bool"}

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.math.strip():
            raise FieldError("math", "must not be empty; give the reference equation in LaTeX")
        problem = syntax_problem(self.math)
        if problem is not None:
            raise FieldError("math", f"the reference does not parse as LaTeX ({problem}); fix the equation")
        self._set(reference_layout=layout(self.math))

    def run_prepared(self, prepared: PreparedText) -> tuple[bool, str]:
        equations = prepared.equations(ignore_dollar_delimited=self.ignore_dollar_delimited)
        if not equations:
            return False, "no equations found in the text"
        if self.math in equations:
            return True, ""
        ranked = sorted(equations, key=lambda candidate: -fuzz.ratio(candidate, self.math))
        for candidate in ranked[:MAX_CANDIDATES]:
            candidate_layout = prepared.derived(("latex_layout", candidate), lambda _p, c=candidate: layout(c))
            if equation_contains(candidate_layout, self.reference_layout):
                return True, ""
        return False, f"no equation matching '{self.math[:60]}' among {len(equations)} in the text"
