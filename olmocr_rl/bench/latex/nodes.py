"""The parse tree of an equation, and the glyph the typesetter places.

The parser turns LaTeX into a list of :data:`Node`; the typesetter turns nodes into boxes of
:data:`Glyph`. Nodes are plain mutable dataclasses (the parser fills some fields after creation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .symbols import ORD

__all__ = [
    "Accent",
    "Array",
    "Cell",
    "Frac",
    "Glyph",
    "Group",
    "LeftRight",
    "Node",
    "Op",
    "Scripts",
    "Space",
    "Sqrt",
    "Stack",
    "StyleSwitch",
    "Sym",
    "Tag",
    "Text",
    "TextChunk",
]


Glyph = tuple[str, float, float]
"""A drawn character and its centre, as the plain tuple ``(char, x, y)``: x and y in em, relative to
its box's left end on the baseline, y up. Plain tuples, not a named tuple: glyphs are made, and
shifted at every level of nesting, on the typesetter's hottest path; readers unpack them."""


@dataclass
class Sym:
    """One math symbol (or a short run drawn as one, e.g. primes or ``\\ne``)."""

    char: str
    cls: str = ORD
    text_mode: bool = False


@dataclass
class Text:
    """Text-mode material: strings, and math groups from ``$…$`` inside the text."""

    chunks: list[TextChunk]


@dataclass
class Space:
    """Horizontal space (em at display size), no glyph."""

    width: float


@dataclass
class Group:
    """A braced group laid out as one row; ``cls`` overrides its class (``\\mathop{…}`` etc.)."""

    children: list[Node]
    cls: str | None = None


@dataclass
class Scripts:
    """A base with a subscript and/or superscript; ``limits`` None: as the base says."""

    base: Node
    sub: Node | None = None
    sup: Node | None = None
    limits: bool | None = None


@dataclass
class Frac:
    """A fraction (or binomial, with ``bar`` off and delimiters); ``style`` None: by context."""

    num: Node
    den: Node
    style: str | None = None
    bar: bool = True
    left: str = ""
    right: str = ""


@dataclass
class Sqrt:
    """A radical, with an optional index."""

    body: Node
    index: Node | None = None


@dataclass
class Accent:
    """An accent over (or a rule under) its body; ``char`` None when KaTeX draws no glyph."""

    body: Node
    char: str | None
    dy: float
    under: bool = False


@dataclass
class LeftRight:
    """``\\left…\\right`` with its drawn delimiters ("" for none)."""

    left: str
    body: list[Node]
    right: str


@dataclass
class Op:
    """A big operator (``symbol``: one character such as ∑) or a named one (lim)."""

    text: str
    limits: bool  # takes limits in display style
    symbol: bool


Cell = list["Node"]


@dataclass
class Array:
    """Rows of cells (environments, ``\\substack``, top-level line breaks)."""

    rows: list[list[Cell]]
    left: str
    right: str
    col_gap: float
    row_step: float
    display: bool
    align_pairs: bool


@dataclass
class Stack:
    """A body with material over and/or under it (``\\overset``, braces, extensible arrows)."""

    body: Node
    over: Node | None = None
    under: Node | None = None
    brace: bool = False


@dataclass
class StyleSwitch:
    """``\\displaystyle`` and friends: the style of what follows in the row."""

    style: str


@dataclass
class Tag:
    """``\\tag{…}``: text set against the equation's right end."""

    chunks: list[TextChunk]


Node = Union[Sym, Text, Space, Group, Scripts, Frac, Sqrt, Accent, LeftRight, Op, Array, Stack, StyleSwitch, Tag]
TextChunk = Union[str, Node]
