"""Tables of a completion, as graphs of cells (olmOCR-bench ``table_parsing``).

A :class:`TableData` stores each cell once, at the top-left slot it occupies, and for every cell
the sets of cells immediately up, down, left and right of it. With row and column spans a cell can
have several neighbours in a direction; empty slots (ragged rows) are skipped over. Heading cells
(``<th>``, any row inside ``<thead>``, or row 0 and column 0 of a markdown table) are what
``top_heading`` / ``left_heading`` relations look for: walking up (left) transitively from a cell,
the heading cells reached; if none, the cells where the walk ends.

Markdown: consecutive lines containing ``|`` form a table (at least two lines); the first line
made only of ``-``, ``:`` and spaces (pipes aside) is the separator and is dropped, as are other
lines made only of ``- :|``; cells are split on ``|`` and stripped, with the empty cells produced by
leading and trailing pipes removed. Markdown has no spans.

HTML: parsed with the standard library's ``html.parser`` tokenizer (the one olmOCR-bench's
BeautifulSoup ``html.parser`` backend uses) into a small tree built the way BeautifulSoup builds it:
no implied end tags (an end tag closes the most recent open element of that name, or is ignored),
void elements (``br``, ``img``, …) never hold content. Every ``<table>`` is a table, nested ones
included; its rows are all ``<tr>`` below it (nested tables' rows too), its cells the ``th``/``td``
children of each row; a cell's text is all text below it (``<br>`` as a newline; comments and
script/style/template/ruby-annotation text left out), stripped. ``rowspan``/``colspan`` that are
missing, non-numeric or not positive count as 1; ``rowspan="0"`` spans to the last row.

Bounds (beyond olmOCR-bench, which has none): spans are clamped as browsers clamp them
(``colspan`` ≤ 1000, ``rowspan`` ≤ 65534) and a table's grid is cut after ``MAX_GRID_SLOTS`` slots
(rows past the cut are dropped; a real table has a few thousand slots), so a hostile ``colspan``/``rowspan`` cannot exhaust memory.
"""

from __future__ import annotations

import html.entities
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Iterable, Sequence

from .normalize import normalize_text

__all__ = ["TableData", "parse_markdown_tables", "parse_html_tables", "build_table", "CellSpec", "MAX_GRID_SLOTS"]

Cell = tuple[int, int]
MAX_COLSPAN = 1000
MAX_ROWSPAN = 65534
MAX_GRID_SLOTS = 50_000


@dataclass(frozen=True)
class CellSpec:
    """One cell as written in the source: its text, spans and whether it is a heading."""

    text: str
    rowspan: int = 1
    colspan: int = 1
    is_heading: bool = False


@dataclass
class TableData:
    """A parsed table: cell texts by top-left slot, heading cells, neighbour relations.

    ``normalized_text`` holds ``normalize_text`` of every cell and ``cells_by_text`` the cells of each
    normalised text, computed once per table so tests compare against them without re-normalising.
    """

    cell_text: dict[Cell, str]
    heading_cells: frozenset[Cell]
    is_rectangular: bool
    up_relations: dict[Cell, frozenset[Cell]]
    down_relations: dict[Cell, frozenset[Cell]]
    left_relations: dict[Cell, frozenset[Cell]]
    right_relations: dict[Cell, frozenset[Cell]]
    normalized_text: dict[Cell, str] = field(init=False, repr=False)
    cells_by_text: dict[str, list[Cell]] = field(init=False, repr=False)
    _heading_cache: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.normalized_text = {cell: normalize_text(text) for cell, text in self.cell_text.items()}
        index: dict[str, list[Cell]] = {}
        for cell, text in self.normalized_text.items():
            index.setdefault(text, []).append(cell)
        self.cells_by_text = index

    def _walk(self, start: Cell, relation: dict[Cell, frozenset[Cell]]) -> frozenset[Cell]:
        headings: set[Cell] = set()
        ends: set[Cell] = set()
        visited: set[Cell] = set()
        to_visit = [start]
        while to_visit:
            current = to_visit.pop()
            if current in visited:
                continue
            visited.add(current)
            if current in self.heading_cells:
                headings.add(current)
            neighbours = relation.get(current)
            if neighbours:
                to_visit.extend(neighbours)
            else:
                ends.add(current)
        headings.discard(start)
        ends.discard(start)
        return frozenset(headings or ends)

    def top_heading_relations(self, row: int, col: int) -> frozenset[Cell]:
        """Heading cells reached walking up from (row, col); the top-most cells if none is a heading."""
        key = ("top", row, col)
        if key not in self._heading_cache:
            self._heading_cache[key] = self._walk((row, col), self.up_relations)
        return self._heading_cache[key]

    def left_heading_relations(self, row: int, col: int) -> frozenset[Cell]:
        """Heading cells reached walking left from (row, col); the left-most cells if none is a heading."""
        key = ("left", row, col)
        if key not in self._heading_cache:
            self._heading_cache[key] = self._walk((row, col), self.left_relations)
        return self._heading_cache[key]


# --- the grid -----------------------------------------------------------------------------------


def build_table(rows: Sequence[Sequence[CellSpec]]) -> TableData | None:
    """Lay cells out on a grid honouring spans and derive neighbour relations; None if no cell."""
    placed = _Placement()
    for row_index, specs in enumerate(rows):
        if placed.slots > MAX_GRID_SLOTS:
            break
        placed.add_row(row_index, specs)
    placed.add_overflow_rows()
    if not placed.cell_text:
        return None
    grid = placed.grid
    width = 1 + max((i for row in grid for i, entry in enumerate(row) if entry is not None), default=-1)
    if width == 0:
        return None
    for row in grid:
        if len(row) < width:
            row.extend([None] * (width - len(row)))
        elif len(row) > width:
            del row[width:]
    up, down, left, right = _relations(grid, placed.cell_text, width)
    return TableData(
        cell_text=placed.cell_text,
        heading_cells=frozenset(placed.headings),
        is_rectangular=all(entry is not None for row in grid for entry in row),
        up_relations={cell: frozenset(v) for cell, v in up.items()},
        down_relations={cell: frozenset(v) for cell, v in down.items()},
        left_relations={cell: frozenset(v) for cell, v in left.items()},
        right_relations={cell: frozenset(v) for cell, v in right.items()},
    )


class _Placement:
    """Cells placed on a grid row by row: each grid slot holds the cell covering it, or None."""

    def __init__(self) -> None:
        self.cell_text: dict[Cell, str] = {}
        self.headings: set[Cell] = set()
        self.grid: list[list[Cell | None]] = []
        self.active: list[tuple[Cell, int] | None] = []  # per column: spanning cell and rows it still covers
        self.slots = 0

    def _take_active(self, col: int, row_entries: list[Cell | None]) -> None:
        cell, remaining = self.active[col]  # type: ignore[misc]
        row_entries.append(cell)
        self.active[col] = (cell, remaining - 1) if remaining > 1 else None

    def add_row(self, row_index: int, specs: Sequence[CellSpec]) -> None:
        """One source row: its cells fill the slots that spans from above leave free."""
        active = self.active
        row_entries: list[Cell | None] = []
        col = 0
        spec_index = 0
        while spec_index < len(specs) or col < len(active):
            if col < len(active) and active[col] is not None:
                self._take_active(col, row_entries)
                col += 1
                continue
            if spec_index >= len(specs):
                row_entries.append(None)  # a hole left of a still-active span further right
                col += 1
                continue
            spec = specs[spec_index]
            spec_index += 1
            cell = (row_index, col)
            if spec.rowspan == 1 and spec.colspan == 1:  # the common case, inline (no method call)
                self.cell_text[cell] = spec.text
                if spec.is_heading:
                    self.headings.add(cell)
                if len(active) <= col:
                    active.append(None)
                else:
                    active[col] = None
                row_entries.append(cell)
                col += 1
            else:
                col += self._place_span(spec, cell, row_entries)
        self.grid.append(row_entries)
        self.slots += len(row_entries)

    def _place_span(self, spec: CellSpec, cell: Cell, row_entries: list[Cell | None]) -> int:
        """Record a spanning cell starting at ``cell``'s slot; returns the columns it covers."""
        col = cell[1]
        active = self.active
        self.cell_text[cell] = spec.text
        if spec.is_heading:
            self.headings.add(cell)
        rowspan = min(max(1, spec.rowspan), MAX_ROWSPAN)
        colspan = min(max(1, spec.colspan), MAX_COLSPAN)
        if len(active) < col + colspan:
            active.extend([None] * (col + colspan - len(active)))
        for offset in range(colspan):
            row_entries.append(cell)
            active[col + offset] = (cell, rowspan - 1) if rowspan > 1 else None
        return colspan

    def add_overflow_rows(self) -> None:
        """Row spans reaching past the last row become extra rows."""
        while any(entry is not None for entry in self.active) and self.slots <= MAX_GRID_SLOTS:
            row_entries: list[Cell | None] = []
            for col, entry in enumerate(self.active):
                if entry is None:
                    row_entries.append(None)
                else:
                    self._take_active(col, row_entries)
            self.grid.append(row_entries)
            self.slots += len(row_entries)


_Relations = dict[Cell, set[Cell]]


def _relations(
    grid: list[list[Cell | None]], cells: Iterable[Cell], width: int
) -> tuple[_Relations, _Relations, _Relations, _Relations]:
    """Up, down, left and right neighbours of every cell.

    A cell's right neighbours are, in each row it spans, the next different cell to its right
    (empty slots skipped); its slots in a row are contiguous, so walking each row (and each
    column) once and pairing consecutive distinct cells gives every relation in O(slots)."""
    up: _Relations = {cell: set() for cell in cells}
    down: _Relations = {cell: set() for cell in up}
    left: _Relations = {cell: set() for cell in up}
    right: _Relations = {cell: set() for cell in up}
    for line in grid:
        previous = None
        for entry in line:
            if entry is None or entry == previous:
                continue
            if previous is not None:
                right[previous].add(entry)
                left[entry].add(previous)
            previous = entry
    for col in range(width):
        previous = None
        for row in range(len(grid)):
            entry = grid[row][col]
            if entry is None or entry == previous:
                continue
            if previous is not None:
                down[previous].add(entry)
                up[entry].add(previous)
            previous = entry
    return up, down, left, right


# --- markdown -----------------------------------------------------------------------------------


def _markdown_rows(lines: list[str]) -> list[list[str]]:
    separator = None
    for index, line in enumerate(lines):
        bare = line.replace("|", "").strip()
        if bare and all(ch in "- :" for ch in bare):
            separator = index
            break
    rows = []
    for index, line in enumerate(lines):
        if index == separator:
            continue
        if line.strip() and all(ch in "- :|" for ch in line):
            continue
        cells = [cell.strip() for cell in line.split("|")]
        if cells and cells[0] == "":
            cells = cells[1:]
        if cells and cells[-1] == "":
            cells = cells[:-1]
        if cells:
            rows.append(cells)
    return rows


def _markdown_table(lines: list[str]) -> TableData | None:
    rows = _markdown_rows(lines)
    if not rows:
        return None
    specs = [[CellSpec(text, is_heading=(r == 0 or c == 0)) for c, text in enumerate(row)] for r, row in enumerate(rows)]
    return build_table(specs)


def parse_markdown_tables(text: str) -> tuple[TableData, ...]:
    """Markdown (pipe) tables of ``text``, in order of appearance."""
    if "|" not in text:
        return ()
    tables = []
    block: list[str] = []
    for line in text.strip().split("\n") + [""]:  # the sentinel closes a table at the end
        if "|" in line:
            block.append(line)
            continue
        if len(block) >= 2:
            table = _markdown_table(block)
            if table is not None:
                tables.append(table)
        block = []
    return tuple(tables)


# --- HTML ---------------------------------------------------------------------------------------

_VOID_ELEMENTS = frozenset(
    "area base br col embed hr img input keygen link menuitem meta param source track wbr "
    "basefont bgsound command frame image isindex nextid spacer".split()
)
# Text inside these is not page text for BeautifulSoup's get_text (its special string containers).
_HIDDEN_TEXT_ELEMENTS = frozenset({"rt", "rp", "style", "script", "template"})
_HAS_TABLE_TAG = re.compile(r"<table", re.IGNORECASE)


class _Element:
    __slots__ = ("name", "attrs", "children", "parent")

    def __init__(self, name: str, attrs: dict[str, str], parent: "_Element | None") -> None:
        self.name = name
        self.attrs = attrs
        self.children: list = []
        self.parent = parent


class _TreeBuilder(HTMLParser):
    """html.parser events -> a tree built as BeautifulSoup's html.parser backend builds it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.root = _Element("[document]", {}, None)
        self.stack = [self.root]
        self.open_counts: dict[str, int] = {}
        self.hidden_depth = 0
        self.tables: list[_Element] = []

    def _open(self, tag: str, attrs: list[tuple[str, str | None]]) -> _Element:
        values: dict[str, str] = {}
        for key, value in attrs:
            values[key] = "" if value is None else value  # a repeated attribute: the last one wins
        parent = self.stack[-1]
        element = _Element(tag, values, parent)
        parent.children.append(element)
        if tag == "table":
            self.tables.append(element)
        return element

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = self._open(tag, attrs)
        if tag in _VOID_ELEMENTS:
            return
        self.stack.append(element)
        self.open_counts[tag] = self.open_counts.get(tag, 0) + 1
        if tag in _HIDDEN_TEXT_ELEMENTS:
            self.hidden_depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open(tag, attrs)  # <x/>: an element with no content

    def handle_endtag(self, tag: str) -> None:
        if not self.open_counts.get(tag):
            return  # nothing of that name is open: ignored
        while len(self.stack) > 1:
            element = self.stack.pop()
            self.open_counts[element.name] -= 1
            if element.name in _HIDDEN_TEXT_ELEMENTS:
                self.hidden_depth -= 1
            if element.name == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self.hidden_depth and data:
            self.stack[-1].children.append(data)

    def handle_entityref(self, name: str) -> None:
        character = html.entities.html5.get(name + ";")
        self.handle_data(character if character is not None else "&" + name)

    def handle_charref(self, name: str) -> None:
        self.handle_data(_numeric_reference(name))

    def unknown_decl(self, data: str) -> None:
        if data.upper().startswith("CDATA["):
            self.handle_data(data[len("CDATA[") :])


def _numeric_reference(name: str) -> str:
    digits, base = (name[1:], 16) if name[:1] in ("x", "X") else (name, 10)
    match = re.match(r"[0-9a-fA-F]+" if base == 16 else r"[0-9]+", digits)
    if not match:
        return "&#" + name
    code = int(match.group(), base)
    rest = digits[match.end() :]
    if 0x80 <= code <= 0x9F:  # Windows-1252 code points, as browsers (and BeautifulSoup) read them
        try:
            return bytes([code]).decode("cp1252") + rest
        except UnicodeDecodeError:
            return "\ufffd" + rest
    if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return "\ufffd" + rest
    return chr(code) + rest


def _iter_elements(element: _Element, name: str) -> Iterable[_Element]:
    """Descendants of ``element`` with the given tag name, in document order."""
    stack = list(reversed(element.children))
    while stack:
        node = stack.pop()
        if isinstance(node, _Element):
            if node.name == name:
                yield node
            stack.extend(reversed(node.children))


def _cell_text(element: _Element) -> str:
    parts: list[str] = []
    stack = list(reversed(element.children))
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            parts.append(node)
        elif node.name == "br":
            parts.append("\n")
        else:
            stack.extend(reversed(node.children))
    return "".join(parts).strip()


def _span(value: str | None) -> int:
    if value is None or value == "":
        return 1
    try:
        span = int(value)
    except ValueError:
        return 1
    return span if span > 0 else 1


def _has_ancestor(element: _Element, name: str) -> bool:
    node = element.parent
    while node is not None:
        if node.name == name:
            return True
        node = node.parent
    return False


# --- a fast path for plain markup ----------------------------------------------------------------
#
# html.parser is a Python loop costing tens of µs a tag; a page-long HTML table has a thousand
# tags. Markup made only of plain start/end tags, text and complete character references is
# tokenized here with one regex instead, giving the same events; anything else (comments,
# declarations, script/style, unusual tag syntax, a trailing incomplete reference) falls back to
# html.parser.

_FAST_TOKEN = re.compile(
    r"<(?P<end>/)?(?P<name>[a-zA-Z][a-zA-Z0-9]*)"
    r"(?P<attrs>(?:\s+[^\s\"'>/=]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'=<>`]+))?)*)\s*(?P<close>/)?>"
    r"|<(?=[a-zA-Z/!?])"  # a '<' that html.parser would read as markup but the pattern above did not
)
_FAST_ATTRIBUTE = re.compile(r"""([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
_REFERENCE = re.compile(r"&(?:#([0-9]+)|#([xX][0-9a-fA-F]+)|([a-zA-Z][-.a-zA-Z0-9]*));")
_REFERENCE_START = re.compile(r"&[#a-zA-Z]")
_CDATA_ELEMENTS = frozenset({"script", "style"})


class _Fallback(Exception):
    pass


def _decode_references(data: str) -> str:
    """Complete references (``&#65;``, ``&#x41;``, ``&amp;``) decoded; a literal ``&`` (not before
    ``#`` or a letter) kept. Anything else — a reference without its ``;`` — has html.parser rules
    of its own (one can even turn the rest of the document into text), so it falls back."""
    if "&" not in data:
        return data

    def replace(match: re.Match) -> str:
        decimal, hexadecimal, name = match.groups()
        if decimal is not None or hexadecimal is not None:
            return _numeric_reference(decimal if decimal is not None else hexadecimal)
        character = html.entities.html5.get(name + ";")
        return character if character is not None else "&" + name

    if _REFERENCE_START.search(_REFERENCE.sub("", data)):
        raise _Fallback
    return _REFERENCE.sub(replace, data)


def _feed_fast(builder: "_TreeBuilder", text: str) -> None:
    """Drive ``builder`` with the events of plain markup; raises _Fallback on anything else."""
    pos = 0
    for match in _FAST_TOKEN.finditer(text):
        name = match.group("name")
        if name is None or name.lower() in _CDATA_ELEMENTS:
            raise _Fallback
        if match.start() > pos:
            builder.handle_data(_decode_references(text[pos : match.start()]))
        pos = match.end()
        tag = name.lower()
        if match.group("end"):
            if match.group("attrs") or match.group("close"):
                raise _Fallback
            builder.handle_endtag(tag)
            continue
        attrs = []
        for attribute in _FAST_ATTRIBUTE.finditer(match.group("attrs")):
            key, double, single, bare = attribute.groups()
            value = double if double is not None else single if single is not None else bare
            attrs.append((key.lower(), None if value is None else html.unescape(value)))
        if match.group("close"):
            builder.handle_startendtag(tag, attrs)
        else:
            builder.handle_starttag(tag, attrs)
    if pos < len(text):
        builder.handle_data(_decode_references(text[pos:]))


def _build_tree(text: str) -> "_TreeBuilder":
    builder = _TreeBuilder()
    try:
        _feed_fast(builder, text)
        return builder
    except _Fallback:
        builder = _TreeBuilder()
        builder.feed(text)
        builder.close()
        return builder


def parse_html_tables(text: str) -> tuple[TableData, ...]:
    """HTML tables of ``text`` (every ``<table>``, nested ones too), in document order."""
    if not _HAS_TABLE_TAG.search(text):
        return ()
    builder = _build_tree(text)
    tables = []
    for table in builder.tables:
        rows = list(_iter_elements(table, "tr"))
        if not rows:
            continue
        specs: list[list[CellSpec]] = []
        for row_index, row in enumerate(rows):
            in_head = _has_ancestor(row, "thead")
            row_specs = []
            for cell in row.children:
                if not isinstance(cell, _Element) or cell.name not in ("td", "th"):
                    continue
                raw_rowspan = cell.attrs.get("rowspan")
                rowspan = _span(raw_rowspan)
                if raw_rowspan is not None and raw_rowspan.strip() == "0":
                    rowspan = max(1, len(rows) - row_index)
                row_specs.append(
                    CellSpec(
                        _cell_text(cell),
                        rowspan=rowspan,
                        colspan=_span(cell.attrs.get("colspan")),
                        is_heading=cell.name == "th" or in_head,
                    )
                )
            specs.append(row_specs)
        table_data = build_table(specs)
        if table_data is not None:
            tables.append(table_data)
    return tuple(tables)
