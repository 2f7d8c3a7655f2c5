"""Browser-free equation comparison: a small TeX-like layout of glyphs, and olmOCR-bench's glyph
neighbour matching on it.

Why this approach. olmOCR-bench renders both equations with KaTeX in Chromium and passes when the
reference's MathML is contained in the candidate's or, failing that, when every reference glyph can
be given its own candidate glyph with the same character whose nearest neighbours up, down, left
and right (5 px tolerance on the other axis, 24 px font) carry the same characters. In practice the
glyph matching decides: it ignores fonts (``\\mathcal{I}`` ≡ ``I``), spacing commands, braces,
``\\left``/``\\right`` and synonyms (``\\to`` ≡ ``\\rightarrow``), and passes when the reference sits
inside a larger candidate. A canonical LaTeX string or MathML (latex2mathml) comparison gets several
of these wrong, so this package reproduces the glyph picture instead, without a browser:

1. :mod:`.parser`, with the command table of :mod:`.commands`: LaTeX → a tree of :mod:`.nodes`
   (symbols, text, groups, scripts, fractions, roots, accents, ``\\left…\\right``, big operators,
   environments). Command → character and math class (ord, bin, rel, open, close, punct, op) come
   from the Unicode math table shipped with the ``latex2mathml`` dependency (:mod:`.symbols`), with
   KaTeX's choices where they differ (``-`` → −, ``*`` → ∗, ``|`` → ∣, ``'`` → ′ as a superscript,
   …). Commands KaTeX does not know (``\\label``, ``\\hfill``, ``eqnarray``, …) and unbalanced
   groups are errors, as they are for KaTeX, and an equation that does not parse matches nothing.
2. :mod:`.typeset`, driven by ``layout`` (:mod:`.equation`): TeX's rules (TeXbook appendix G, as
   KaTeX implements them) place each glyph — style and size changes (display → text → script →
   scriptscript), script shifts (``sup1``/``sub1``/…, the character-box exception), fraction and
   limit placement, matrix/array rows and columns, inter-atom spacing — using TeX's font parameters
   and approximate glyph widths and heights (:mod:`.metrics`; Times-like widths: KaTeX's render
   page falls back to system fonts).
3. ``equation_contains`` (:mod:`.matching`): neighbours per glyph with the same 5 px tolerance (in
   em: 5 / 29.04; :mod:`.neighbours`), then olmOCR-bench's backtracking assignment, in the same
   order, with a step budget.

Known differences from KaTeX (cases where a verdict can differ):

- Horizontal positions use approximate widths, so whether two glyphs in *different* rows are
  vertically aligned within 5 px (numerator over denominator, limits over operators, matrix rows)
  can differ when the two sides differ in width by about a character; same-row order never does.
- Vertical positions follow TeX's metrics with approximate glyph heights and depths; a script on a
  tall base (e.g. after ``\\right)``) may sit at a slightly different height than KaTeX's.
- Accent glyphs (ˆ ˉ ˙ ˜ …) are placed over the base's centre; KaTeX's skew can put them a pixel
  either side (which changes their left/right neighbours).
- The MathML-containment shortcut is not reproduced; it only matters when glyph matching fails but
  the MathML of the reference occurs verbatim inside the candidate's, which needs the same glyphs.
- KaTeX's error set is approximated by the commands known here (the Unicode math table plus the
  structural commands of :mod:`.commands`); an exotic command KaTeX knows but this table lacks fails to parse.
- Exotic constructs (``\\genfrac`` with custom delimiters, ``\\raisebox``, ``\\rule``, CD diagrams)
  are laid out as plain rows.

Bounds: equations longer than ``MAX_EQUATION_CHARS`` or nesting deeper than ``MAX_DEPTH`` do not
parse; neighbour search is O(n log n) in glyphs; the assignment search stops after
``MAX_MATCH_STEPS`` steps (counted as no match).
"""

from .equation import Layout, layout
from .errors import MAX_DEPTH, MAX_EQUATION_CHARS, LatexError
from .matching import MAX_MATCH_STEPS, equation_contains, glyph_match_fraction
from .neighbours import TOLERANCE_EM
from .nodes import Glyph
from .parser import syntax_problem, tokenize

__all__ = [
    "Glyph",
    "Layout",
    "LatexError",
    "layout",
    "syntax_problem",
    "equation_contains",
    "glyph_match_fraction",
    "tokenize",
    "TOLERANCE_EM",
    "MAX_DEPTH",
    "MAX_EQUATION_CHARS",
    "MAX_MATCH_STEPS",
]
