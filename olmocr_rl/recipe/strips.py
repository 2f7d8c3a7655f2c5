"""Where each printed character of a grid page sits, as the model sees the page: lines cut out with their text, and
a transcription's characters mapped to the image tokens that show them.

The recipe's pages are printed on a character grid aligned with the vision tower's patches (one character a patch
column, one line a row of image tokens; :mod:`olmocr_rl.recipe.grid`), so the PDF's text layer tells, for every
glyph, its cell: its row of image tokens and its column of patches. The warm start (:mod:`olmocr_rl.recipe.sft`)
uses that in three ways:

- :func:`line_strips` and :func:`line_blocks`: each printed run of a row (and stacks of 2-4 rows), cut out of the
  page image with the text the text layer holds: cheap examples where the model learns to read at all;
- :func:`align_cells`: a teacher's transcription aligned with the printed characters, so each transcribed
  character knows the cell it was read from;
- :func:`token_index`: a cell's image token (and its half: two characters share a token) in an image cut at
  ``box``, which is what the warm start's two training aids point at.

    glyphs = page_glyphs("bench/pdfs/synth_report/train_0000.pdf", 1, (336, 448))
    strips = line_strips(glyphs, (336, 448))
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass

__all__ = ["Glyph", "Strip", "page_glyphs", "line_strips", "line_blocks", "printed_text", "align_cells",
           "token_index", "processed_image"]

#: Gap, in empty cells, at which a row is cut into separate strips; one empty cell is a space.
SPLIT_GAP = 2
#: A glyph's left edge lies this far (in cells) right of its cell's edge at most (tight boxes: ``r`` 0.29, ``.`` 0.39)
#: and this far left at least (negative side bearings); outside that it is off the grid (KaTeX's glyphs).
_ON_GRID = (-0.12, 0.55)

Cell = tuple[int, int]  # (row of image tokens, column of patches) of the whole page


@dataclass(frozen=True)
class Glyph:
    """One printed character: its cell and whether it sits on the grid (KaTeX's glyphs do not)."""

    row: int
    col: int
    char: str
    on_grid: bool


@dataclass(frozen=True)
class Strip:
    """Printed text cut out of the page: ``box`` (left, top, right, bottom) in pixels of the processed page image,
    ``text``, and per character of ``text`` its cell (None for a newline)."""

    box: tuple[int, int, int, int]
    text: str
    row: int
    cells: tuple[Cell | None, ...]


def processed_image(pdf_path: str | os.PathLike, page: int, image_dim: int, min_pixels: int, max_pixels: int,
                    factor: int = 28):
    """The page as the model sees it: rendered with its longest side ``image_dim`` (as training renders it), then
    resized to the multiples of ``factor`` the Qwen2-VL image processor would pick (so the processor leaves it be)."""
    from olmocr_rl.data.render import render_page

    from .grid import smart_resize

    image = render_page(pdf_path, page, image_dim)
    height, width = smart_resize(image.height, image.width, factor, min_pixels, max_pixels)
    return image if (width, height) == image.size else image.resize((width, height))


def page_glyphs(pdf_path: str | os.PathLike, page: int, image_size: tuple[int, int], *, cell_px: int = 14,
                row_px: int = 28) -> list[Glyph]:
    """Every printed character of ``page`` (1-based) with its cell in the processed image of ``image_size``
    (width, height): ``cell_px`` is a patch, ``row_px`` an image token. Sorted by row, then column."""
    import pypdfium2 as pdfium

    width, height = image_size
    document = pdfium.PdfDocument(str(pdf_path))
    try:
        pdf_page = document[page - 1]
        page_w, page_h = pdf_page.get_size()
        scale_x, scale_y = width / page_w, height / page_h
        textpage = pdf_page.get_textpage()
        glyphs = []
        for index in range(textpage.count_chars()):
            char = textpage.get_text_range(index, 1)
            if not char.strip():
                continue
            left, bottom, _right, top = textpage.get_charbox(index)
            x = left * scale_x / cell_px
            column = math.floor(x - _ON_GRID[0])
            row = int(((page_h - top) + (page_h - bottom)) / 2 * scale_y // row_px)
            if 0 <= row < height // row_px:
                glyphs.append(Glyph(row, column, char, _ON_GRID[0] <= x - column <= _ON_GRID[1]))
    finally:
        document.close()
    return sorted(glyphs, key=lambda g: (g.row, g.col))


def _text_of(run: list[Glyph]) -> tuple[str, list[Cell | None]]:
    """A run's text, one space for each gap, with each character's cell (a space: the empty cell after the word)."""
    text, cells = run[0].char, [(run[0].row, run[0].col)]
    for prev, glyph in zip(run, run[1:]):
        if glyph.col - prev.col > 1:
            text += " "
            cells.append((prev.row, prev.col + 1))
        text += glyph.char
        cells.append((glyph.row, glyph.col))
    return text, cells


def _runs(glyphs: list[Glyph]) -> list[list[Glyph]]:
    """The glyphs of each row, cut where ``SPLIT_GAP`` or more cells are empty."""
    runs: list[list[Glyph]] = []
    for glyph in glyphs:
        if runs and runs[-1][-1].row == glyph.row and glyph.col - runs[-1][-1].col - 1 < SPLIT_GAP:
            runs[-1].append(glyph)
        else:
            runs.append([glyph])
    return runs


def line_strips(glyphs: list[Glyph], image_size: tuple[int, int], *, cell_px: int = 14, row_px: int = 28,
                min_width_px: int = 112) -> list[Strip]:
    """The printed runs of a page, row by row, left to right; a run holding an off-grid glyph (KaTeX) or two glyphs
    in one cell is left out. Boxes are whole image tokens, widened to ``min_width_px`` (the processor's smallest
    image) with the page's own margin where a run is short."""
    width = image_size[0]
    strips = []
    for run in _runs(glyphs):
        columns = [g.col for g in run]
        if not all(g.on_grid for g in run) or len(set(columns)) != len(columns):
            continue
        tokens = row_px // cell_px
        left, right = (columns[0] // tokens) * row_px, -(-(columns[-1] + 1) // tokens) * row_px
        while right - left < min_width_px and (right + row_px <= width or left >= row_px):
            if right + row_px <= width:
                right += row_px
            else:
                left -= row_px
        if right - left < min_width_px:
            continue
        text, cells = _text_of(run)
        strips.append(Strip((left, run[0].row * row_px, min(right, width), (run[0].row + 1) * row_px), text,
                            run[0].row, tuple(cells)))
    return strips


def line_blocks(strips: list[Strip], max_rows: int = 4) -> list[Strip]:
    """Stacks of consecutive printed lines, one run a row, spanning 2 to ``max_rows`` rows (a blank row between
    two lines is kept as an empty line): each as one strip whose text is its lines joined by newlines.

    Rows holding several runs (two columns, table cells) end a stack, so no block reads across columns.
    """
    by_row: dict[int, list[Strip]] = {}
    for strip in strips:
        by_row.setdefault(strip.row, []).append(strip)
    single = {row: found[0] for row, found in by_row.items() if len(found) == 1}
    blocks = []
    for row, first in sorted(single.items()):
        lines, text, cells = [first], first.text, list(first.cells)
        while True:
            nxt = next((r for r in (lines[-1].row + 1, lines[-1].row + 2) if r in by_row), None)
            if nxt is None or nxt not in single or nxt - row + 1 > max_rows:
                break
            breaks = nxt - lines[-1].row
            text += "\n" * breaks + single[nxt].text
            cells += [None] * breaks + list(single[nxt].cells)
            lines.append(single[nxt])
            blocks.append(Strip((min(s.box[0] for s in lines), first.box[1], max(s.box[2] for s in lines),
                                 lines[-1].box[3]), text, row, tuple(cells)))
    return blocks


def printed_text(glyphs: list[Glyph]) -> tuple[str, list[Cell | None]]:
    """The page's on-grid glyphs as text: rows joined by newlines, runs of a row by a space, with each character's
    cell (None for a newline)."""
    text, cells = "", []
    for run in _runs([g for g in glyphs if g.on_grid]):
        run_text, run_cells = _text_of(run)
        if text:
            separator = " " if run[0].row == cells[-1][0] else "\n"
            text += separator
            cells.append(None if separator == "\n" else (cells[-1][0], cells[-1][1] + 1))
        text += run_text
        cells += run_cells
    return text, cells


def align_cells(transcript: str, printed: str, printed_cells: list[Cell | None], min_match: int = 2) -> list[Cell | None]:
    """For each character of ``transcript``, the cell it was read from: the printed character it aligns with
    (difflib's matching blocks of at least ``min_match`` characters), else None (markup, front matter, a
    reordered or missing passage)."""
    cells: list[Cell | None] = [None] * len(transcript)
    matcher = difflib.SequenceMatcher(None, transcript, printed, autojunk=False)
    for block in matcher.get_matching_blocks():
        if block.size >= min_match:
            for k in range(block.size):
                cells[block.a + k] = printed_cells[block.b + k]
    return cells


def token_index(cell: Cell, box: tuple[int, int, int, int], *, cell_px: int = 14, row_px: int = 28) -> tuple[int, int] | None:
    """(image token in raster order, half) of ``cell`` in the image cut at ``box``; None when it lies outside."""
    left, top, right, bottom = box
    x, y = cell[1] * cell_px - left, cell[0] * row_px - top
    if not (0 <= x < right - left and 0 <= y < bottom - top):
        return None
    per_token = row_px // cell_px
    return (y // row_px) * ((right - left) // row_px) + x // row_px, (x // cell_px) % per_token
