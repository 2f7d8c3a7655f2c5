"""Will PDFium read the page as horizontal lines? Predicted from the lines a page lays out, before it is printed.

PDFium (pypdfium2: synth's text layer, and the dataset's renderer) decides once per page whether its text runs in
horizontal or vertical lines, from the boxes of its text objects (in Chromium's PDFs, one per glyph): horizontal
when those boxes cover more than 80 % of the width the text spans, or a larger share of that width than of the
height it spans; vertical otherwise. A page of a few short lines in two narrow columns, or of a table with
narrow cells, can fall on the wrong side: its text layer then reads one character a line, and synth skips the
page (``not_shown``). The generator draws such a page again: :func:`reads_horizontal` estimates both shares
from the printed lines and DejaVu Sans Mono's glyph boxes, leaving out what only adds width (footnote markers,
inline math) and counting every display equation's lines as covered, and wants a margin on the right side.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .grid import PrintGrid

__all__ = ["shares", "reads_horizontal", "glyph_box", "FontMissingError", "font_problem", "MARGIN"]

FONT_FILES = (Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"),
              Path("/usr/share/fonts/dejavu/DejaVuSansMono.ttf"))
UNITS = 2048  # DejaVu Sans Mono's units per em
ASCENT, DESCENT = 1901 / UNITS, 483 / UNITS  # its line box (hhea), in em
MARGIN = 0.05  # how far from PDFium's boundary a page must be
HORIZONTAL_SHARE = 0.8  # PDFium's threshold


class FontMissingError(RuntimeError):
    """DejaVu Sans Mono is not installed (it is the pages' font)."""


@functools.lru_cache(maxsize=1)
def _font():
    from PIL import ImageFont

    for path in FONT_FILES:
        if path.is_file():
            return ImageFont.truetype(str(path), UNITS)
    import subprocess

    try:
        found = subprocess.run(["fc-match", "-f", "%{file}", "DejaVu Sans Mono"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    if found.endswith("DejaVuSansMono.ttf") and Path(found).is_file():
        return ImageFont.truetype(found, UNITS)
    raise FontMissingError("DejaVu Sans Mono is not installed (the pages' font): bash scripts/setup_browser.sh "
                           "installs it (fonts-dejavu-core)")


def font_problem() -> str | None:
    """None when DejaVu Sans Mono is installed, else the one line saying how to install it."""
    try:
        _font()
    except FontMissingError as error:
        return str(error)
    return None


@functools.lru_cache(maxsize=512)
def glyph_box(char: str) -> tuple[float, float, float, float]:
    """The glyph's ink box in em: (left, bottom, right, top) from its pen position on the baseline (y up)."""
    mask, (dx, dy) = _font().getmask2(char, anchor="ls")
    box = mask.getbbox()
    if box is None:
        return (0.0, 0.0, 0.0, 0.0)
    left, top, right, bottom = box
    return ((dx + left) / UNITS, -(dy + bottom) / UNITS, (dx + right) / UNITS, -(dy + top) / UNITS)


def shares(lines: list[dict], grid: PrintGrid, covered_rows: list[int] = ()) -> tuple[float, float]:
    """(share of the text's width, share of its height) covered by glyph boxes, on a 1 pt raster as PDFium's is;
    ``lines`` as the sidecar's (``row``, ``cell``, ``text``), ``covered_rows`` lines held by display math."""
    font, cell, row = grid.font_pt, grid.cell_pt, grid.row_pt
    baseline = (row - (ASCENT + DESCENT) * font) / 2 + ASCENT * font  # below the line's top
    xs, ys = set(), set()
    for line in lines:
        base = line["row"] * row + baseline
        for i, char in enumerate(line["text"]):
            if char.isspace():
                continue
            left, bottom, right, top = glyph_box(char)
            x = (line["cell"] + i) * cell
            if right > left:
                xs.update(range(int(x + left * font), int(x + right * font)))
                ys.update(range(int(base - top * font), int(base - bottom * font)))
    for r in covered_rows:
        ys.update(range(int(r * row + 0.05 * row), int((r + 1) * row - 0.05 * row)))
    if not xs or not ys:
        return 1.0, 0.0
    return len(xs) / (max(xs) + 1 - min(xs)), len(ys) / (max(ys) + 1 - min(ys))


def reads_horizontal(lines: list[dict], grid: PrintGrid, covered_rows: list[int] = (),
                     margin: float = MARGIN) -> bool:
    """Is the page clearly on PDFium's horizontal side (by ``margin``)?"""
    width, height = shares(lines, grid, covered_rows)
    return width > HORIZONTAL_SHARE + margin or width > height + margin
