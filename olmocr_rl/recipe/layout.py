"""The blocks a generated page is made of, each written as HTML on the print grid and laid out line by line.

Every block knows the lines it prints (:meth:`Block.printed`): the generator counts them to fill one page
without overflowing it, and the sidecar and the grid test compare them with what the browser printed. A line is
``(cell, text)``: its first cell from the text's left edge and its text, one character a cell, with a space
where a cell holds no character of the grid font (a footnote marker, which is smaller, or inline math).

Line breaking is the browser's for this text: words separated by single spaces, broken greedily at spaces
(a line holds at most ``width`` cells; the space at a break takes none). Nothing else can break a line: a word
with its footnote marker is one unbreakable ``span.nw``, words are never longer than a line, and ``hyphens``
is ``manual`` with no hyphen in the text.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from .grid import PrintGrid

__all__ = ["Tok", "wrap", "Block", "Paragraph", "Heading", "ListBlock", "Cell", "TableBlock", "DisplayMath",
           "Columns", "Footnotes", "Line", "tokens_markdown"]

Line = tuple[int, str]  # (first cell from the text's left edge, the grid-font text; "" for a blank line)


@dataclass
class Tok:
    """A word or number as printed (``text``, with its punctuation), bold/italic (``style`` "b"/"i"), with a
    footnote ``marker`` printed in the cell after it; or inline math (``tex``) in ``cells`` cells."""

    text: str = ""
    style: str = ""
    marker: str = ""
    tex: str = ""
    cells: int = 0

    @property
    def width(self) -> int:
        return self.cells if self.tex else len(self.text) + len(self.marker)

    def grid_text(self) -> str:
        """The token's cells as the grid font prints them (markers and math as spaces)."""
        return " " * self.cells if self.tex else self.text + " " * len(self.marker)


def wrap(tokens: list[Tok], width: int, first: int = 0) -> list[list[Tok]]:
    """The tokens broken into lines of at most ``width`` cells (the first line has ``first`` cells taken)."""
    lines: list[list[Tok]] = [[]]
    used = first
    for token in tokens:
        if token.width > width:
            raise ValueError(f"{token.text or token.tex!r} is {token.width} cells, wider than a line of {width}")
        need = token.width + (1 if used else 0)  # the space before it, unless it starts the line
        if used and used + need > width:
            lines.append([])
            used, need = 0, token.width
        lines[-1].append(token)
        used += need
    return lines


def _html_tokens(tokens: list[Tok], grid: PrintGrid) -> str:
    """Tokens as inline HTML: runs of one style in one <b>/<i>, a word and its marker unbreakable, math in cells."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.tex:
            width = grid.cells(token.cells)
            out.append(f'<span class="im" style="width:{width}">\\({html.escape(token.tex)}\\)</span>')
        elif token.style:
            j = i
            while j < len(tokens) and tokens[j].style == token.style and not tokens[j].tex and not tokens[j].marker:
                j += 1
            j = max(j, i + 1)
            tag = "b" if token.style == "b" else "i"
            out.append(f"<{tag}>" + " ".join(html.escape(t.text) for t in tokens[i:j]) + f"</{tag}>")
            i = j
            continue
        elif token.marker:
            out.append(f'<span class="nw">{html.escape(token.text)}<sup>{html.escape(token.marker)}</sup></span>')
        else:
            out.append(html.escape(token.text))
        i += 1
    return " ".join(out)


def tokens_markdown(tokens: list[Tok]) -> str:
    """Tokens as the reference writes them (markers as <sup>m</sup>; used for two-column lines, never styled)."""
    return " ".join(f"\\({t.tex}\\)" if t.tex else t.text + (f"<sup>{t.marker}</sup>" if t.marker else "")
                    for t in tokens)


def _grid_line(tokens: list[Tok]) -> str:
    return " ".join(t.grid_text() for t in tokens)


class Block:
    """One block of the page: its HTML and the lines it prints."""

    def html(self, grid: PrintGrid) -> str:
        raise NotImplementedError

    def printed(self, grid: PrintGrid) -> list[Line]:
        raise NotImplementedError

    def height(self, grid: PrintGrid) -> int:
        return len(self.printed(grid))


@dataclass
class Paragraph(Block):
    tokens: list[Tok]

    def html(self, grid: PrintGrid) -> str:
        return f"<p>{_html_tokens(self.tokens, grid)}</p>"

    def printed(self, grid: PrintGrid) -> list[Line]:
        return [(0, _grid_line(line)) for line in wrap(self.tokens, grid.text_cols)]


@dataclass
class Heading(Block):
    words: str
    level: int = 1

    def html(self, grid: PrintGrid) -> str:
        return f"<h{self.level}>{html.escape(self.words)}</h{self.level}>"

    def printed(self, grid: PrintGrid) -> list[Line]:
        if len(self.words) > grid.text_cols:
            raise ValueError(f"heading {self.words!r} is wider than a line")
        return [(0, self.words)]


@dataclass
class ListBlock(Block):
    """A list of items (each a token list); ``sub`` (index, items): a nested unordered list in that item."""

    ordered: bool
    items: list[list[Tok]]
    sub: tuple[int, list[list[Tok]]] | None = None

    @staticmethod
    def marker_cells(ordered: bool) -> int:
        return 3 if ordered else 2

    def html(self, grid: PrintGrid) -> str:
        tag = "ol" if self.ordered else "ul"
        items = []
        for index, item in enumerate(self.items):
            inner = _html_tokens(item, grid)
            if self.sub is not None and self.sub[0] == index:
                inner += "<ul>" + "".join(f"<li>{_html_tokens(s, grid)}</li>" for s in self.sub[1]) + "</ul>"
            items.append(f"<li>{inner}</li>")
        return f"<{tag}>" + "".join(items) + f"</{tag}>"

    def printed(self, grid: PrintGrid) -> list[Line]:
        mark = self.marker_cells(self.ordered)
        out: list[Line] = []
        for index, item in enumerate(self.items):
            for n, line in enumerate(wrap(item, grid.text_cols - mark)):
                prefix = (f"{index + 1}. " if self.ordered else "- ") if n == 0 else " " * mark
                out.append((0, prefix + _grid_line(line)))
            if self.sub is not None and self.sub[0] == index:
                for sub in self.sub[1]:
                    for n, line in enumerate(wrap(sub, grid.text_cols - mark - 4)):  # indented 2 cells more
                        out.append((mark + 2, ("- " if n == 0 else "  ") + _grid_line(line)))
        return out


@dataclass
class Cell:
    text: str
    header: bool = False
    rowspan: int = 1
    colspan: int = 1

    def html(self) -> str:
        spans = "".join(f' {name}="{n}"' for name, n in (("rowspan", self.rowspan), ("colspan", self.colspan)) if n > 1)
        tag = "th" if self.header else "td"
        return f"<{tag}{spans}>{html.escape(self.text)}</{tag}>"


@dataclass
class TableBlock(Block):
    """A table: ``rows`` of cells as written (spans included), ``widths`` of its columns in cells (each with one
    cell of padding on the left; the table starts one cell left of the text so its first column lines up),
    ``head`` rows of headings, ``style`` "plain", "lined" (rules above, below and under the headings) or "ruled"
    (a rule above every row): lines drawn as box shadows, which take no layout space."""

    rows: list[list[Cell]]
    widths: list[int]
    head: int = 1
    style: str = "plain"

    def html(self, grid: PrintGrid) -> str:
        cls = f' class="{self.style}"' if self.style != "plain" else ""
        cols = "".join(f'<col style="width:{grid.cells(w)}">' for w in self.widths)
        body = "".join(('<tr class="head">' if r < self.head else "<tr>") + "".join(c.html() for c in row) + "</tr>"
                       for r, row in enumerate(self.rows))
        return (f'<table{cls} style="width:{grid.cells(sum(self.widths))};margin-left:-{grid.cells(1)}">'
                f"<colgroup>{cols}</colgroup>{body}</table>")

    def placed(self) -> list[list[tuple[int, Cell]]]:
        """Each row's cells with the column each starts in (row and column spans placed)."""
        taken: set[tuple[int, int]] = set()
        out = []
        for r, row in enumerate(self.rows):
            c, placed = 0, []
            for cell in row:
                while (r, c) in taken:
                    c += 1
                placed.append((c, cell))
                taken.update((r + dr, c + dc) for dr in range(cell.rowspan) for dc in range(cell.colspan))
                c += cell.colspan
            out.append(placed)
        return out

    def printed(self, grid: PrintGrid) -> list[Line]:
        starts = [sum(self.widths[:c]) for c in range(len(self.widths) + 1)]
        out: list[Line] = []
        for placed in self.placed():
            text = ""
            for c, cell in placed:
                at = starts[c]  # the cell's left edge is one cell left of the text: its padding fills it
                text = text.ljust(at) + cell.text
            out.append((0, text))
        return out


@dataclass
class DisplayMath(Block):
    tex: str
    tall: int = 2  # lines

    def html(self, grid: PrintGrid) -> str:
        return f'<div class="dm" style="height:{grid.lines(self.tall)}">\\[{html.escape(self.tex)}\\]</div>'

    def printed(self, grid: PrintGrid) -> list[Line]:
        return [(0, "")] * self.tall


@dataclass
class Columns(Block):
    """Two columns of paragraphs, each paragraph already broken into lines (``<br>`` in the HTML, so the lines
    printed are known); a paragraph never runs from one column into the other."""

    left: list[list[list[Tok]]]
    right: list[list[list[Tok]]]
    gap: int = 0  # blank lines between two paragraphs of a column

    def html(self, grid: PrintGrid) -> str:
        def column(paragraphs: list[list[list[Tok]]]) -> str:
            return "<div>" + "".join("<p>" + "<br>".join(_html_tokens(line, grid) for line in paragraph) + "</p>"
                                     for paragraph in paragraphs) + "</div>"
        return f'<div class="cols">{column(self.left)}{column(self.right)}</div>'

    def column_rows(self, paragraphs: list[list[list[Tok]]]) -> list[list[Tok] | None]:
        """The column's lines, top to bottom, None for a blank line between paragraphs."""
        rows: list[list[Tok] | None] = []
        for n, paragraph in enumerate(paragraphs):
            if n:
                rows += [None] * self.gap
            rows += paragraph
        return rows

    def row_pairs(self) -> list[tuple[list[Tok] | None, list[Tok] | None]]:
        left, right = self.column_rows(self.left), self.column_rows(self.right)
        height = max(len(left), len(right))
        return [(left[i] if i < len(left) else None, right[i] if i < len(right) else None) for i in range(height)]

    def printed(self, grid: PrintGrid) -> list[Line]:
        second = grid.column_cells + grid.column_gap
        out: list[Line] = []
        for left, right in self.row_pairs():
            text = _grid_line(left) if left else ""
            if right:
                text = text.ljust(second) + _grid_line(right)
            out.append((0, text))
        return out


@dataclass
class Footnotes(Block):
    """The page's footnotes: (marker, tokens) each, the marker in the first cell, then a space."""

    notes: list[tuple[str, list[Tok]]] = field(default_factory=list)

    def html(self, grid: PrintGrid) -> str:
        return '<div class="footnotes">' + "".join(
            f'<p id="fn{marker}"><sup>{html.escape(marker)}</sup> {_html_tokens(tokens, grid)}</p>'
            for marker, tokens in self.notes) + "</div>"

    def printed(self, grid: PrintGrid) -> list[Line]:
        out: list[Line] = []
        for marker, tokens in self.notes:
            for n, line in enumerate(wrap(tokens, grid.text_cols, first=len(marker))):
                out.append((0, (" " * len(marker) + " " if n == 0 else "") + _grid_line(line)))
        return out

