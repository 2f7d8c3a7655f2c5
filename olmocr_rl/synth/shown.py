"""Is the reference what the page shows? Every line of the reference body, found on the PDF's text layer.

The reference is written from the HTML (:mod:`.reference`); the PDF is what the browser printed. Between the two
lie the page's CSS (hidden, clipped or overflowing boxes), layout (floats painted before the text around them)
and the rules that turn HTML into lines (``<br>``, block boundaries). This module checks the written reference
against the printed text, line by line, **with word boundaries kept**:

- the body's lines are read back from the reference itself: Markdown markers (``#``, list markers, ``*``/``**``)
  and table markup stripped (each table cell is a line), ``<sup>x</sup>`` kept as ``x`` with an optional space
  on each side (the text layer puts a superscript on a line of its own, or not), each equation (``\\(…\\)``,
  ``\\[…\\]``) a gap that its glyphs fill, checked as the math tests check them (KaTeX's glyphs among the page's);
- a line matches where its words stand on the layer in the same order, a space in the line being whitespace
  (a space or a line break) on the layer and no space being none: ``"StreetBristol"`` does not match a page that
  prints ``Street`` and ``Bristol`` on two lines, nor ``"Street Bristol"`` one that prints ``StreetBristol``;
  a line does not start or end inside a word of the layer; letter case is not compared (a style sheet's
  ``text-transform: uppercase`` prints ``ANNUAL REPORT`` for ``Annual report``; the tests, which compare case,
  are each checked with it: :func:`shown_in`);
- the lines are found in order: each block (a paragraph's lines, a list) in its own order, and the blocks in
  the reference's order; a block found only earlier on the layer is *out of order* (the PDF's text comes in
  paint order: a float is painted before the text around it, a positioned box after), which is a notice, and
  order tests are checked on the layer one by one (:func:`order_on_layer`). A table's cells are each found on
  the page in any order (a cell spanning two rows can be painted after the second row's cells), and a cell's
  words may have a few words of the cells beside it between them (:data:`CELL_GAP`: the layer merges a printed
  line's text left to right, across cells).

:func:`shown_in` is the same word-boundary match for one test string (the guarantee's ``text_layer`` check).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["ShownLine", "ShownCheck", "reference_lines", "check_shown", "shown_in", "order_on_layer",
           "plain", "glyphs_on_layer"]

_INVISIBLE = re.compile("[\u00ad\u200b\u200c\u200d\u2060\u2061\u2062\u2063\ufeff]")
_PLAIN = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"',
                        "\u2013": "-", "\u2014": "-", "\u2011": "-", "\u2012": "-", "\u2212": "-"})
_HEADING = re.compile(r"^#{1,6}\s+")
_LIST = re.compile(r"^\s*(?:[-+]|\d{1,9}[.)])\s+")
_INLINE = re.compile(r"\\\((?P<math>.+?)\\\)|<sup>(?P<sup>.*?)</sup>", re.DOTALL)
_DISPLAY = re.compile(r"^\\\[(?P<math>.+)\\\]$", re.DOTALL)
_WORD_CHAR = re.compile(r"[^\W_]")
SOFT, HARD = r"\s*", r"\s+"
# Between two words of a table cell: whitespace, or a few words of the cells beside it. The text layer merges
# what stands on one printed line in left-to-right order, so a cell wrapped on several lines next to a cell
# centred across two rows reads "export 3,585 quarter meadow" for the cells "export quarter meadow" and "3,585".
CELL_GAP = r"\s+(?:\S+\s+){0,8}?"


def plain(text: str) -> str:
    """Text as compared with the layer: NFKC (ligatures, no-break and thin spaces, full-width forms), typographic
    quotes and dashes as plain ones, zero-width characters and soft hyphens removed."""
    return _INVISIBLE.sub("", unicodedata.normalize("NFKC", text).translate(_PLAIN))


@dataclass
class ShownLine:
    """One line of the reference body: ``pieces`` are ("text", s), ("sup", s) or ("math", tex)."""

    source: str
    block: int
    pieces: list[tuple[str, str]] = field(default_factory=list)
    cell: bool = False  # a table cell: found anywhere (a cell spanning rows may be painted after the next row's)


class _Cells(HTMLParser):
    """The text of each cell of the reference's HTML tables, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: list[str] = []
        self.open = False

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th"):
            self.cells.append("")
            self.open = True
        elif tag == "br" and self.open:
            self.cells[-1] += " "

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.open = False

    def handle_data(self, data):
        if self.open:
            self.cells[-1] += data


def _pieces(text: str) -> list[tuple[str, str]]:
    out, start = [], 0
    for match in _INLINE.finditer(text):
        if match.start() > start:
            out.append(("text", text[start:match.start()]))
        out.append(("math", match.group("math")) if match.group("math") is not None else ("sup", match.group("sup")))
        start = match.end()
    if start < len(text):
        out.append(("text", text[start:]))
    return [p for p in out if p[0] != "text" or p[1].strip()]


def reference_lines(body: str) -> list[ShownLine]:
    """The lines of a reference body as printed text (markup stripped), each with its block number."""
    lines: list[ShownLine] = []
    block, table = 0, None
    for raw in body.split("\n"):
        if table is not None:
            table.append(raw)
            if raw.strip() == "</table>":
                parser = _Cells()
                parser.feed("\n".join(table))
                lines += [ShownLine(cell, block, _pieces(cell), cell=True) for cell in parser.cells if cell.strip()]
                table = None
            continue
        if not raw.strip():
            block += 1
            continue
        if raw.strip().startswith("<table"):
            table = [raw]
            continue
        display = _DISPLAY.match(raw.strip())
        if display:
            lines.append(ShownLine(raw, block, [("math", display.group("math"))]))
            continue
        text = _LIST.sub("", _HEADING.sub("", raw), count=1)
        pieces = _pieces(text)
        if pieces:
            lines.append(ShownLine(raw, block, pieces))
    return [line for line in lines if line.pieces]


def _text_pattern(text: str) -> list[str]:
    out: list[str] = []
    for char in plain(text):
        if char.isspace():
            if not out or out[-1] != HARD:
                out.append(HARD)
        elif char == "*":
            out.append(r"\*?")  # Markdown emphasis, or a star the page prints
        else:
            out.append(re.escape(char))
    return out


def _line_pattern(line: ShownLine, glyphs: dict[str, str]) -> re.Pattern[str]:
    parts: list[str] = []
    for kind, value in line.pieces:
        if kind == "text":
            parts += _text_pattern(value)
        elif kind == "sup":
            parts += [SOFT, *[p for p in _text_pattern(value) if p != HARD], SOFT]
        else:
            width = len(glyphs.get(value) or value)
            parts += [rf"[\s\S]{{0,{2 * width + 10}}}?"]
    while parts and parts[0] in (HARD, SOFT):
        parts.pop(0)
    while parts and parts[-1] in (HARD, SOFT):
        parts.pop()
    for i in range(1, len(parts) - 1):  # whitespace next to an equation may or may not be on the layer
        if parts[i] == HARD and (parts[i - 1].startswith(r"[\s\S]") or parts[i + 1].startswith(r"[\s\S]")):
            parts[i] = SOFT
    if line.cell:
        parts = [CELL_GAP if part == HARD else part for part in parts]
    first, last = line.pieces[0], line.pieces[-1]
    head = r"(?<![^\W_])" if first[0] == "text" and _WORD_CHAR.match(plain(first[1]).lstrip("* ")[:1] or " ") else ""
    tail = r"(?![^\W_])" if last[0] == "text" and _WORD_CHAR.match(plain(last[1]).rstrip("* ")[-1:] or " ") else ""
    return re.compile(head + "".join(parts) + tail, re.IGNORECASE)  # CSS may change the case (text-transform)


def glyphs_on_layer(glyphs: str, layer: str) -> str:
    """The glyphs of an equation missing from the layer (as a multiset: each glyph as often as the equation has it)."""
    missing = Counter(plain(glyphs).replace(" ", "")) - Counter(plain(layer))
    return "".join(sorted(missing.elements()))


@dataclass
class ShownCheck:
    """What :func:`check_shown` found: lines not on the layer, equations whose glyphs are not, blocks out of order."""

    missing: list[str] = field(default_factory=list)
    math_missing: list[str] = field(default_factory=list)
    out_of_order: int = 0

    @property
    def ok(self) -> bool:
        return not self.missing and not self.math_missing


def _find_block(patterns: list[re.Pattern[str]], layer: str, start: int) -> int | None:
    """The end of the block's lines found in order from ``start``, or None."""
    pos = start
    for pattern in patterns:
        match = pattern.search(layer, pos)
        if match is None:
            return None
        pos = match.end()
    return pos


def check_shown(body: str, layer: str, glyphs: dict[str, str]) -> ShownCheck:
    """Every line of the reference ``body`` on the text ``layer`` (``guarantee.text_layer_of``), in order."""
    layer = plain(layer)
    result = ShownCheck()
    blocks: dict[int, list[ShownLine]] = {}
    for line in reference_lines(body):
        blocks.setdefault(line.block, []).append(line)
        for kind, tex in line.pieces:
            if kind == "math" and (lost := glyphs_on_layer(glyphs.get(tex, ""), layer)):
                result.math_missing.append(f"{tex[:60]!r} (glyphs {lost[:20]!r})")
    pos = 0
    for lines in blocks.values():
        patterns = [_line_pattern(line, glyphs) for line in lines]
        if lines[0].cell:  # a table: each cell on the page, in any order
            result.missing += [line.source for line, pattern in zip(lines, patterns) if pattern.search(layer) is None]
            continue
        end = _find_block(patterns, layer, pos)
        if end is not None:
            pos = end
            continue
        if _find_block(patterns, layer, 0) is not None:
            result.out_of_order += 1
            continue
        lost = [line.source for line, pattern in zip(lines, patterns) if pattern.search(layer) is None]
        result.missing += lost or [f"{lines[0].source} (its block's lines are printed in another order)"]
    return result


def _value_pattern(value: str, cell: bool = False) -> re.Pattern[str]:
    parts = [r"\*" if p == r"\*?" else CELL_GAP if cell and p == HARD else p for p in _text_pattern(value.strip())]
    return re.compile("".join(parts))


def shown_in(value: str, layer: str, cell: bool = False) -> bool:
    """Is ``value`` printed on the page: its words on the layer with the same spaces (a space in ``value`` is
    whitespace on the layer, no space none); typographic forms as :func:`plain` makes them. A table ``cell``'s
    words may have a few words of the cells beside it between them (:data:`CELL_GAP`)."""
    return _value_pattern(value, cell).search(plain(layer)) is not None


def order_on_layer(before: str, after: str, layer: str) -> bool:
    """Is some ``before`` printed before some ``after`` on the layer (the order test's own rule, on the page)."""
    layer = plain(layer)
    first = _value_pattern(before).search(layer)
    lasts = [m.start() for m in _value_pattern(after).finditer(layer)]
    return first is not None and bool(lasts) and first.start() < lasts[-1]
