"""A page's tree as what a reader sees: body blocks in reading order, tables on a grid, and the furniture.

:func:`page_content` walks the tree once. Furniture subtrees (``tree.is_furniture``) give their lines to
``furniture`` and nothing to the body. The body becomes :class:`Block` objects: headings, paragraphs, list
items, display equations, footnotes (an element whose class names a footnote, ``role="doc-footnote"`` or an id
``fn…``) and tables. A block's inline content is a list of :class:`Run` (text with bold/italic/superscript
flags, or inline math). Tables are read into a grid of slots with their row and column spans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .tree import MATH, Node, is_furniture, is_skipped, text_of

__all__ = ["Run", "Block", "Cell", "Table", "PageContent", "page_content", "MAX_GRID_SLOTS"]

BLOCK_TAGS = frozenset("p div h1 h2 h3 h4 h5 h6 li blockquote pre caption figcaption dt dd address section article "
                       "aside main nav figure body ul ol dl center form fieldset hr html".split())
HEADINGS = {f"h{i}": i for i in range(1, 7)}
BOLD, ITALIC = frozenset({"b", "strong"}), frozenset({"i", "em"})
_FOOTNOTE = re.compile(r"(?:^|[-_\s])(?:footnotes?|fn|endnotes?|note)(?:$|[-_\s\d])", re.IGNORECASE)
MAX_GRID_SLOTS = 20_000  # a table larger than this (spans included) is read as text only
MAX_SPAN = 100


@dataclass
class Run:
    text: str = ""
    bold: bool = False
    italic: bool = False
    sup: bool = False
    tex: str | None = None  # inline math
    br: bool = False  # a <br>: a line break in the reference, a word boundary in every test (its text is "\n")


@dataclass
class Cell:
    text: str
    header: bool
    rowspan: int
    colspan: int
    row: int = 0
    col: int = 0


@dataclass
class Table:
    rows: list[list[Cell]]
    grid: list[list[Cell | None]] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.grid), max((len(r) for r in self.grid), default=0)


@dataclass
class Block:
    kind: str  # heading, paragraph, item, math, footnote, table, pre
    runs: list[Run] = field(default_factory=list)
    level: int = 0  # heading level; list depth for items
    ordered: bool = False
    tex: str = ""
    table: Table | None = None
    marker: str = ""  # a footnote's marker

    @property
    def text(self) -> str:
        """Plain text, math and superscript markers left out."""
        return " ".join("".join(r.text for r in self.runs if r.tex is None and not r.sup).split())


@dataclass
class PageContent:
    blocks: list[Block]
    furniture: list[str]
    language: str = "en"
    scripts: int = 0


def _is_footnote(node: Node) -> bool:
    if node.attrs.get("role", "").lower() in ("doc-footnote", "doc-endnote", "note"):
        return True
    if re.fullmatch(r"fn\d+|footnote-?\d+", node.attrs.get("id", ""), re.IGNORECASE):
        return True
    return bool(_FOOTNOTE.search(node.attrs.get("class", "")))


def _furniture_lines(node: Node) -> list[str]:
    """The lines of a furniture element: each innermost block's text, else the whole text."""
    inner = [n for n in node.walk() if n is not node and not n.is_text and n.tag in BLOCK_TAGS | {"span", "td", "th"}
             and not any(c.tag in BLOCK_TAGS | {"span", "td", "th"} for c in n.walk() if c is not n)]
    lines = [text_of(n) for n in inner if not is_skipped(n)] if inner else [text_of(node)]
    covered = " ".join(lines)
    whole = text_of(node)
    if inner and len("".join(covered.split())) < len("".join(whole.split())):
        lines = [whole]  # text outside the innermost blocks: keep the whole line instead
    return [line for line in lines if line]


def _span(value: str) -> int:
    try:
        return max(1, min(MAX_SPAN, int(value)))
    except ValueError:
        return 1


def read_table(node: Node) -> Table:
    """Rows of cells (nested tables' rows excluded) placed on a grid of slots."""
    rows: list[list[Cell]] = []

    def visit(n: Node) -> None:
        for child in n.children:
            if child.tag == "tr":
                rows.append([Cell(text_of(c, math=True), c.tag == "th", _span(c.attrs.get("rowspan", "1")),
                                  _span(c.attrs.get("colspan", "1"))) for c in child.children if c.tag in ("td", "th")])
            elif child.tag in ("thead", "tbody", "tfoot"):
                visit(child)

    visit(node)
    table = Table(rows)
    grid: list[list[Cell | None]] = []
    for r, row in enumerate(rows):
        while len(grid) <= r:
            grid.append([])
        c = 0
        for cell in row:
            while c < len(grid[r]) and grid[r][c] is not None:
                c += 1
            cell.row, cell.col = r, c
            if sum(len(g) for g in grid) + cell.rowspan * cell.colspan > MAX_GRID_SLOTS:
                return Table(rows, [])
            for dr in range(min(cell.rowspan, len(rows) - r)):
                while len(grid) <= r + dr:
                    grid.append([])
                line = grid[r + dr]
                line.extend([None] * (c + cell.colspan - len(line)))
                for dc in range(cell.colspan):
                    line[c + dc] = cell
            c += cell.colspan
    width = max((len(g) for g in grid), default=0)
    table.grid = [g + [None] * (width - len(g)) for g in grid]
    return table


class _Walker:
    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.furniture: list[str] = []
        self.runs: list[Run] = []
        self.kind, self.level, self.ordered, self.marker = "paragraph", 0, False, ""

    def flush(self) -> None:
        if any(r.text.strip() or r.tex for r in self.runs):
            self.blocks.append(Block(self.kind, self.runs, self.level, self.ordered, marker=self.marker))
        self.runs = []

    def inline(self, node: Node, bold: bool, italic: bool, sup: bool) -> None:
        if node.is_text:
            self.runs.append(Run(node.text, bold, italic, sup))
        elif node.tag == MATH and node.attrs.get("display") == "1":
            self.flush()
            self.blocks.append(Block("math", tex=node.tex))
        elif node.tag == MATH:
            self.runs.append(Run("", tex=node.tex))
        elif node.tag == "br":
            self.runs.append(Run("\n", bold, italic, sup, br=True))
        else:
            self.visit(node, bold or node.tag in BOLD, italic or node.tag in ITALIC, sup or node.tag == "sup")

    def block(self, node: Node, kind: str, level: int = 0, ordered: bool = False, marker: str = "") -> None:
        saved = (self.kind, self.level, self.ordered, self.marker)
        self.flush()
        self.kind, self.level, self.ordered, self.marker = kind, level, ordered, marker
        for child in node.children:
            self.inline(child, False, False, False)
        self.flush()
        self.kind, self.level, self.ordered, self.marker = saved

    def visit(self, node: Node, bold: bool = False, italic: bool = False, sup: bool = False) -> None:
        for child in node.children:
            if child.is_text or child.tag in (MATH, "br"):
                self.inline(child, bold, italic, sup)
            elif is_skipped(child):
                continue
            elif is_furniture(child):
                self.flush()
                self.furniture.extend(_furniture_lines(child))
            elif child.tag == "table":
                self.flush()
                self.blocks.append(Block("table", table=read_table(child)))
            elif child.tag in HEADINGS:
                self.block(child, "heading", HEADINGS[child.tag])
            elif child.tag == "li":
                depth = sum(1 for a in child.ancestors() if a.tag in ("ul", "ol"))
                parent = child.parent.tag if child.parent else "ul"
                self.block(child, "item", depth, parent == "ol")
            elif _is_footnote(child):
                self.footnotes(child)
            elif child.tag == "pre":
                self.flush()
                self.blocks.append(Block("pre", [Run(text_of(child))]))
            elif child.tag in BLOCK_TAGS:
                self.flush()
                self.visit(child)
                self.flush()
            else:
                self.inline_element(child, bold, italic, sup)

    def footnotes(self, node: Node) -> None:
        """One footnote block per block child (a list of notes), or the element itself as one note."""
        parts = [c for c in node.children if not c.is_text and c.tag in BLOCK_TAGS | {"li"} and not is_skipped(c)]
        if not parts:
            self.block(node, "footnote", marker=_footnote_marker(node))
            return
        self.flush()
        for child in node.children:
            if child in parts:
                self.block(child, "footnote", marker=_footnote_marker(child))
            elif child.is_text and child.text.strip():
                self.runs.append(Run(child.text))
        self.flush()

    def inline_element(self, node: Node, bold: bool, italic: bool, sup: bool) -> None:
        self.visit(node, bold or node.tag in BOLD, italic or node.tag in ITALIC, sup or node.tag == "sup")


def _footnote_marker(node: Node) -> str:
    for n in node.walk():
        if n.tag == "sup":
            text = text_of(n)
            if text and len(text) <= 3 and not any(ch.isspace() for ch in text):
                return text
    match = re.match(r"\s*(\d{1,3}|[*†‡§])[.)]?\s", text_of(node) + " ")
    return match.group(1) if match else ""


def page_content(root: Node) -> PageContent:
    """The body blocks, the furniture lines, the language (``<html lang>``, default en) and the script count."""
    walker = _Walker()
    walker.visit(root)
    walker.flush()
    language = "en"
    for node in root.walk():
        if node.tag == "html" and node.attrs.get("lang"):
            language = node.attrs["lang"].split("-")[0].lower() or "en"
            break
    scripts = sum(1 for n in root.walk() if n.tag == "script")
    return PageContent(walker.blocks, walker.furniture, language, scripts)
