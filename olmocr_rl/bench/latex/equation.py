"""An equation laid out: :func:`layout` parses and typesets LaTeX into a :class:`Layout`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import LatexError
from .neighbours import Neighbours, compute_neighbours
from .nodes import Glyph, Tag
from .parser import parse, tokenize
from .rows import ROW_SEPARATOR, row_keys
from .typeset import Typesetter

__all__ = ["Layout", "layout"]

_INVISIBLE = ("\u200b", " ", "\u00a0")


@dataclass
class Layout:
    """An equation's glyphs (``(char, x, y)``: characters with centre positions, em, y up) and,
    lazily, each glyph's nearest neighbour up, down, left and right. ``error`` is set (and there
    are no glyphs) when the LaTeX does not parse."""

    glyphs: tuple[Glyph, ...]
    error: str | None = None
    key: str = ""  # the equation's tokens, whitespace dropped
    rows: frozenset[str] = frozenset()  # keys of every row inside it (see rows.row_keys)
    _neighbours: tuple[Neighbours, ...] | None = field(default=None, repr=False, compare=False)
    _counts: Counter[str] | None = field(default=None, repr=False, compare=False)
    _by_char: dict[str, list[int]] | None = field(default=None, repr=False, compare=False)

    def counts(self) -> Counter[str]:
        """How many glyphs of each character."""
        if self._counts is None:
            self._counts = Counter(char for char, _, _ in self.glyphs)
        return self._counts

    def by_char(self) -> dict[str, list[int]]:
        """Character -> indices of its glyphs, in order."""
        if self._by_char is None:
            index: dict[str, list[int]] = {}
            for i, (char, _, _) in enumerate(self.glyphs):
                index.setdefault(char, []).append(i)
            self._by_char = index
        return self._by_char

    def neighbours(self) -> tuple[Neighbours, ...]:
        """Per glyph: (up, down, left, right) glyph indices or None (olmOCR-bench's rule)."""
        if self._neighbours is None:
            self._neighbours = compute_neighbours(self.glyphs)
        return self._neighbours


@lru_cache(maxsize=4096)
def layout(source: str) -> Layout:
    """Lay out ``source`` in display style; a source that does not parse gives an empty layout
    with ``error`` set. Cached (equations repeat across tests and completions)."""
    try:
        nodes = parse(source)
        tags = [node for node in nodes if isinstance(node, Tag)]
        typesetter = Typesetter()
        box = typesetter.row([node for node in nodes if not isinstance(node, Tag)], "D")
        for tag in tags:
            # KaTeX positions a tag absolutely against the right end of the equation: its glyphs
            # end where the equation ends, on the same baseline (so they overlap it).
            tag_box = typesetter.text(tag.chunks, "D")
            box.glyphs.extend(tag_box.shifted(box.width - tag_box.width, 0.0))
    except LatexError as error:
        return Layout(glyphs=(), error=str(error))
    except RecursionError:
        return Layout(glyphs=(), error="nesting too deep")
    glyphs = tuple(glyph for glyph in box.glyphs if glyph[0] not in _INVISIBLE)
    tokens = [token for token in tokenize(source) if not token.isspace()]
    return Layout(glyphs=glyphs, key=ROW_SEPARATOR.join(tokens), rows=row_keys(tokens))
