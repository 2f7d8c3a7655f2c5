"""Pages the recipe's tests share (tests/unit/test_recipe_pages.py, tests/integration/test_recipe_browser.py)."""

from __future__ import annotations

from olmocr_rl.recipe.compose import PageSpec
from olmocr_rl.recipe.layout import Columns, Tok


def sparse_columns() -> PageSpec:
    """Two columns of short lines and nothing else: PDFium reads such a page as vertical text (the browser test
    shows it), so the generator must never write one."""
    def paragraph(*lines: str) -> list[list[Tok]]:
        return [[Tok(word) for word in line.split()] for line in lines]

    return PageSpec("columns", blocks=[Columns([paragraph("Yotre", "ratko", "melo.")],
                                               [paragraph("Min dubo", "hillel", "glea. Tiru", "jirski", "nissi",
                                                          "kunthen.")])], gap=1)
