"""The print grid: monospace text whose every character fills one vision patch of the model's final image.

A small vision-language model learns to read within minutes on a CPU only when each glyph sits on the vision
tower's patch grid (docs/recipe.md has the measurement). This module works out, from the page size the dataset
renders (``target_longest_image_dim`` = D), the type size and margins that put the text on that grid:

- synth prints each page on one US Letter PDF (612 x 792 pt, zero PDF margins); the dataset renders it with
  pypdfium2 so that its longest side is D px (``olmocr_rl.data.render.target_size``: 347 x 448 at D = 448);
- the Qwen2-VL image processor then resizes it so that each side is a multiple of 28 px (:func:`smart_resize`:
  336 x 448), squashing x a little; patches are 14 x 14 px, an image token 2 x 2 patches (28 x 28 px);
- both steps map the whole page onto the whole image, so a point of the page lands at ``x * W / 612``,
  ``y * H / 792`` px of the final W x H image. A character cell of ``612 / (W / 14)`` pt is 14 px wide there and
  a line of ``792 / (H / 28)`` pt 28 px tall: at D = 448, 25.5 pt (DejaVu Sans Mono at 42.36 pt, its advance
  being 1233/2048 em) by 49.5 pt; the page is 24 cells by 16 lines.

:class:`PrintGrid` holds these numbers for a D (default 448) and writes the page's style sheet (:meth:`css`):
two cells of left margin and one of right margin, one line of top and of bottom margin, so 21 characters a line
and 14 lines a page at D = 448; every line starts on a multiple of 28 px (one image token holds two characters
of one line). :func:`measure_alignment` checks a printed PDF as the model will see it.
"""

from __future__ import annotations

import ctypes
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from olmocr_rl.data.render import target_size

__all__ = ["PrintGrid", "smart_resize", "measure_alignment", "Alignment", "MONO_FONT", "MONO_ADVANCE_EM",
           "PAGE_PT", "DEFAULT_DIM"]

PAGE_PT = (612.0, 792.0)  # US Letter, the paper synth prints on
CSS_PX_PER_PT = 96 / 72
MONO_FONT = "DejaVu Sans Mono"  # installed with the browser (fonts-dejavu-core); every glyph one advance wide
MONO_ADVANCE_EM = 1233 / 2048  # its advance width (hmtx), in em: regular, bold and oblique alike
DEFAULT_DIM = 448
QWEN_MIN_PIXELS = 56 * 56  # the Qwen2-VL image processor's defaults
QWEN_MAX_PIXELS = 28 * 28 * 1280
MIN_TEXT_COLS, MIN_TEXT_ROWS = 17, 10  # the page kinds need two columns of 8 cells and a dozen lines


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = QWEN_MIN_PIXELS,
                 max_pixels: int = QWEN_MAX_PIXELS) -> tuple[int, int]:
    """(height, width) the Qwen2-VL image processor resizes an image to: each side the nearest multiple of
    ``factor``, scaled down (floored) to fit ``max_pixels`` or up (ceiled) to ``min_pixels``."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _px(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".") + "px"


@dataclass(frozen=True)
class PrintGrid:
    """The character grid of a page rendered at ``dim`` px (longest side) and resized by the image processor.

    ``patch`` is the vision patch (14 px), ``merge`` the patches per image token along a side (2); the pixel
    budget is the processor's (``min_pixels``/``max_pixels``). The margins are in cells (left, right) and lines
    (top, bottom). Sizes in ``*_pt`` are PDF points, in ``*_px`` CSS pixels (96 a inch), in ``final_*`` pixels of
    the model's image.
    """

    dim: int = DEFAULT_DIM
    patch: int = 14
    merge: int = 2
    min_pixels: int = QWEN_MIN_PIXELS
    max_pixels: int = QWEN_MAX_PIXELS
    margin_cells: tuple[int, int] = (2, 1)
    margin_rows: tuple[int, int] = (1, 1)

    def __post_init__(self) -> None:
        if self.dim < 1 or self.patch < 1 or self.merge < 1:
            raise ValueError(f"dim, patch and merge must be positive, got {self.dim}, {self.patch}, {self.merge}")
        if self.text_cols < MIN_TEXT_COLS or self.text_rows < MIN_TEXT_ROWS:
            token = self.patch * self.merge
            squeezed = self.final_size[1] < round(self.render_size[1] / token) * token  # max_pixels shrank it
            fix = (f"raise --max_pixels (the processor's; {self.max_pixels} shrinks the page to that)" if squeezed
                   else "give --dim 448 or more")
            raise ValueError(f"at --dim {self.dim} the page holds {self.text_cols} x {self.text_rows} characters "
                             f"(final image {self.final_size[0]} x {self.final_size[1]} px); the page kinds need at "
                             f"least {MIN_TEXT_COLS} x {MIN_TEXT_ROWS}: {fix}")

    @property
    def render_size(self) -> tuple[int, int]:
        """(width, height) px of the dataset's render (olmocr_rl.data.render)."""
        return target_size(*PAGE_PT, self.dim)

    @property
    def final_size(self) -> tuple[int, int]:
        """(width, height) px of the image the model sees, after the processor's resize."""
        width, height = self.render_size
        h, w = smart_resize(height, width, self.patch * self.merge, self.min_pixels, self.max_pixels)
        return w, h

    @property
    def row_px_final(self) -> int:
        return self.patch * self.merge

    @property
    def cols(self) -> int:
        return self.final_size[0] // self.patch

    @property
    def rows(self) -> int:
        return self.final_size[1] // self.row_px_final

    @property
    def text_cols(self) -> int:
        return self.cols - sum(self.margin_cells)

    @property
    def text_rows(self) -> int:
        return self.rows - sum(self.margin_rows)

    @property
    def cell_pt(self) -> float:
        return PAGE_PT[0] / self.cols

    @property
    def row_pt(self) -> float:
        return PAGE_PT[1] / self.rows

    @property
    def font_pt(self) -> float:
        return self.cell_pt / MONO_ADVANCE_EM

    @property
    def cell_px(self) -> float:
        return self.cell_pt * CSS_PX_PER_PT

    @property
    def row_px(self) -> float:
        return self.row_pt * CSS_PX_PER_PT

    def cells(self, n: float) -> str:
        """A CSS length of ``n`` character cells."""
        return _px(n * self.cell_px)

    def lines(self, n: float) -> str:
        """A CSS length of ``n`` lines."""
        return _px(n * self.row_px)

    def describe(self) -> dict:
        """The grid's numbers, as the generator's manifest and sidecars record them."""
        return {"dim": self.dim, "render_px": list(self.render_size), "final_px": list(self.final_size),
                "patch_px": self.patch, "cols": self.cols, "rows": self.rows, "text_cols": self.text_cols,
                "text_rows": self.text_rows, "cell_pt": round(self.cell_pt, 4), "row_pt": round(self.row_pt, 4),
                "font_pt": round(self.font_pt, 4), "margin_cells": list(self.margin_cells),
                "margin_rows": list(self.margin_rows)}

    def css(self, gap_rows: int = 0) -> str:
        """The page's style sheet: every element that prints text keeps it on the grid (docs/recipe.md)."""
        cell, row = self.cell_px, self.row_px
        gap = self.lines(gap_rows)
        sup_px = 0.6 * self.font_pt * CSS_PX_PER_PT
        return "".join([
            f"html{{font-family:'{MONO_FONT}',monospace;font-size:{_px(self.font_pt * CSS_PX_PER_PT)};"
            f"line-height:{_px(row)};font-kerning:none;font-variant-ligatures:none;hyphens:manual;"
            "letter-spacing:0;word-spacing:0;text-transform:none;color:#000;background:#fff}",
            f"body{{margin:{_px(self.margin_rows[0] * row)} 0 0 {_px(self.margin_cells[0] * cell)};padding:0;"
            f"width:{self.cells(self.text_cols)}}}",
            "h1,h2,h3,p,ul,ol,li,table,div,header,footer{margin:0;padding:0}",
            "h1,h2,h3{font-size:1em;font-weight:bold;white-space:nowrap}",
            f"h1,h2,h3,p,ul,ol,table,.dm,.cols{{margin-bottom:{gap}}}",
            ".sheet{display:flow-root;overflow:visible}",
            f"header,footer{{display:flex;height:{_px(row)};white-space:nowrap}}",
            "header>span+span,footer>span+span{margin-left:auto}",
            ".nw{white-space:nowrap}",
            "ul,ol{list-style:none}",
            f"ul>li{{padding-left:{self.cells(2)};text-indent:-{self.cells(2)}}}",
            "ul>li::before{content:'- '}",
            f"ol{{counter-reset:item}}ol>li{{counter-increment:item;padding-left:{self.cells(3)};"
            f"text-indent:-{self.cells(3)}}}ol>li::before{{content:counter(item) '. '}}",
            f"li>ul{{margin:0 0 0 {self.cells(2)}}}",
            # a footnote marker: smaller and raised, in exactly one cell, without growing the line
            f"sup{{display:inline-block;width:{self.cells(1)};font-size:0.6em;line-height:{_px(sup_px)};"
            f"vertical-align:{_px(0.42 * self.font_pt * CSS_PX_PER_PT)};text-indent:0}}",
            "table{border-collapse:collapse;border-spacing:0;table-layout:fixed}",
            f"td,th{{padding:0 0 0 {self.cells(1)};text-align:left;vertical-align:top;white-space:nowrap;"
            f"font-weight:normal;height:{_px(row)}}}",
            "th{font-weight:bold}",
            f"table.lined{{box-shadow:0 -{_px(1)} 0 #000, 0 {_px(1)} 0 #000}}",
            f"table.lined tr.head>*{{box-shadow:inset 0 -{_px(1.5)} 0 #000}}",
            f"table.ruled td,table.ruled th{{box-shadow:inset 0 {_px(1)} 0 #777}}",
            f"table.ruled{{box-shadow:0 {_px(1)} 0 #777}}",
            f".cols{{display:grid;grid-template-columns:{self.cells(self.column_cells)} "
            f"{self.cells(self.column_cells)};column-gap:{self.cells(self.column_gap)};white-space:nowrap}}",
            f".cols p{{margin-bottom:0}}.cols p+p{{margin-top:{gap}}}.footnotes p{{margin-bottom:0}}",
            # KaTeX at the text's size, display math left-aligned on its own lines, inline math in whole cells
            ".katex{font-size:1em;line-height:normal}",
            ".katex-display{margin:0;text-align:left}.katex-display>.katex{text-align:left}",
            f".dm{{display:flow-root;overflow:visible;padding-left:{self.cells(2)}}}",
            f".im{{display:inline-block;vertical-align:top;height:{_px(row)};overflow:visible;white-space:nowrap;"
            "text-indent:0}",
        ])

    @property
    def column_cells(self) -> int:
        """The width of each of two columns, in cells (10 at D = 448: 10 + 1 + 10)."""
        return (self.text_cols - 1) // 2

    @property
    def column_gap(self) -> int:
        return self.text_cols - 2 * self.column_cells


@dataclass
class Alignment:
    """Where a printed page's characters fall on the model's image (:func:`measure_alignment`).

    ``chars``: the glyphs of the grid font (DejaVu Sans Mono) at the text size; ``on_grid``: those whose left
    edge (the pen position, pypdfium2's char origin) is within ``tolerance`` px of a multiple of the patch width;
    ``baseline_offsets``: each glyph's baseline within its 28 px line (how often each rounded offset occurs);
    ``rows``: the grid-font text of each line of the image, by line index, each glyph at its cell (a
space for a cell without one, from the image's left edge); ``small``: glyphs of the grid font at
    another size (footnote markers); ``other``: glyphs of other fonts (KaTeX's math).
    """

    final_size: tuple[int, int]
    render_size: tuple[int, int]
    chars: int = 0
    on_grid: int = 0
    baseline_offsets: Counter = field(default_factory=Counter)
    worst_dx: float = 0.0
    rows: dict[int, str] = field(default_factory=dict)
    small: int = 0
    small_on_grid: int = 0
    other: int = 0

    @property
    def fraction_on_grid(self) -> float:
        return self.on_grid / self.chars if self.chars else 0.0

    @property
    def baseline_spread(self) -> float:
        """Largest difference between two glyphs' baseline offsets within their lines, px."""
        return max(self.baseline_offsets) - min(self.baseline_offsets) if self.baseline_offsets else 0.0

    def summary(self) -> str:
        offsets = ", ".join(f"{k:g} px x{v}" for k, v in sorted(self.baseline_offsets.items()))
        return (f"{self.on_grid}/{self.chars} glyphs on the {self.final_size[0]}x{self.final_size[1]} grid "
                f"({100 * self.fraction_on_grid:.1f} %, worst {self.worst_dx:.2f} px off); baselines at {offsets} "
                f"within their lines; markers {self.small_on_grid}/{self.small} on grid; {self.other} math glyphs")


def _font_name(text_page, index: int) -> str:
    import pypdfium2.raw as pdfium_c

    buffer = ctypes.create_string_buffer(256)
    flags = ctypes.c_int()
    pdfium_c.FPDFText_GetFontInfo(text_page.raw, index, buffer, 256, flags)
    return buffer.value.decode("utf-8", "replace")


def measure_alignment(pdf: str | Path, grid: PrintGrid, tolerance: float = 1.5,
                      image_out: str | Path | None = None) -> Alignment:
    """Where the glyphs of page 1 of ``pdf`` fall on the model's image at ``grid.dim``.

    The page is rendered exactly as the dataset renders it (``olmocr_rl.data.render.render_page``) and resized
    to the image processor's size (:func:`smart_resize`, bicubic; saved to ``image_out`` when given); each
    character's pen position and baseline (pypdfium2's text layer) is mapped to that image: x times
    ``final_width / page_width``, y likewise from the top.
    """
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c
    from PIL import Image

    from olmocr_rl.data.render import render_page

    image = render_page(pdf, 1, grid.dim)
    final_w, final_h = grid.final_size
    if image_out is not None:
        image.resize((final_w, final_h), Image.BICUBIC).save(image_out)
    result = Alignment((final_w, final_h), image.size)
    document = pdfium.PdfDocument(str(pdf))
    try:
        page = document[0]
        width, height = page.get_size()
        text_page = page.get_textpage()
        sx, sy = final_w / width, final_h / height
        x, y = ctypes.c_double(), ctypes.c_double()
        glyphs = []  # (x, y on the image, font size, char) of the grid font's glyphs
        for index in range(text_page.count_chars()):
            char = chr(pdfium_c.FPDFText_GetUnicode(text_page.raw, index))
            if char.isspace() or not char.isprintable():
                continue
            if MONO_FONT.replace(" ", "") not in _font_name(text_page, index).replace(" ", ""):
                result.other += 1
                continue
            pdfium_c.FPDFText_GetCharOrigin(text_page.raw, index, x, y)
            size = round(pdfium_c.FPDFText_GetFontSize(text_page.raw, index), 2)
            glyphs.append((x.value * sx, (height - y.value) * sy, size, char))
        # the text size is the commonest one (PDFium's sizes are in the text's own units, not points)
        text_size = Counter(g[2] for g in glyphs).most_common(1)[0][0] if glyphs else 0.0
        rows: dict[int, list[tuple[float, str]]] = {}
        for fx, fy, size, char in glyphs:
            dx = abs(fx - grid.patch * round(fx / grid.patch))
            if abs(size - text_size) > 0.05 * text_size:
                result.small += 1
                result.small_on_grid += dx <= tolerance
                continue
            result.chars += 1
            result.on_grid += dx <= tolerance
            result.worst_dx = max(result.worst_dx, dx)
            line = int(fy // grid.row_px_final)
            result.baseline_offsets[round(fy - line * grid.row_px_final, 1)] += 1
            rows.setdefault(line, []).append((fx, char))
        for line, chars in sorted(rows.items()):
            text = ""
            for fx, char in sorted(chars):
                cell = round(fx / grid.patch)
                text = text.ljust(cell) + char if cell >= len(text) else text + char
            result.rows[line] = text
    finally:
        document.close()
    return result
