"""Pages the recipe's tests share (tests/unit/test_recipe_pages.py, tests/integration/test_recipe_browser.py)."""

from __future__ import annotations

import pytest

from olmocr_rl.recipe.compose import PageSpec
from olmocr_rl.recipe.flow import font_problem
from olmocr_rl.recipe.layout import Columns, Tok

#: the generator reads DejaVu Sans Mono's glyph boxes (the pages' font); where it is missing, skip with the fix
needs_font = pytest.mark.skipif(font_problem() is not None, reason=font_problem() or "")


def sparse_columns() -> PageSpec:
    """Two columns of short lines and nothing else: PDFium reads such a page as vertical text (the browser test
    shows it), so the generator must never write one."""
    def paragraph(*lines: str) -> list[list[Tok]]:
        return [[Tok(word) for word in line.split()] for line in lines]

    return PageSpec("columns", blocks=[Columns([paragraph("Yotre", "ratko", "melo.")],
                                               [paragraph("Min dubo", "hillel", "glea. Tiru", "jirski", "nissi",
                                                          "kunthen.")])], gap=1)


def _tokens(text: str, style: str = "") -> list[Tok]:
    return [Tok(word, style) for word in text.split()]


def every_construct() -> list[PageSpec]:
    """Two pages that between them hold every construct the generator writes, with and without blank lines
    between blocks: a running head and a footer, a heading, bold and italic, footnote markers in a list item and
    in two columns, two footnotes one under the other, an ordered list with a nested list, a table with row and
    column spans, a display fraction and an inline equation."""
    from olmocr_rl.recipe.layout import (Cell, DisplayMath, Footnotes, Heading, ListBlock, Paragraph,
                                         TableBlock)

    first = PageSpec("sink", header=["Rumo Kesta", "Tavi"], footer=["Dona", "Page 7"], gap=1, blocks=[
        Heading("Mavo tolu brek"),
        Columns([[_tokens("Sabre kol"), _tokens("mivta ruls"), [Tok("denka", marker="1")] + _tokens("po.")]],
                [[_tokens("Nabo kirta"), _tokens("selvan.")],
                 [_tokens("Rusk bevo"), [Tok("tikla", marker="2")] + _tokens("mu.")]], 1),
        Footnotes([("1", _tokens("Harvo sem dolki.")), ("2", _tokens("Pemo rutsal ka."))]),
    ])
    second = PageSpec("sink", gap=0, blocks=[
        Paragraph(_tokens("Savo") + _tokens("mir kelu", "i") + [Tok(tex="x^2 + y", cells=5)]
                  + _tokens("tolpek vin rasta.")),
        ListBlock(True, [_tokens("Sovi") + [Tok("marun", marker="1")] + _tokens("plek."),
                         _tokens("Ravo") + _tokens("tisun bek", "b") + _tokens("do.")],
                  (0, [_tokens("Lum vek."), _tokens("Tova rin.")])),
        TableBlock([[Cell("Rek", True), Cell("Tovan", True, colspan=2)],
                    [Cell("mus", rowspan=2), Cell("4128"), Cell("917")],
                    [Cell("pelvo", colspan=2)],
                    [Cell("dabi", True), Cell("6305"), Cell("2281")]], [6, 6, 5], 1, "ruled"),
        DisplayMath("\\frac{a}{2} = b", 2),
        Footnotes([("1", _tokens("Lebro tesk vimar."))]),
    ])
    return [first, second]
