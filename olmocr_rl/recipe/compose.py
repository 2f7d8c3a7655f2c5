"""The page kinds: what each generated page holds, drawn with one random generator per page.

A :class:`Composer` draws the content of one page of a kind (:data:`KINDS`) for a split's
:class:`~.words.Vocabulary`: sentences of 3–7 pseudo-words ending with a period, numbers, headings, tables with
row and column spans, lists, two columns with footnotes, inline and display math. Each block is added only when
the lines it prints still fit the page (:meth:`Composer.fits`), so a page never runs over its grid.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .grid import MONO_ADVANCE_EM, PrintGrid
from .layout import (Block, Cell, Columns, DisplayMath, Footnotes, Heading, ListBlock, Paragraph, TableBlock, Tok,
                     wrap)
from .words import Vocabulary

__all__ = ["KINDS", "Composer", "PageSpec", "PAGE_NUMBER_FORMATS"]

KINDS = ("report", "table", "list", "columns", "math", "mixed")
PAGE_NUMBER_FORMATS = ("Page {n}", "p. {n}", "{n}", "{n}/{m}", "Page {n} of {m}")
FURNITURE_P = 0.6  # pages of a kind other than report with a running head and a footer
_LETTERS = "abcxynmkt"
#: widths in em of KaTeX's glyphs (and the spaces it puts around operators), for the cells inline math takes
_EM = {"letter": 0.57, "digit": 0.5, "op": 1.22, "rel": 1.34, "script": 0.42, "paren": 0.39}


@dataclass
class PageSpec:
    """One page: its running head and footer (the texts printed on the first and last line; empty: none), its
    blocks, and the blank lines between blocks (``gap``)."""

    kind: str
    header: list[str] = field(default_factory=list)
    footer: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    gap: int = 1

    def body_rows(self, grid: PrintGrid) -> int:
        """Lines the page's furniture leaves to its blocks (a blank line after the head and before the foot)."""
        rows = grid.text_rows
        if self.header:
            rows -= 1 + self.gap
        if self.footer:
            rows -= 1 + self.gap
        return rows

    def used_rows(self, grid: PrintGrid, blocks: list[Block] | None = None) -> int:
        blocks = self.blocks if blocks is None else blocks
        return sum(b.height(grid) for b in blocks) + self.gap * max(0, len(blocks) - 1)


class Composer:
    """Draws pages of one split: ``compose(kind, rng)`` -> :class:`PageSpec`."""

    def __init__(self, vocabulary: Vocabulary, grid: PrintGrid) -> None:
        self.vocab, self.grid = vocabulary, grid
        self.rng = random.Random(0)

    # ---- words ---------------------------------------------------------------------------------------------

    def sentence(self, words: tuple[int, int] = (3, 7), max_len: int = 10, min_len: int = 2) -> list[Tok]:
        count = self.rng.randint(*words)
        texts = self.vocab.sentence(self.rng, count, max_len)
        while min_len > 2 and any(len(t.strip(".,")) < min_len for t in texts):
            texts = self.vocab.sentence(self.rng, count, max_len)
        return [Tok(t) for t in texts]

    def styled(self, tokens: list[Tok]) -> list[Tok]:
        """Sometimes a bold or italic span of 2–3 words inside the sentence (never its first word)."""
        if len(tokens) >= 4 and self.rng.random() < 0.3:
            start = self.rng.randint(1, len(tokens) - 3)
            style = self.rng.choice("bi")
            for token in tokens[start:start + self.rng.randint(2, 3)]:
                token.style = style
        return tokens

    def math_token(self) -> Tok:
        """Inline math, one line tall, in the cells its glyphs take (estimated from KaTeX's widths)."""
        tex, em = self.equation(display=False)
        cells = math.ceil(em / MONO_ADVANCE_EM + 0.15)
        return Tok(tex=tex, cells=cells)

    def equation(self, display: bool) -> tuple[str, float]:
        """Simple TeX (letters, digits 2–9, + - =, a square or an index; a fraction or a root in display math) and
        its estimated width in em."""
        rng, letters = self.rng, self.rng.sample(_LETTERS, 3)
        digit = lambda: str(rng.randint(2, 9))  # noqa: E731
        form = rng.randrange(6 if display else 4)
        if form == 0:
            return f"{letters[0]} + {digit()}", 2 * _EM["letter"] + _EM["op"] - 0.07
        if form == 1:
            return f"{letters[0]}^2 + {letters[1]}", 2 * _EM["letter"] + _EM["script"] + _EM["op"]
        if form == 2:
            return f"{digit()}{letters[0]} = {digit()}", _EM["digit"] * 2 + _EM["letter"] + _EM["rel"]
        if form == 3:
            return f"{letters[0]}_1 - {letters[1]}", 2 * _EM["letter"] + _EM["script"] + _EM["op"]
        if form == 4:
            return f"\\frac{{{letters[0]}}}{{{digit()}}} = {letters[1]}", 2.6
        return f"\\sqrt{{{letters[0]}}} + {digit()}{letters[1]} = {digit()}", 5.5

    def marker_sentence_tokens(self, tokens: list[Tok], marker: str, min_before: int = 3) -> bool:
        """Attach footnote ``marker`` to a word with at least ``min_before`` words before it in ``tokens``."""
        spots = [i for i in range(min_before, len(tokens)) if not tokens[i].tex and not tokens[i].style]
        if not spots:
            return False
        tokens[self.rng.choice(spots)].marker = marker
        return True

    # ---- blocks --------------------------------------------------------------------------------------------

    def paragraph(self, max_rows: int, sentences: tuple[int, int] = (1, 2), marker: str = "") -> Paragraph | None:
        """A paragraph of whole sentences fitting ``max_rows`` lines, or None."""
        tokens: list[Tok] = []
        for _ in range(self.rng.randint(*sentences)):
            more = tokens + self.styled(self.sentence(max_len=min(10, self.grid.text_cols)))
            if len(wrap(more, self.grid.text_cols)) > max_rows:
                break
            tokens = more
        if not tokens:
            return None
        if marker and not self.marker_sentence_tokens(tokens, marker):
            return Paragraph(tokens)
        if len(wrap(tokens, self.grid.text_cols)) > max_rows:  # the marker's cell pushed a word to a new line
            for token in tokens:
                token.marker = ""
        return Paragraph(tokens)

    def math_paragraph(self, max_rows: int) -> Paragraph | None:
        """A sentence with inline math in it (never its first or last word)."""
        tokens = self.sentence((4, 6), max_len=min(8, self.grid.text_cols))
        tokens.insert(self.rng.randint(1, len(tokens) - 2), self.math_token())
        return Paragraph(tokens) if len(wrap(tokens, self.grid.text_cols)) <= max_rows else None

    def heading(self, level: int = 1) -> Heading:
        return Heading(self.vocab.title(self.rng, self.rng.randint(2, 3), max_len=min(6, self.grid.text_cols // 3)),
                       level)

    def list_block(self, max_rows: int) -> ListBlock | None:
        ordered = self.rng.random() < 0.5
        width = self.grid.text_cols - ListBlock.marker_cells(ordered)
        block = ListBlock(ordered, [])
        for _ in range(self.rng.randint(3, 6)):
            item = self.styled(self.sentence((3, 6), max_len=min(9, width)))
            trial = ListBlock(ordered, block.items + [item])
            if trial.height(self.grid) > max_rows:
                break
            block = trial
        if len(block.items) < 2:
            return None
        if self.rng.random() < 0.25:
            subs = [self.sentence((2, 4), max_len=min(7, width - 4)) for _ in range(2)]
            trial = ListBlock(ordered, block.items, (self.rng.randrange(len(block.items)), subs))
            if trial.height(self.grid) <= max_rows:
                block = trial
        return block

    def display_math(self, max_rows: int) -> DisplayMath | None:
        tex, _ = self.equation(display=True)
        height = 2 if "frac" in tex or "sqrt" in tex else 1
        return DisplayMath(tex, height) if height <= max_rows else None

    def table(self, max_rows: int) -> TableBlock | None:
        """A table of 3–4 columns and 2–5 rows under one heading row, with a row span in its first column, a column
        span in a body row or a heading over two columns (each sometimes), every cell's text distinct."""
        if max_rows < 3:
            return None
        for _ in range(30):
            block = self._table_once(min(max_rows, 6))
            if block is not None and sum(block.widths) <= self.grid.text_cols + 1:
                return block
        return None

    def _cell_text(self, kind: str, used: set[str]) -> str:
        while True:
            text = self.vocab.number(self.rng, self.rng.choice((3, 4))) if kind == "number" else \
                self.vocab.word(self.rng, 5, 3)
            if text not in used:
                used.add(text)
                return text

    def _table_once(self, max_rows: int) -> TableBlock | None:
        rng = self.rng
        n_cols, n_body = rng.choice((3, 3, 4)), rng.randint(2, max_rows - 1)
        used: set[str] = set()
        kinds = ["word"] + [rng.choice(("number", "number", "word")) for _ in range(n_cols - 1)]
        head = [Cell(self._cell_text("word", used).capitalize(), header=True) for _ in range(n_cols)]
        labels_are_headings = rng.random() < 0.4
        body = [[Cell(self._cell_text(kinds[c], used), header=labels_are_headings and c == 0) for c in range(n_cols)]
                for _ in range(n_body)]
        if n_body >= 3 and rng.random() < 0.5:  # a label over two rows
            r = rng.randrange(n_body - 1)
            body[r][0].rowspan = 2
            body[r + 1] = body[r + 1][1:]
        if rng.random() < 0.35:  # one cell over two columns of a body row
            r = rng.randrange(n_body)
            row = body[r]
            first = len(row) - n_cols + 1  # the row's first data cell (a row under a row span has no label)
            c = rng.randrange(first, len(row) - 1) if len(row) - 1 > first else None
            if c is not None:
                row[c] = Cell(self._cell_text("word", used), colspan=2)
                del row[c + 1]
        elif rng.random() < 0.5:  # a heading over two columns
            c = rng.randrange(1, n_cols - 1)
            head[c] = Cell(self._cell_text("word", used).capitalize(), header=True, colspan=2)
            del head[c + 1]
        block = TableBlock([head] + body, [0] * n_cols, 1, rng.choice(("plain", "lined", "ruled")))
        return self._fit_widths(block)

    @staticmethod
    def _fit_widths(block: TableBlock) -> TableBlock:
        widths = block.widths
        placed = block.placed()
        for row in placed:
            for c, cell in row:
                if cell.colspan == 1:
                    widths[c] = max(widths[c], len(cell.text) + 1)
        for row in placed:
            for c, cell in row:
                if cell.colspan > 1:
                    short = len(cell.text) + 1 - sum(widths[c:c + cell.colspan])
                    widths[c + cell.colspan - 1] += max(0, short)
        return block

    def columns(self, max_rows: int, markers: list[str], gap: int) -> Columns | None:
        """Two columns of whole paragraphs (1–2 sentences of words of 3+ letters), broken into lines of the column's
        width, split between the columns as evenly as the paragraphs allow; ``markers`` go on words of the text;
        ``gap`` blank lines between two paragraphs of a column (the page's)."""
        width = self.grid.column_cells
        paragraphs: list[list[Tok]] = []
        for _ in range(self.rng.randint(3, 5) * self.grid.text_rows // 14):
            tokens: list[Tok] = []
            for _ in range(self.rng.randint(1, 2)):
                tokens += self.sentence((3, 6), max_len=min(8, width - 2), min_len=3)
            paragraphs.append(tokens)
        for n, marker in enumerate(markers):
            self.marker_sentence_tokens(paragraphs[n % len(paragraphs)], marker)
        broken = [wrap(p, width) for p in paragraphs]
        best = None
        for k in range(1, len(broken)):
            block = Columns(broken[:k], broken[k:], gap)
            if best is None or block.height(self.grid) < best.height(self.grid):
                best = block
        while best is not None and best.height(self.grid) > max_rows and len(best.left) + len(best.right) > 2:
            best = Columns(best.left[:-1] if len(best.left) > len(best.right) else best.left,
                           best.right if len(best.left) > len(best.right) else best.right[:-1], gap)
        return best if best is not None and best.height(self.grid) <= max_rows else None

    # ---- furniture -----------------------------------------------------------------------------------------

    def furniture(self, spec: PageSpec) -> None:
        """A running head (a title, sometimes a word or number at the right) and a footer (a page number at the
        right, sometimes a few words at the left)."""
        rng, cols = self.rng, self.grid.text_cols
        title = self.vocab.title(rng, 2, max_len=min(7, (cols - 2) // 2 - 1))
        spec.header = [title]
        right = self.vocab.word(rng, 6, 3).capitalize() if rng.random() < 0.5 else self.vocab.number(rng, 4)
        if rng.random() < 0.5 and len(title) + 2 + len(right) <= cols:
            spec.header.append(right)
        n = rng.randint(1, 60)
        number = rng.choice(PAGE_NUMBER_FORMATS).format(n=n, m=n + rng.randint(0, 40))
        spec.footer = [number]
        left = self.vocab.title(rng, rng.randint(1, 2), max_len=6)
        if rng.random() < 0.5 and len(left) + 2 + len(number) <= cols:
            spec.footer.insert(0, left)

    # ---- pages ---------------------------------------------------------------------------------------------

    def fits(self, spec: PageSpec, block: Block | None) -> bool:
        return block is not None and spec.used_rows(self.grid, spec.blocks + [block]) <= spec.body_rows(self.grid)

    def room(self, spec: PageSpec) -> int:
        """Lines left for one more block (after its blank line)."""
        used = spec.used_rows(self.grid)
        return spec.body_rows(self.grid) - used - (spec.gap if spec.blocks else 0)

    def add(self, spec: PageSpec, block: Block | None) -> bool:
        if self.fits(spec, block):
            spec.blocks.append(block)
            return True
        return False

    def compose(self, kind: str, rng: random.Random) -> PageSpec:
        """One page of ``kind``, drawn with ``rng``: a running head and footer (always on a report, else at
        FURNITURE_P), the kind's blocks, then paragraphs while one fits (not after columns and their footnotes)."""
        self.rng = rng
        spec = PageSpec(kind, gap=1 if rng.random() < 0.7 else 0)
        if kind == "report" or rng.random() < FURNITURE_P:
            self.furniture(spec)
        getattr(self, f"_{kind}")(spec)
        if kind not in ("columns", "report"):  # text after the kind's blocks while a paragraph fits
            self._paragraphs(spec, [], 4 * self.grid.text_rows)
        return spec

    def _paragraphs(self, spec: PageSpec, markers: list[str], most: int, reserve: int = 0) -> None:
        """Up to ``most`` paragraphs while one fits (``reserve`` lines kept free below them); the first of
        ``markers`` goes on a word of one of them, sometimes, and leaves the list when placed."""
        for _ in range(most):
            room = self.room(spec) - reserve
            marker = markers[0] if markers and self.rng.random() < 0.6 else ""
            block = self.paragraph(room, marker=marker) if room >= 1 else None
            if not self.add(spec, block):
                return
            if marker and any(t.marker == marker for t in block.tokens):
                markers.pop(0)

    def _report(self, spec: PageSpec) -> None:
        """A heading, paragraphs (sometimes a second heading between them) to the foot of the page, and a footnote
        under them when its marker found a word."""
        self.add(spec, self.heading())
        notes = Footnotes([("1", self.sentence((3, 5), max_len=8))] if self.rng.random() < 0.5 else [])
        reserve = notes.height(self.grid) + spec.gap if notes.notes else 0
        markers = [marker for marker, _ in notes.notes]
        self._paragraphs(spec, markers, 2, reserve)
        if self.rng.random() < 0.3:
            heading = self.heading(2)
            if self.room(spec) - reserve >= 3:
                self.add(spec, heading)
        self._paragraphs(spec, markers, 4 * self.grid.text_rows, reserve)
        if notes.notes and not markers:
            self.add(spec, notes)

    def _table(self, spec: PageSpec) -> None:
        """A sentence or two, the table, a sentence (the text around a table gives its order tests)."""
        self.add(spec, self.paragraph(2, sentences=(1, 2)))
        if not self.add(spec, self.table(self.room(spec) - 2 - spec.gap)):
            self.add(spec, self.table(self.room(spec)))
        self.add(spec, self.paragraph(self.room(spec), sentences=(1, 1)))

    def _list(self, spec: PageSpec) -> None:
        self.add(spec, self.heading() if self.rng.random() < 0.5 else self.paragraph(2, sentences=(1, 1)))
        self.add(spec, self.list_block(self.room(spec)))
        self.add(spec, self.paragraph(self.room(spec), sentences=(1, 1)))

    def _columns(self, spec: PageSpec) -> None:
        if self.rng.random() < 0.5:
            self.add(spec, self.heading(2))
        markers = ["1", "2"][:self.rng.choice((1, 1, 2))]
        notes = Footnotes([(m, self.sentence((3, 5), max_len=8)) for m in markers])
        room = self.room(spec) - notes.height(self.grid) - spec.gap
        block = self.columns(room, markers, spec.gap) if room >= 4 else None
        if block is None:
            block = self.columns(self.room(spec), [], spec.gap)
            notes = Footnotes([])
        if self.add(spec, block):
            placed = {t.marker for side in (block.left, block.right) for p in side for line in p for t in line}
            notes.notes = [n for n in notes.notes if n[0] in placed]
            if notes.notes:
                self.add(spec, notes)

    def _math(self, spec: PageSpec) -> None:
        """Text, a display equation, a sentence with inline math, more text, maybe another display equation (a
        sentence holding math gives no present or order test, so plain sentences stand around it)."""
        self.add(spec, self.paragraph(min(3, self.room(spec))))
        self.add(spec, self.display_math(self.room(spec)))
        self.add(spec, self.math_paragraph(self.room(spec)))
        self.add(spec, self.paragraph(min(2, self.room(spec)), sentences=(1, 1)))
        if self.rng.random() < 0.5:
            self.add(spec, self.display_math(self.room(spec)))

    def _mixed(self, spec: PageSpec) -> None:
        if self.rng.random() < 0.5:
            self.add(spec, self.heading())
        makers = [lambda room: self.paragraph(min(room, 3)), self.table, self.list_block,
                  lambda room: self.display_math(room), self.math_paragraph]
        for pick in self.rng.sample(range(len(makers)), 3):
            room = self.room(spec)
            if room < 1:
                break
            self.add(spec, makers[pick](room))
