"""The parse error and the size limits shared by the parser and the typesetter."""

from __future__ import annotations

__all__ = ["LatexError", "MAX_EQUATION_CHARS", "MAX_DEPTH"]

MAX_EQUATION_CHARS = 20_000
MAX_DEPTH = 100


class LatexError(ValueError):
    """The LaTeX does not parse (KaTeX would refuse to render it)."""
