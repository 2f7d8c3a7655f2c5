"""Browser-free equation comparison: a small TeX-like layout of glyphs, and olmOCR-bench's glyph
neighbour matching on it.

Why this approach. olmOCR-bench renders both equations with KaTeX in Chromium and passes when the
reference's MathML is contained in the candidate's or, failing that, when every reference glyph can
be given its own candidate glyph with the same character whose nearest neighbours up, down, left
and right (5 px tolerance on the other axis, 24 px font) carry the same characters. In practice the
glyph matching decides: it ignores fonts (``\\mathcal{I}`` ≡ ``I``), spacing commands, braces,
``\\left``/``\\right`` and synonyms (``\\to`` ≡ ``\\rightarrow``), and passes when the reference sits
inside a larger candidate. A canonical LaTeX string or MathML (latex2mathml) comparison gets several
of these wrong, so this module reproduces the glyph picture instead, without a browser:

1. ``tokenize`` + ``_Parser``: LaTeX → a tree (symbols, text, groups, scripts, fractions, roots,
   accents, ``\\left…\\right``, big operators, environments). Command → character and math class
   (ord, bin, rel, open, close, punct, op) come from the Unicode math table shipped with the
   ``latex2mathml`` dependency, with KaTeX's choices where they differ (``-`` → −, ``*`` → ∗,
   ``|`` → ∣, ``'`` → ′ as a superscript, …). Commands KaTeX does not know (``\\label``,
   ``\\hfill``, ``eqnarray``, …) and unbalanced groups are errors, as they are for KaTeX, and an
   equation that does not parse matches nothing.
2. ``layout``: TeX's rules (TeXbook appendix G, as KaTeX implements them) place each glyph — style
   and size changes (display → text → script → scriptscript), script shifts (``sup1``/``sub1``/…,
   the character-box exception), fraction and limit placement, matrix/array rows and columns,
   inter-atom spacing — using TeX's font parameters and approximate glyph widths and heights
   (Times-like widths: KaTeX's render page falls back to system fonts).
3. ``equation_contains``: neighbours per glyph with the same 5 px tolerance (in em: 5 / 29.04), then
   olmOCR-bench's backtracking assignment, in the same order, with a step budget.

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
  structural commands below); an exotic command KaTeX knows but this table lacks fails to parse.
- Exotic constructs (``\\genfrac`` with custom delimiters, ``\\raisebox``, ``\\rule``, CD diagrams)
  are laid out as plain rows.

Bounds: equations longer than ``MAX_EQUATION_CHARS`` or nesting deeper than ``MAX_DEPTH`` do not
parse; neighbour search is O(n log n) in glyphs; the assignment search stops after
``MAX_MATCH_STEPS`` steps (counted as no match).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

__all__ = [
    "Layout",
    "LatexError",
    "layout",
    "syntax_problem",
    "equation_contains",
    "TOLERANCE_EM",
    "MAX_EQUATION_CHARS",
    "MAX_MATCH_STEPS",
]

TOLERANCE_EM = 5.0 / 29.04  # olmOCR-bench's 5 px at KaTeX's 1.21 × 24 px font
MAX_EQUATION_CHARS = 20_000
MAX_DEPTH = 100
MAX_MATCH_STEPS = 20_000
_CENTER = 0.345  # a glyph box's centre sits this far above its baseline, in units of its size
_VLIST_END = 2.0 / 29.04  # KaTeX's vlists end in a zero-width-space span drawn 2 px wide


class LatexError(ValueError):
    """The LaTeX does not parse (KaTeX would refuse to render it)."""


# =================================================================================================
# Symbols
# =================================================================================================

_ORD, _OP, _BIN, _REL, _OPEN, _CLOSE, _PUNCT, _INNER = "ord", "op", "bin", "rel", "open", "close", "punct", "inner"

_CLASS_OF_UNIMATH = {
    "mathbin": _BIN,
    "mathrel": _REL,
    "mathopen": _OPEN,
    "mathclose": _CLOSE,
    "mathpunct": _PUNCT,
    "mathop": _OP,
}


@lru_cache(maxsize=1)
def _symbol_table() -> dict[str, tuple[str, str]]:
    """LaTeX command -> (character, math class), from latex2mathml's copy of unimathsymbols.txt,
    then KaTeX's own choices layered on top."""
    from latex2mathml.symbols_parser import SYMBOLS_FILE

    exact: dict[str, tuple[str, str]] = {}
    equivalent: dict[str, tuple[str, str]] = {}
    with open(SYMBOLS_FILE, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("#"):
                continue
            columns = line.rstrip("\n").split("^")
            if len(columns) < 8:
                continue
            try:
                char = chr(int(columns[0], 16))
            except ValueError:
                continue
            cls = _CLASS_OF_UNIMATH.get(columns[5], _ORD)
            command = columns[2]
            if command.startswith("\\") and command not in exact:
                exact[command] = (char, cls)
            for alias in re.findall(r"=\s*(\\[A-Za-z]+)\b(?!\{)", columns[7]):
                equivalent.setdefault(alias, (char, cls))
    table = {**equivalent, **exact}
    table.update(_KATEX_SYMBOLS)
    return table


# KaTeX's rendering where the Unicode table differs, and synonyms KaTeX draws with one glyph.
_KATEX_SYMBOLS: dict[str, tuple[str, str]] = {
    "\\to": ("→", _REL),
    "\\gets": ("←", _REL),
    "\\le": ("≤", _REL),
    "\\ge": ("≥", _REL),
    "\\ne": ("\ue020=", _REL),  # KaTeX: \not= — an overlay slash glyph, then "="
    "\\neq": ("\ue020=", _REL),
    "\\cdot": ("⋅", _BIN),
    "\\ast": ("∗", _BIN),
    "\\vert": ("∣", _ORD),
    "\\lvert": ("∣", _OPEN),
    "\\rvert": ("∣", _CLOSE),
    "\\mid": ("∣", _REL),
    "\\Vert": ("∥", _ORD),
    "\\lVert": ("∥", _OPEN),
    "\\rVert": ("∥", _CLOSE),
    "\\|": ("∥", _ORD),
    "\\parallel": ("∥", _REL),
    "\\{": ("{", _OPEN),
    "\\}": ("}", _CLOSE),
    "\\lbrace": ("{", _OPEN),
    "\\rbrace": ("}", _CLOSE),
    "\\lbrack": ("[", _OPEN),
    "\\rbrack": ("]", _CLOSE),
    "\\langle": ("⟨", _OPEN),
    "\\rangle": ("⟩", _CLOSE),
    "\\lceil": ("⌈", _OPEN),
    "\\rceil": ("⌉", _CLOSE),
    "\\lfloor": ("⌊", _OPEN),
    "\\rfloor": ("⌋", _CLOSE),
    "\\colon": (":", _PUNCT),
    "\\ldots": ("…", _INNER),
    "\\dotsc": ("…", _INNER),
    "\\dotso": ("…", _INNER),
    "\\cdots": ("⋯", _INNER),
    "\\dotsb": ("⋯", _INNER),
    "\\dotsm": ("⋯", _INNER),
    "\\dotsi": ("⋯", _INNER),
    "\\vdots": ("⋮", _ORD),
    "\\ddots": ("⋱", _INNER),
    "\\sim": ("∼", _REL),
    "\\setminus": ("∖", _BIN),
    "\\backslash": ("\\", _ORD),
    "\\emptyset": ("∅", _ORD),
    "\\varnothing": ("∅", _ORD),
    "\\lnot": ("¬", _ORD),
    "\\neg": ("¬", _ORD),
    "\\land": ("∧", _BIN),
    "\\wedge": ("∧", _BIN),
    "\\lor": ("∨", _BIN),
    "\\vee": ("∨", _BIN),
    "\\iff": ("⟺", _REL),
    "\\implies": ("⟹", _REL),
    "\\impliedby": ("⟸", _REL),
    "\\#": ("#", _ORD),
    "\\$": ("$", _ORD),
    "\\%": ("%", _ORD),
    "\\&": ("&", _ORD),
    "\\_": ("_", _ORD),
    "\\lt": ("<", _REL),
    "\\gt": (">", _REL),
    "\\prime": ("′", _ORD),
    "\\degree": ("°", _ORD),
    "\\infty": ("∞", _ORD),
    "\\surd": ("√", _ORD),
}

# Plain characters in math mode as KaTeX draws them.
_MATH_CHARS = {"-": "−", "*": "∗", "|": "∣", "`": "‘"}
_CHAR_CLASS = {}
for _ch in "+−±∓×÷⋅∗∘∙∪∩∧∨⊕⊗⊖⊙∖⋆⊎⊔⊓≀⨿":
    _CHAR_CLASS[_ch] = _BIN
for _ch in "=<>≤≥≠≈≡∼≃≅∈∉∋⊂⊃⊆⊇→←↔⇒⇐⇔↦∝∣∥⊥≪≫≺≻⪯⪰:≐≍⊢⊣⊨⟶⟵⟹⟸⟺≲≳":
    _CHAR_CLASS[_ch] = _REL
for _ch in "([{⟨⌈⌊":
    _CHAR_CLASS[_ch] = _OPEN
for _ch in ")]}⟩⌉⌋!?":
    _CHAR_CLASS[_ch] = _CLOSE
for _ch in ",;":
    _CHAR_CLASS[_ch] = _PUNCT

# Named operators: (text, takes limits in display style).
_FUNCTIONS = {
    **{name: False for name in (
        "arcsin arccos arctan arctg arcctg arg ch cos cosec cosh cot cotg coth csc ctg cth deg dim exp hom "
        "ker lg ln log sec sin sinh sh tan tanh tg th"
    ).split()},
    **{name: True for name in "det gcd inf lim liminf limsup max min Pr sup injlim projlim".split()},
}
_FUNCTION_TEXT = {"liminf": "liminf", "limsup": "limsup", "injlim": "injlim", "projlim": "projlim"}

# Big operators: character, limits in display style.
_BIG_OPERATORS = {
    "\\sum": ("∑", True),
    "\\prod": ("∏", True),
    "\\coprod": ("∐", True),
    "\\bigcup": ("⋃", True),
    "\\bigcap": ("⋂", True),
    "\\bigvee": ("⋁", True),
    "\\bigwedge": ("⋀", True),
    "\\bigoplus": ("⨁", True),
    "\\bigotimes": ("⨂", True),
    "\\bigodot": ("⨀", True),
    "\\biguplus": ("⨄", True),
    "\\bigsqcup": ("⨆", True),
    "\\int": ("∫", False),
    "\\iint": ("∬", False),
    "\\iiint": ("∭", False),
    "\\oint": ("∮", False),
    "\\oiint": ("∯", False),
    "\\oiiint": ("∰", False),
    "\\intop": ("∫", True),
    "\\smallint": ("∫", False),
}

# Accents: character drawn (None: drawn as a rule or SVG, no glyph), vertical offset of its box.
_ACCENTS = {
    "\\hat": ("^", 0.0),
    "\\check": ("ˇ", 0.0),
    "\\acute": ("ˊ", 0.0),
    "\\grave": ("ˋ", 0.0),
    "\\dot": ("˙", 0.0),
    "\\ddot": ("¨", 0.0),
    "\\dddot": ("…", 0.0),
    "\\breve": ("˘", 0.0),
    "\\bar": ("ˉ", 0.0),  # drawn left-aligned with its base in KaTeX (see accent())
    "\\mathring": ("˚", 0.0),
    "\\tilde": ("~", 0.365),
    "\\vec": (None, 0.0),
    "\\widehat": (None, 0.0),
    "\\widetilde": (None, 0.0),
    "\\widecheck": (None, 0.0),
    "\\overline": (None, 0.0),
    "\\underline": (None, 0.0),
    "\\overrightarrow": (None, 0.0),
    "\\overleftarrow": (None, 0.0),
    "\\overleftrightarrow": (None, 0.0),
    "\\underrightarrow": (None, 0.0),
    "\\underleftarrow": (None, 0.0),
    "\\underleftrightarrow": (None, 0.0),
    "\\utilde": (None, 0.0),
    "\\overgroup": (None, 0.0),
    "\\undergroup": (None, 0.0),
    "\\Overrightarrow": (None, 0.0),
    "\\overlinesegment": (None, 0.0),
    "\\underlinesegment": (None, 0.0),
}
_BRACES = {"\\overbrace": True, "\\underbrace": False}
_INTEGRALS = set("∫∬∭∮∯∰")

_FONT_COMMANDS = {
    "\\mathrm", "\\mathit", "\\mathbf", "\\mathsf", "\\mathtt", "\\mathcal", "\\mathscr", "\\mathbb",
    "\\mathfrak", "\\mathnormal", "\\boldsymbol", "\\bm", "\\bold", "\\Bbb", "\\mathbold", "\\pmb",
    "\\mathsfit", "\\symbf", "\\symit", "\\symrm", "\\bf", "\\it", "\\rm", "\\sf", "\\tt", "\\cal",
    "\\frak", "\\Bbb",
}
_TEXT_COMMANDS = {"\\text", "\\textrm", "\\textbf", "\\textit", "\\textsf", "\\texttt", "\\textnormal", "\\textup", "\\textmd", "\\mbox", "\\hbox", "\\emph", "\\textsl", "\\textsc"}
_CLASS_COMMANDS = {"\\mathord": _ORD, "\\mathop": _OP, "\\mathbin": _BIN, "\\mathrel": _REL, "\\mathopen": _OPEN, "\\mathclose": _CLOSE, "\\mathpunct": _PUNCT, "\\mathinner": _INNER}
_OLD_FONT_SWITCHES = {"\\bf", "\\it", "\\rm", "\\sf", "\\tt", "\\cal", "\\frak", "\\Bbb", "\\bold", "\\boldmath", "\\unboldmath", "\\normalfont", "\\em"}
_SPACES = {
    "\\,": 3 / 18, "\\thinspace": 3 / 18, "\\:": 4 / 18, "\\>": 4 / 18, "\\medspace": 4 / 18, "\\;": 5 / 18,
    "\\thickspace": 5 / 18, "\\!": -3 / 18, "\\negthinspace": -3 / 18, "\\negmedspace": -4 / 18,
    "\\negthickspace": -5 / 18, "\\quad": 1.0, "\\qquad": 2.0, "\\enspace": 0.5, "\\ ": 0.25, "\\space": 0.25,
    "\\nobreakspace": 0.25, "~": 0.25, "\\nobreak": 0.0, "\\allowbreak": 0.0, "\\enskip": 0.5,
    "\\relax": 0.0, "\\nonumber": 0.0, "\\notag": 0.0, "\\limits": 0.0, "\\nolimits": 0.0,
    "\\strut": 0.0, "\\mathstrut": 0.0,
}
_SPACE_WITH_ARGUMENT = {"\\hspace", "\\hspace*", "\\kern", "\\mkern", "\\hskip", "\\mskip", "\\mspace"}
_IGNORED_WITH_ARGUMENT = {"\\color": 1, "\\label": None, "\\vphantom": 1, "\\tag*": 1}
_COLOR_COMMANDS = {"\\textcolor": 2, "\\colorbox": 2, "\\fcolorbox": 3}
_DELIMITER_SIZES = {
    "\\big", "\\Big", "\\bigg", "\\Bigg", "\\bigl", "\\Bigl", "\\biggl", "\\Biggl", "\\bigr", "\\Bigr",
    "\\biggr", "\\Biggr", "\\bigm", "\\Bigm", "\\biggm", "\\Biggm",
}
_STYLE_SWITCHES = {"\\displaystyle": "D", "\\textstyle": "T", "\\scriptstyle": "S", "\\scriptscriptstyle": "SS"}
_ENVIRONMENTS = {
    # name: (left delimiter, right delimiter, column gap em, row step em, cells in display style)
    "matrix": ("", "", 1.0, 1.2, False),
    "matrix*": ("", "", 1.0, 1.2, False),
    "pmatrix": ("(", ")", 1.0, 1.2, False),
    "pmatrix*": ("(", ")", 1.0, 1.2, False),
    "bmatrix": ("[", "]", 1.0, 1.2, False),
    "bmatrix*": ("[", "]", 1.0, 1.2, False),
    "Bmatrix": ("{", "}", 1.0, 1.2, False),
    "Bmatrix*": ("{", "}", 1.0, 1.2, False),
    "vmatrix": ("∣", "∣", 1.0, 1.2, False),
    "vmatrix*": ("∣", "∣", 1.0, 1.2, False),
    "Vmatrix": ("∥", "∥", 1.0, 1.2, False),
    "Vmatrix*": ("∥", "∥", 1.0, 1.2, False),
    "smallmatrix": ("", "", 0.6, 0.85, False),
    "array": ("", "", 1.0, 1.2, False),
    "darray": ("", "", 1.0, 1.2, True),
    "subarray": ("", "", 0.2, 0.85, False),
    "cases": ("{", "", 1.0, 1.44, False),
    "dcases": ("{", "", 1.0, 1.44, True),
    "rcases": ("", "}", 1.0, 1.44, False),
    "drcases": ("", "}", 1.0, 1.44, True),
    "aligned": ("", "", 0.0, 1.5, True),
    "align": ("", "", 0.0, 1.5, True),
    "align*": ("", "", 0.0, 1.5, True),
    "alignat": ("", "", 0.0, 1.5, True),
    "alignat*": ("", "", 0.0, 1.5, True),
    "alignedat": ("", "", 0.0, 1.5, True),
    "gathered": ("", "", 0.0, 1.5, True),
    "gather": ("", "", 0.0, 1.5, True),
    "gather*": ("", "", 0.0, 1.5, True),
    "split": ("", "", 0.0, 1.5, True),
    "multline": ("", "", 0.0, 1.5, True),
    "multline*": ("", "", 0.0, 1.5, True),
    "equation": ("", "", 0.0, 1.2, True),
    "equation*": ("", "", 0.0, 1.2, True),
    "CD": ("", "", 1.0, 1.5, True),
}
_ENV_WITH_SPEC = {"array", "darray", "subarray", "alignat", "alignat*", "alignedat"}
_ALIGN_ENVS = {"aligned", "align", "align*", "alignat", "alignat*", "alignedat", "split"}

# Commands with a glyph of their own that the Unicode table may lack or misclassify.
_EXTRA_COMMANDS = {
    "\\And": ("&", _BIN),
    "\\cdotp": ("⋅", _PUNCT),
    "\\ldotp": (".", _PUNCT),
    "\\mathellipsis": ("…", _INNER),
    "\\dotsc": ("…", _INNER),
    "\\hbar": ("ℏ", _ORD),
    "\\ell": ("ℓ", _ORD),
    "\\Box": ("□", _ORD),
    "\\square": ("□", _ORD),
    "\\checkmark": ("✓", _ORD),
    "\\bigstar": ("★", _ORD),
    "\\diamond": ("⋄", _BIN),
    "\\lvertneqq": ("≨", _REL),
}


# =================================================================================================
# Tree
# =================================================================================================


@dataclass
class _Sym:
    char: str
    cls: str = _ORD
    text_mode: bool = False


@dataclass
class _Text:
    chunks: list  # strings and nested nodes (math inside text via $…$ is rare; kept as rows)


@dataclass
class _Space:
    width: float


@dataclass
class _Group:
    children: list
    cls: str | None = None  # \mathop{…} etc. override the group's class


@dataclass
class _Scripts:
    base: object
    sub: object = None
    sup: object = None
    limits: bool | None = None  # None: as the base says


@dataclass
class _Frac:
    num: object
    den: object
    style: str | None = None  # None: by context; "D"/"T" for \dfrac/\tfrac
    bar: bool = True
    left: str = ""
    right: str = ""


@dataclass
class _Sqrt:
    body: object
    index: object = None


@dataclass
class _Accent:
    body: object
    char: str | None
    dy: float
    under: bool = False


@dataclass
class _LeftRight:
    left: str
    body: list
    right: str
    middles: list = field(default_factory=list)


@dataclass
class _Op:
    text: str  # one character (∑) or a name (lim)
    limits: bool  # takes limits in display style
    symbol: bool


@dataclass
class _Array:
    rows: list  # list of rows, each a list of cells (lists of nodes)
    left: str
    right: str
    col_gap: float
    row_step: float
    display: bool
    align_pairs: bool


@dataclass
class _Stack:
    body: object
    over: object = None
    under: object = None
    brace: bool = False


@dataclass
class _StyleSwitch:
    style: str


@dataclass
class _Tag:
    chunks: list


# =================================================================================================
# Tokenizer and parser
# =================================================================================================

_TOKEN = re.compile(r"\\[A-Za-z]+\*?|\\[^A-Za-z]|%[^\n]*|\s+|.", re.DOTALL)


def tokenize(source: str) -> list[str]:
    """LaTeX tokens: ``\\command`` (with a trailing ``*``), ``\\x``, whitespace runs, single chars;
    comments dropped."""
    return [token for token in _TOKEN.findall(source) if not token.startswith("%")]


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens = tokenize(source)
        self.pos = 0
        self.depth = 0

    # --- token helpers ---------------------------------------------------------------------------

    def _peek(self, skip_space: bool = True) -> str | None:
        pos = self.pos
        while skip_space and pos < len(self.tokens) and self.tokens[pos].isspace():
            pos += 1
        return self.tokens[pos] if pos < len(self.tokens) else None

    def _next(self, skip_space: bool = True) -> str | None:
        while skip_space and self.pos < len(self.tokens) and self.tokens[self.pos].isspace():
            self.pos += 1
        if self.pos >= len(self.tokens):
            return None
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def _expect(self, token: str) -> None:
        got = self._next()
        if got != token:
            raise LatexError(f"expected {token!r}, got {got!r}")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LatexError("nesting too deep")

    # --- arguments -------------------------------------------------------------------------------

    def _raw_group(self) -> str:
        """The text of a braced argument, unparsed (environment names, colours, dimensions)."""
        token = self._next()
        if token != "{":
            if token is None:
                raise LatexError("missing argument")
            return token
        depth, parts = 1, []
        while True:
            token = self._next(skip_space=False)
            if token is None:
                raise LatexError("unbalanced braces")
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
                if depth == 0:
                    return "".join(parts)
            parts.append(token)

    def _optional_raw(self) -> str | None:
        if self._peek() != "[":
            return None
        self._next()
        depth, parts = 0, []
        while True:
            token = self._next(skip_space=False)
            if token is None:
                raise LatexError("unterminated optional argument")
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
            elif token == "]" and depth == 0:
                return "".join(parts)
            parts.append(token)

    def _argument(self, text_mode: bool = False) -> object:
        """One argument: a braced group or a single token (a command counts as one)."""
        token = self._peek()
        if token is None:
            raise LatexError("missing argument")
        if token == "{":
            self._next()
            if text_mode:
                return _Text(self._text_until_close())
            return _Group(self._expression(stop={"}"}, closing="}"))
        if token in ("}", "&", "\\\\", "^", "_"):
            raise LatexError(f"missing argument before {token!r}")
        if token.startswith("\\") and not _is_argument_free(token):
            # KaTeX: "Got function '\\vec' with no arguments as argument to '\\dot'".
            raise LatexError(f"got function {token} with no arguments as an argument")
        if text_mode:
            self._next()
            return _Text([token])
        return self._atom()

    def _text_until_close(self) -> list:
        """Text-mode content up to the matching ``}``: characters, with nested groups and a few
        commands that print characters."""
        chunks: list = []
        self._enter()
        while True:
            token = self._next(skip_space=False)
            if token is None:
                raise LatexError("unbalanced braces in text")
            if token == "}":
                break
            if token == "{":
                chunks.extend(self._text_until_close())
            elif token == "$":
                math: list = []
                while self._peek(skip_space=False) not in ("$", None):
                    math.append(self._atom_or_scripts())
                if self._next() != "$":
                    raise LatexError("unterminated $ in text")
                chunks.append(_Group(math))
            elif token.startswith("\\"):
                if token in _TEXT_COMMANDS or token in _FONT_COMMANDS:
                    continue  # nested font/text switch: its group follows and is read as text
                if token in ("\\ ", "\\,", "\\;", "\\quad", "\\qquad", "~", "\\!", "\\:"):
                    chunks.append(" ")
                elif len(token) == 2:
                    chunks.append(token[1])
                else:
                    entry = _symbol_table().get(token) or _EXTRA_COMMANDS.get(token)
                    if entry is None:
                        raise LatexError(f"undefined control sequence {token}")
                    chunks.append(entry[0])
            elif token.isspace():
                chunks.append(" ")
            elif token == "~":
                chunks.append(" ")
            else:
                chunks.append(token)
        self.depth -= 1
        return chunks

    # --- expressions -----------------------------------------------------------------------------

    def parse(self) -> list:
        nodes = self._expression(stop=set())
        if self.pos < len(self.tokens) and self._peek() is not None:
            raise LatexError(f"unexpected {self._peek()!r}")
        return nodes

    def _expression(self, stop: set, closing: str | None = None) -> list:
        """Atoms up to (and consuming) ``closing``, or up to a token in ``stop`` (not consumed)."""
        self._enter()
        nodes: list = []
        over: tuple | None = None  # \over, \choose: (kind, numerator nodes)
        while True:
            token = self._peek()
            if token is None:
                if closing is not None:
                    raise LatexError(f"missing {closing!r}")
                break
            if closing is not None and token == closing:
                self._next()
                break
            if token in stop:
                break
            if token == "}":
                raise LatexError("unbalanced '}'")
            if token in ("\\over", "\\choose", "\\atop", "\\above"):
                self._next()
                if token == "\\above":
                    self._raw_group()
                over = (token, nodes)
                nodes = []
                continue
            if token in _STYLE_SWITCHES:
                self._next()
                nodes.append(_StyleSwitch(_STYLE_SWITCHES[token]))
                continue
            nodes.append(self._atom_or_scripts())
        self.depth -= 1
        if over is not None:
            kind, numerator = over
            frac = _Frac(_Group(numerator), _Group(nodes), bar=kind in ("\\over", "\\above"))
            if kind == "\\choose":
                frac.left, frac.right = "(", ")"
            return [frac]
        return nodes

    def _atom_or_scripts(self) -> object:
        # Primes with nothing before them are a superscript of an empty base (x^{'} is not x').
        base = _Group([]) if self._peek() == "'" else self._atom()
        if isinstance(base, (_Space, _StyleSwitch)) and self._peek() not in ("^", "_"):
            return base
        sub = sup = None
        limits = None
        while True:
            token = self._peek(skip_space=True)
            if token in ("\\limits", "\\nolimits"):
                self._next()
                limits = token == "\\limits"
                continue
            if token == "'":
                # KaTeX: adjacent primes form one superscript, which a directly following ^{…}
                # extends; a prime after a superscript is a double superscript.
                if sup is not None:
                    raise LatexError("double superscript")
                self._next()
                primes = "′"
                while self._peek(skip_space=False) == "'":
                    self._next(skip_space=False)
                    primes += "′"
                sup = _Sym(primes, _ORD)
                if self._peek(skip_space=False) == "^":
                    self._next()
                    sup = _Group([sup, self._script_argument()])
                continue
            if token == "^":
                self._next()
                if sup is not None:
                    raise LatexError("double superscript")
                sup = self._script_argument()
                continue
            if token == "_":
                self._next()
                if sub is not None:
                    raise LatexError("double subscript")
                sub = self._script_argument()
                continue
            break
        if sub is None and sup is None and limits is None:
            return base
        return _Scripts(base, sub, sup, limits)

    def _script_argument(self) -> object:
        token = self._peek()
        if token is None:
            raise LatexError("missing script")
        if token in ("^", "_", "}", "&", "\\\\"):
            raise LatexError(f"missing script before {token!r}")
        return self._argument()

    def _atom(self) -> object:
        token = self._next()
        if token is None:
            raise LatexError("missing atom")
        if token == "{":
            return _Group(self._expression(stop=set(), closing="}"))
        if token == "}":
            raise LatexError("unbalanced '}'")
        if token in ("^", "_"):
            # A script with an empty base, as in {}^{2} or ^2 at the start: KaTeX allows it.
            self.pos -= 1
            return _Group([])
        if token == "&":
            raise LatexError("'&' outside an environment")
        if token == "'":
            return _Sym("′", _ORD)
        if token == "~":
            return _Space(0.25)
        if token.startswith("\\"):
            return self._command(token)
        if token == "$":
            raise LatexError("'$' in math")
        char = _MATH_CHARS.get(token, token)
        return _Sym(char, _CHAR_CLASS.get(char, _ORD))

    def _command(self, name: str) -> object:
        if name == "\\\\" or name == "\\newline" or name == "\\cr":
            raise LatexError("line break outside a row context")
        if name in _SPACES:
            return _Space(_SPACES[name])
        if name in _SPACE_WITH_ARGUMENT:
            self._raw_group()
            return _Space(0.0)
        if name in _STYLE_SWITCHES:
            return _StyleSwitch(_STYLE_SWITCHES[name])
        if name in _OLD_FONT_SWITCHES:
            return _Space(0.0)
        if name in _FONT_COMMANDS:
            return _Group([self._argument()])
        if name in _TEXT_COMMANDS:
            return self._argument(text_mode=True)
        if name in _CLASS_COMMANDS:
            argument = self._argument()
            return _Group([argument], cls=_CLASS_COMMANDS[name])
        if name == "\\operatorname" or name == "\\operatorname*" or name == "\\operatornamewithlimits":
            text = self._argument(text_mode=True)
            chars = "".join(chunk for chunk in text.chunks if isinstance(chunk, str)).replace(" ", "")
            return _Op(chars, limits=name != "\\operatorname", symbol=False)
        if name[1:] in _FUNCTIONS:
            return _Op(_FUNCTION_TEXT.get(name[1:], name[1:]), limits=_FUNCTIONS[name[1:]], symbol=False)
        if name in _BIG_OPERATORS:
            char, limits = _BIG_OPERATORS[name]
            return _Op(char, limits=limits, symbol=True)
        if name in ("\\frac", "\\dfrac", "\\tfrac", "\\cfrac"):
            num = self._argument()
            den = self._argument()
            style = {"\\dfrac": "D", "\\tfrac": "T", "\\cfrac": "D"}.get(name)
            return _Frac(num, den, style=style)
        if name in ("\\binom", "\\dbinom", "\\tbinom"):
            num = self._argument()
            den = self._argument()
            style = {"\\dbinom": "D", "\\tbinom": "T"}.get(name)
            return _Frac(num, den, style=style, bar=False, left="(", right=")")
        if name == "\\genfrac":
            left = self._raw_group()
            right = self._raw_group()
            self._raw_group()
            style_code = self._raw_group().strip()
            num = self._argument()
            den = self._argument()
            style = {"0": "D", "1": "T", "2": "S", "3": "SS"}.get(style_code)
            return _Frac(num, den, style=style, left=_delimiter_char(left.strip()), right=_delimiter_char(right.strip()))
        if name == "\\sqrt":
            index_source = self._optional_raw()
            index = _Group(_Parser(index_source).parse()) if index_source else None
            return _Sqrt(self._argument(), index)
        if name in _ACCENTS:
            char, dy = _ACCENTS[name]
            return _Accent(self._argument(), char, dy, under=name.startswith("\\under"))
        if name in _BRACES:
            return _Stack(self._argument(), brace=True)
        if name in ("\\overset", "\\stackrel"):
            over = self._argument()
            return _Stack(self._argument(), over=over)
        if name == "\\underset":
            under = self._argument()
            return _Stack(self._argument(), under=under)
        if name == "\\substack":
            rows = self._rows_of_group()
            return _Array(rows, "", "", 0.0, 0.85, False, False)
        if name == "\\left":
            return self._left_right()
        if name in ("\\right", "\\middle"):
            raise LatexError(f"{name} without \\left")
        if name in _DELIMITER_SIZES:
            delimiter = self._next()
            if delimiter is None:
                raise LatexError(f"missing delimiter after {name}")
            char = _delimiter_char(delimiter)
            if char in _STACK_ALWAYS:
                char = ""  # \\big| and friends: a stacked (SVG) bar in KaTeX, no glyph
            cls = _OPEN if name.endswith("l") else _CLOSE if name.endswith("r") else _REL if name.endswith("m") else _CHAR_CLASS.get(char, _ORD)
            return _Sym(char, cls) if char else _Space(0.0)
        if name == "\\begin":
            return self._environment()
        if name == "\\end":
            raise LatexError("\\end without \\begin")
        if name in ("\\tag", "\\tag*"):
            text = self._argument(text_mode=True)
            chunks = text.chunks if isinstance(text, _Text) else [text]
            return _Tag(chunks if name == "\\tag*" else ["("] + chunks + [")"])
        if name in _COLOR_COMMANDS:
            for _ in range(_COLOR_COMMANDS[name] - 1):
                self._raw_group()
            return self._argument(text_mode=name != "\\textcolor")
        if name == "\\color":
            self._raw_group()
            return _Space(0.0)
        if name in ("\\boxed", "\\fbox", "\\cancel", "\\bcancel", "\\xcancel", "\\sout", "\\smash", "\\mathclap", "\\mathllap", "\\mathrlap", "\\clap", "\\llap", "\\rlap", "\\hphantom", "\\textstyle"):
            return _Group([self._argument(text_mode=name == "\\fbox")])
        if name in ("\\phantom",):
            self._argument()
            return _Space(0.5)
        if name == "\\vphantom":
            self._argument()
            return _Space(0.0)
        if name in ("\\xrightarrow", "\\xleftarrow", "\\xRightarrow", "\\xLeftarrow", "\\xleftrightarrow", "\\xmapsto"):
            below = self._optional_raw()
            above = self._argument()
            return _Stack(_Space(1.0), over=above, under=_Group(_Parser(below).parse()) if below else None)
        if name == "\\not":
            return _Sym("\u0338", _REL)
        if name in ("\\hline", "\\hdashline"):
            return _Space(0.0)
        if name in ("\\displaylimits",):
            return _Space(0.0)
        if name == "\\dots":
            return _Sym(self._dots_for_next(), _INNER)
        entry = _EXTRA_COMMANDS.get(name) or _symbol_table().get(name)
        if entry is None:
            raise LatexError(f"undefined control sequence {name}")
        char, cls = entry
        return _Sym(char, cls)

    def _dots_for_next(self) -> str:
        """KaTeX's \\dots: centred (⋯) before a binary operator, relation or integral, else low (…)."""
        following = self._peek()
        if following is None:
            return "…"
        if following.startswith("\\"):
            entry = _KATEX_SYMBOLS.get(following) or _symbol_table().get(following)
            if following in ("\\int", "\\iint", "\\iiint", "\\oint"):
                return "⋯"
            return "⋯" if entry is not None and entry[1] in (_BIN, _REL) else "…"
        char = _MATH_CHARS.get(following, following)
        return "⋯" if _CHAR_CLASS.get(char) in (_BIN, _REL) else "…"

    def _left_right(self) -> _LeftRight:
        left = self._next()
        if left is None:
            raise LatexError("missing delimiter after \\left")
        body: list = []
        middles: list = []
        self._enter()
        while True:
            token = self._peek()
            if token is None:
                raise LatexError("\\left without \\right")
            if token == "\\right":
                self._next()
                right = self._next()
                if right is None:
                    raise LatexError("missing delimiter after \\right")
                break
            if token == "\\middle":
                self._next()
                middle = self._next()
                body.append(_Sym(_delimiter_char(middle or ""), _REL))
                continue
            if token == "}":
                raise LatexError("unbalanced '}' inside \\left…\\right")
            if token in _STYLE_SWITCHES:
                self._next()
                body.append(_StyleSwitch(_STYLE_SWITCHES[token]))
                continue
            body.append(self._atom_or_scripts())
        self.depth -= 1
        return _LeftRight(_delimiter_char(left), body, _delimiter_char(right), middles)

    def _rows_until(self, end_token: str | None, end_name: str | None) -> list:
        """Rows of cells separated by ``&`` and ``\\\\`` until ``\\end{end_name}`` (or ``}``)."""
        rows: list = [[[]]]
        self._enter()
        while True:
            token = self._peek()
            if token is None:
                raise LatexError(f"missing \\end{{{end_name}}}" if end_name else "missing '}'")
            if end_name is not None and token == "\\end":
                self._next()
                name = self._raw_group().strip()
                if name != end_name:
                    raise LatexError(f"\\begin{{{end_name}}} ended by \\end{{{name}}}")
                break
            if end_token is not None and token == end_token:
                self._next()
                break
            if token == "&":
                self._next()
                rows[-1].append([])
                continue
            if token in ("\\\\", "\\cr", "\\newline"):
                self._next()
                self._optional_raw()  # \\[2pt]
                rows.append([[]])
                continue
            if token in ("\\hline", "\\hdashline"):
                self._next()
                continue
            if token == "}":
                raise LatexError("unbalanced '}'")
            if token in _STYLE_SWITCHES:
                self._next()
                rows[-1][-1].append(_StyleSwitch(_STYLE_SWITCHES[token]))
                continue
            rows[-1][-1].append(self._atom_or_scripts())
        self.depth -= 1
        if rows and rows[-1] == [[]]:
            rows.pop()  # a trailing \\ does not start a row
        return rows

    def _rows_of_group(self) -> list:
        self._expect("{")
        return self._rows_until("}", None)

    def _environment(self) -> _Array:
        name = self._raw_group().strip()
        if name not in _ENVIRONMENTS:
            raise LatexError(f"no such environment: {name}")
        if name in _ENV_WITH_SPEC:
            self._raw_group()
        elif name.endswith("matrix*"):
            self._optional_raw()
        left, right, col_gap, row_step, display = _ENVIRONMENTS[name]
        rows = self._rows_until(None, name)
        return _Array(rows, left, right, col_gap, row_step, display, name in _ALIGN_ENVS)


_STRUCTURAL_COMMANDS = (
    _FONT_COMMANDS
    | _TEXT_COMMANDS
    | set(_CLASS_COMMANDS)
    | set(_ACCENTS)
    | set(_BRACES)
    | _DELIMITER_SIZES
    | set(_COLOR_COMMANDS)
    | _SPACE_WITH_ARGUMENT
    | {
        "\\operatorname", "\\operatorname*", "\\operatornamewithlimits", "\\frac", "\\dfrac", "\\tfrac",
        "\\cfrac", "\\binom", "\\dbinom", "\\tbinom", "\\genfrac", "\\sqrt", "\\overset", "\\stackrel",
        "\\underset", "\\substack", "\\left", "\\right", "\\middle", "\\begin", "\\end", "\\tag", "\\tag*",
        "\\color", "\\boxed", "\\fbox", "\\cancel", "\\bcancel", "\\xcancel", "\\sout", "\\smash",
        "\\mathclap", "\\mathllap", "\\mathrlap", "\\clap", "\\llap", "\\rlap", "\\hphantom", "\\phantom",
        "\\vphantom", "\\xrightarrow", "\\xleftarrow", "\\xRightarrow", "\\xLeftarrow", "\\xleftrightarrow",
        "\\xmapsto", "\\not", "\\label",
    }
)


# KaTeX stretches these by stacking pieces (drawn as SVG, no text) as soon as they must be larger
# than the normal glyph; the large-delimiter ones use bigger font glyphs up to 3 em first.
_STACK_ALWAYS = set("∣∥↑↓↕⇑⇓⇕")
_STACK_LARGE = set("()[]{}⌊⌋⌈⌉√")


def _drawn_delimiter(char: str, body: "_Box", size: float) -> str:
    """The character KaTeX's \\left/\\right delimiter shows around ``body`` ("" when it is an SVG)."""
    if not char:
        return char
    axis = 0.25 * size
    reach = max(body.height - axis, body.depth + axis)
    needed = max(2 * reach * 0.901, 2 * reach - 0.5 * size)  # TeX's delimiterfactor/-shortfall
    if char in _STACK_ALWAYS and needed > 1.0 * size:
        return ""
    if char in _STACK_LARGE and needed > 3.0 * size:
        return ""
    return char


def _is_argument_free(name: str) -> bool:
    """Whether the command ``name`` may stand alone as an unbraced argument. KaTeX refuses
    functions there ("Got function '\\sum' with no arguments as subscript"), operators included."""
    return name not in _STRUCTURAL_COMMANDS and name not in _BIG_OPERATORS and name[1:] not in _FUNCTIONS


def _delimiter_char(token: str) -> str:
    if token in (".", ""):
        return ""
    if token in ("<", ">"):
        return "⟨" if token == "<" else "⟩"
    if not token.startswith("\\") and token not in "()[]|/":
        raise LatexError(f"invalid delimiter {token!r}")
    if token.startswith("\\"):
        entry = _KATEX_SYMBOLS.get(token) or _symbol_table().get(token)
        if entry is None:
            raise LatexError(f"invalid delimiter {token}")
        return entry[0]
    return _MATH_CHARS.get(token, token)


# =================================================================================================
# Layout
# =================================================================================================

# TeX font parameters (cmsy10 / cmsy7 / cmsy5 and cmex10), as KaTeX uses them, by size class.
_METRICS = {
    "text": dict(xHeight=0.431, num1=0.677, num2=0.394, num3=0.444, denom1=0.686, denom2=0.345, sup1=0.413, sup2=0.363, sup3=0.289, sub1=0.150, sub2=0.247, supDrop=0.386, subDrop=0.050, axis=0.250, rule=0.04),
    "script": dict(xHeight=0.431, num1=0.732, num2=0.384, num3=0.471, denom1=0.752, denom2=0.344, sup1=0.503, sup2=0.431, sup3=0.286, sub1=0.143, sub2=0.286, supDrop=0.353, subDrop=0.071, axis=0.250, rule=0.049),
    "scriptscript": dict(xHeight=0.431, num1=0.925, num2=0.387, num3=0.504, denom1=1.025, denom2=0.532, sup1=0.504, sup2=0.404, sup3=0.294, sub1=0.200, sub2=0.400, supDrop=0.494, subDrop=0.100, axis=0.250, rule=0.049),
}
_BIG_OP_SPACING = (0.111, 0.166, 0.2, 0.6, 0.1)

# Advance widths (em) of the glyphs as KaTeX's render page shows them: its own fonts are not
# loaded there, so Chromium falls back to Times-like system fonts (measured on Debian's Chromium).
_ITALIC_WIDTHS = dict(zip("abcdefghijklmnopqrstuvwxyz", (0.5, 0.5, 0.444, 0.5, 0.444, 0.278, 0.5, 0.5, 0.278, 0.278, 0.444, 0.278, 0.722, 0.5, 0.5, 0.5, 0.5, 0.39, 0.39, 0.278, 0.5, 0.444, 0.667, 0.444, 0.444, 0.39)))
_ITALIC_WIDTHS.update(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", (0.611, 0.611, 0.667, 0.722, 0.611, 0.611, 0.722, 0.722, 0.333, 0.444, 0.667, 0.556, 0.833, 0.667, 0.722, 0.611, 0.722, 0.611, 0.5, 0.556, 0.722, 0.611, 0.833, 0.611, 0.556, 0.556)))
_UPRIGHT_WIDTHS = dict(zip("abcdefghijklmnopqrstuvwxyz", (0.444, 0.5, 0.444, 0.5, 0.444, 0.333, 0.5, 0.5, 0.278, 0.278, 0.5, 0.278, 0.778, 0.5, 0.5, 0.5, 0.5, 0.333, 0.39, 0.278, 0.5, 0.5, 0.722, 0.5, 0.5, 0.444)))
_UPRIGHT_WIDTHS.update(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", (0.722, 0.667, 0.667, 0.722, 0.611, 0.556, 0.722, 0.722, 0.333, 0.39, 0.722, 0.611, 0.889, 0.722, 0.722, 0.556, 0.722, 0.667, 0.556, 0.611, 0.722, 0.722, 0.944, 0.722, 0.722, 0.611)))
_SYMBOL_WIDTHS = {
    **dict.fromkeys("0123456789", 0.5),
    **dict(zip("αβγδϵεζηθϑικλμνξπρστυϕφχψωΓΔΘΛΞΠΣΥΦΨΩ", (0.525, 0.498, 0.394, 0.465, 0.616, 0.394, 0.405, 0.496, 0.491, 0.619, 0.278, 0.48, 0.433, 0.502, 0.444, 0.428, 0.501, 0.48, 0.493, 0.358, 0.459, 0.66, 0.553, 0.44, 0.621, 0.706, 0.578, 0.643, 0.722, 0.725, 0.643, 0.722, 0.582, 0.722, 0.731, 0.738, 0.743))),
    **dict.fromkeys("+−=<>×≡¬", 0.564),
    **dict.fromkeys("≤≥±≈", 0.549),
    **dict.fromkeys("∼⊂⊃⊆⊇⇒⇐", 0.838),
    **dict.fromkeys("∪∧∨", 0.732),
    "∩": 0.722, "⋅": 0.318, "→": 1.0, "←": 1.0, "↔": 1.0, "∈": 0.871, "∉": 0.871, "∋": 0.871, "∣": 0.5, "∥": 0.5,
    "\ue020": 0.365, "(": 0.333, ")": 0.333, "[": 0.333, "]": 0.333, "{": 0.48, "}": 0.48, "/": 0.278, ",": 0.25,
    ".": 0.25, ";": 0.278, ":": 0.278, "!": 0.333, "′": 0.219, "∂": 0.494, "∇": 0.669, "∞": 0.713, "…": 1.0,
    "⋯": 1.0, "⟨": 0.39, "⟩": 0.39, "ℓ": 0.479, "ℏ": 0.634, "∅": 0.871, "∀": 0.684, "∃": 0.632, "∑": 0.713,
    "∏": 0.823, "∫": 0.274, "∮": 0.521, "⋃": 0.821, "⋂": 0.821, "∐": 0.757, "∬": 0.789,
}
_DEFAULT_WIDTH = 0.5


def _char_width(char: str, upright: bool = False) -> float:
    width = (_UPRIGHT_WIDTHS if upright else _ITALIC_WIDTHS).get(char)
    if width is None:
        width = _SYMBOL_WIDTHS.get(char, _DEFAULT_WIDTH)
    return width


_ASCENDERS = set("bdfhklt0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ()[]{}|∣∥/\\∂δλ⟨⟩⌈⌉⌊⌋θβζξ!?′")
_DESCENDERS = set("gjpqyf()[]{}|∣∥/\\βγζημξρφχψ⟨⟩⌈⌉⌊⌋,;")


def _char_height_depth(char: str) -> tuple[float, float]:
    height = 0.694 if char in _ASCENDERS else 0.431
    if char in "()[]{}∣∥⟨⟩⌈⌉⌊⌋|/\\":
        return 0.75, 0.25
    if char in "+−=<>±×÷⋅∗∘≤≥≠≈≡∼":
        return 0.583, 0.083
    depth = 0.194 if char in _DESCENDERS else 0.0
    return height, depth


# Styles: D, T, S, SS (display, text, script, scriptscript); a trailing "'" marks TeX's cramped
# variant (denominators, subscripts, radicands, accented bases), where superscripts sit lower.
_SIZE = {"D": 1.0, "T": 1.0, "S": 0.7, "SS": 0.5}
_METRIC_SET = {"D": "text", "T": "text", "S": "script", "SS": "scriptscript"}
_SUP_STYLE = {"D": "S", "T": "S", "S": "SS", "SS": "SS"}
_FRAC_STYLE = {"D": "T", "T": "S", "S": "SS", "SS": "SS"}


def _base(style: str) -> str:
    return style.rstrip("'")


def _cramped(style: str) -> str:
    return style if style.endswith("'") else style + "'"


def _keep_cramp(style: str, new_base: str) -> str:
    return new_base + ("'" if style.endswith("'") else "")


@dataclass
class _Box:
    """Laid-out material: extent (em, relative to its own size 1 at display) and glyphs as
    (character, centre x, centre y) relative to the box's left end on its baseline (y up)."""

    width: float = 0.0
    height: float = 0.0
    depth: float = 0.0
    glyphs: list = field(default_factory=list)
    is_char: bool = False
    cls: str = _ORD

    def shifted(self, dx: float, dy: float) -> list:
        return [(char, x + dx, y + dy) for char, x, y in self.glyphs]


# Inter-atom spacing in mu (1/18 em): (left class, right class) -> (space, also in script styles).
_THIN, _MED, _THICK = 3 / 18, 4 / 18, 5 / 18
_SPACING = {
    (_ORD, _OP): (_THIN, True), (_ORD, _BIN): (_MED, False), (_ORD, _REL): (_THICK, False), (_ORD, _INNER): (_THIN, False),
    (_OP, _ORD): (_THIN, True), (_OP, _OP): (_THIN, True), (_OP, _REL): (_THICK, False), (_OP, _INNER): (_THIN, False),
    (_BIN, _ORD): (_MED, False), (_BIN, _OP): (_MED, False), (_BIN, _OPEN): (_MED, False), (_BIN, _INNER): (_MED, False),
    (_REL, _ORD): (_THICK, False), (_REL, _OP): (_THICK, False), (_REL, _OPEN): (_THICK, False), (_REL, _INNER): (_THICK, False),
    (_CLOSE, _OP): (_THIN, True), (_CLOSE, _BIN): (_MED, False), (_CLOSE, _REL): (_THICK, False), (_CLOSE, _INNER): (_THIN, False),
    (_PUNCT, _ORD): (_THIN, False), (_PUNCT, _OP): (_THIN, False), (_PUNCT, _REL): (_THIN, False), (_PUNCT, _OPEN): (_THIN, False),
    (_PUNCT, _CLOSE): (_THIN, False), (_PUNCT, _PUNCT): (_THIN, False), (_PUNCT, _INNER): (_THIN, False),
    (_INNER, _ORD): (_THIN, False), (_INNER, _OP): (_THIN, True), (_INNER, _BIN): (_MED, False), (_INNER, _REL): (_THICK, False),
    (_INNER, _OPEN): (_THIN, False), (_INNER, _PUNCT): (_THIN, False), (_INNER, _INNER): (_THIN, False),
}


class _Layouter:
    def __init__(self) -> None:
        self.depth = 0

    def row(self, nodes: list, style: str) -> _Box:
        """A horizontal list: atoms side by side with TeX's spacing; style switches apply onwards."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LatexError("nesting too deep")
        boxes: list[_Box] = []
        for node in nodes:
            if isinstance(node, _StyleSwitch):
                style = node.style
                continue
            boxes.append(self.node(node, style))
        # TeX's rule: a binary operator with nothing to bind becomes an ordinary symbol.
        classes = [box.cls for box in boxes]
        for index, cls in enumerate(classes):
            if cls != _BIN:
                continue
            previous = next((classes[j] for j in range(index - 1, -1, -1) if boxes[j].glyphs or boxes[j].width), None)
            following = classes[index + 1] if index + 1 < len(classes) else None
            if previous in (None, _BIN, _OP, _REL, _OPEN, _PUNCT) or following in (_REL, _CLOSE, _PUNCT):
                classes[index] = _ORD
        size = _SIZE[_base(style)]
        scripted = _base(style) in ("S", "SS")
        result = _Box()
        x = 0.0
        previous_cls = None
        for box, cls in zip(boxes, classes):
            if box.cls == "space":
                x += box.width
                continue
            if previous_cls is not None:
                space, in_script = _SPACING.get((previous_cls, cls), (0.0, False))
                if space and (in_script or not scripted):
                    x += space * size
            result.glyphs.extend(box.shifted(x, 0.0))
            x += box.width
            result.height = max(result.height, box.height)
            result.depth = max(result.depth, box.depth)
            previous_cls = cls
        result.width = x
        if len(boxes) == 1 and boxes[0].cls != "space":
            result.is_char = boxes[0].is_char
            result.cls = classes[0]
        self.depth -= 1
        return result

    def node(self, node: object, style: str) -> _Box:
        size = _SIZE[_base(style)]
        if isinstance(node, _Sym):
            return self.char(node.char, node.cls, size)
        if isinstance(node, _Space):
            return _Box(width=node.width * size, cls="space")
        if isinstance(node, _Group):
            box = self.row(node.children, style)
            box.is_char = False if len(node.children) != 1 else box.is_char
            if node.cls is not None:
                box.cls = node.cls
            return box
        if isinstance(node, _Text):
            return self.text(node.chunks, style)
        if isinstance(node, _Scripts):
            return self.scripts(node, style)
        if isinstance(node, _Frac):
            return self.frac(node, style)
        if isinstance(node, _Sqrt):
            return self.sqrt(node, style)
        if isinstance(node, _Accent):
            return self.accent(node, style)
        if isinstance(node, _LeftRight):
            return self.left_right(node, style)
        if isinstance(node, _Op):
            return self.op(node, style)
        if isinstance(node, _Array):
            return self.array(node, style)
        if isinstance(node, _Stack):
            return self.stack(node, style)
        if isinstance(node, _Tag):
            box = self.text(node.chunks, "T")
            shifted = _Box(width=box.width + 1.0, height=box.height, depth=box.depth, glyphs=box.shifted(1.0, 0.0))
            return shifted
        raise LatexError(f"cannot lay out {type(node).__name__}")

    def char(self, char: str, cls: str, size: float) -> _Box:
        width = sum(_char_width(c) for c in char) * size
        height, depth = _char_height_depth(char[0]) if char else (0.0, 0.0)
        glyphs = []
        x = 0.0
        for c in char:
            w = _char_width(c) * size
            if not c.isspace():
                glyphs.append((c, x + w / 2, _CENTER * size))
            x += w
        return _Box(width=width, height=height * size, depth=depth * size, glyphs=glyphs, is_char=len(char) == 1, cls=cls)

    def text(self, chunks: list, style: str) -> _Box:
        size = _SIZE[_base(style)]
        result = _Box()
        x = 0.0
        for chunk in chunks:
            if isinstance(chunk, str):
                for c in chunk:
                    w = _char_width(c, upright=True) * size if not c.isspace() else 0.25 * size
                    if not c.isspace():
                        result.glyphs.append((c, x + w / 2, _CENTER * size))
                    x += w
                result.height = max(result.height, 0.694 * size)
            else:
                box = self.node(chunk, style)
                result.glyphs.extend(box.shifted(x, 0.0))
                x += box.width
        result.width = x
        return result

    def scripts(self, node: _Scripts, style: str) -> _Box:
        base_node = node.base
        if isinstance(base_node, _Op) and (node.limits if node.limits is not None else (base_node.limits and _base(style) == "D")):
            return self.limits(base_node, node.sub, node.sup, style)
        if isinstance(base_node, _Stack) and base_node.brace:
            return self.stack(base_node, style, extra=node)
        base = self.node(base_node, style)
        size = _SIZE[_base(style)]
        metrics = _METRICS[_METRIC_SET[_base(style)]]
        script_style = _keep_cramp(style, _SUP_STYLE[_base(style)])
        script_size = _SIZE[_base(script_style)]
        script_metrics = _METRICS[_METRIC_SET[_base(script_style)]]
        sup = self.node(node.sup, script_style) if node.sup is not None else None
        sub = self.node(node.sub, _cramped(script_style)) if node.sub is not None else None
        sup_shift = sub_shift = 0.0
        if not base.is_char:
            sup_shift = base.height - script_metrics["supDrop"] * script_size
            sub_shift = base.depth + script_metrics["subDrop"] * script_size
        min_sup = metrics["sup1"] if style == "D" else metrics["sup3"] if style.endswith("'") else metrics["sup2"]
        x_height = metrics["xHeight"] * size
        if sup is not None and sub is not None:
            sup_shift = max(sup_shift, min_sup * size, sup.depth + 0.25 * x_height)
            sub_shift = max(sub_shift, metrics["sub2"] * size)
            gap = 4 * metrics["rule"] * size
            if (sup_shift - sup.depth) - (sub.height - sub_shift) < gap:
                sub_shift = gap - (sup_shift - sup.depth) + sub.height
                psi = 0.8 * x_height - (sup_shift - sup.depth)
                if psi > 0:
                    sup_shift += psi
                    sub_shift -= psi
        elif sub is not None:
            sub_shift = max(sub_shift, metrics["sub1"] * size, sub.height - 0.8 * x_height)
        else:
            sup_shift = max(sup_shift, min_sup * size, sup.depth + 0.25 * x_height)  # type: ignore[union-attr]
        result = _Box(glyphs=list(base.glyphs), cls=base.cls)
        x = base.width
        width = base.width
        height, depth = base.height, base.depth
        # KaTeX lists the subscript before the superscript (bottom to top).
        if sub is not None:
            result.glyphs.extend(sub.shifted(x, -sub_shift))
            width = max(width, x + sub.width)
            depth = max(depth, sub.depth + sub_shift)
        if sup is not None:
            # An integral's superscript sits right of its subscript by the sign's italic correction.
            italic = 0.0
            if isinstance(base_node, _Op) and base_node.symbol and base_node.text in _INTEGRALS:
                italic = (0.444 if _base(style) == "D" else 0.194) * size
            result.glyphs.extend(sup.shifted(x + italic, sup_shift))
            width = max(width, x + italic + sup.width)
            height = max(height, sup.height + sup_shift)
        # TeX's scriptspace, plus the 2 px column KaTeX's vlists end with on its render page.
        result.width = width + 0.05 * size + _VLIST_END
        result.height, result.depth = height, depth
        return result

    def op(self, node: _Op, style: str) -> _Box:
        size = _SIZE[_base(style)]
        if node.symbol:
            # Display style uses KaTeX's larger operator font for the vertical metrics, but the
            # render page's fallback font draws the glyph at one width.
            box = self.char(node.text, _OP, size)
            box.height, box.depth = (1.0 * size, 0.5 * size) if _base(style) == "D" else (0.75 * size, 0.25 * size)
        else:
            box = self.text([node.text], style)
            box.height, box.depth = 0.694 * size, 0.0
        box.cls = _OP
        box.is_char = False
        return box

    def limits(self, node: _Op, sub_node: object, sup_node: object, style: str) -> _Box:
        base = self.op(node, style)
        script_style = _keep_cramp(style, _SUP_STYLE[_base(style)])
        size = _SIZE[_base(style)]
        sup = self.node(sup_node, script_style) if sup_node is not None else None
        sub = self.node(sub_node, _cramped(script_style)) if sub_node is not None else None
        width = max(base.width, sup.width if sup else 0.0, sub.width if sub else 0.0)
        result = _Box(width=width, height=base.height, depth=base.depth, cls=_OP)
        # KaTeX lists limits bottom to top: lower limit, operator, upper limit.
        if sub is not None:
            kern = max(_BIG_OP_SPACING[1] * size, _BIG_OP_SPACING[3] * size - sub.height)
            shift = base.depth + kern + sub.height
            result.glyphs.extend(sub.shifted((width - sub.width) / 2, -shift))
            result.depth = shift + sub.depth + _BIG_OP_SPACING[4] * size
        result.glyphs.extend(base.shifted((width - base.width) / 2, 0.0))
        if sup is not None:
            kern = max(_BIG_OP_SPACING[0] * size, _BIG_OP_SPACING[2] * size - sup.depth)
            shift = base.height + kern + sup.depth
            result.glyphs.extend(sup.shifted((width - sup.width) / 2, shift))
            result.height = shift + sup.height + _BIG_OP_SPACING[4] * size
        return result

    def frac(self, node: _Frac, style: str) -> _Box:
        outer = node.style or style
        size = _SIZE[outer]
        metrics = _METRICS[_METRIC_SET[outer]]
        inner_style = _FRAC_STYLE[outer]
        num = self.node(node.num, inner_style)
        den = self.node(node.den, inner_style)
        rule = metrics["rule"] * size if node.bar else 0.0
        axis = metrics["axis"] * size
        if _base(outer) == "D":
            num_shift, den_shift = metrics["num1"] * size, metrics["denom1"] * size
            clearance = 3 * rule if node.bar else 7 * metrics["rule"] * size
        else:
            num_shift = (metrics["num2"] if node.bar else metrics["num3"]) * size
            den_shift = metrics["denom2"] * size
            clearance = rule if node.bar else 3 * metrics["rule"] * size
        if node.bar:
            if (num_shift - num.depth) - (axis + rule / 2) < clearance:
                num_shift += clearance - ((num_shift - num.depth) - (axis + rule / 2))
            if (axis - rule / 2) - (den.height - den_shift) < clearance:
                den_shift += clearance - ((axis - rule / 2) - (den.height - den_shift))
        else:
            gap = (num_shift - num.depth) - (den.height - den_shift)
            if gap < clearance:
                num_shift += (clearance - gap) / 2
                den_shift += (clearance - gap) / 2
        width = max(num.width, den.width)
        glyphs: list = []
        x = 0.0
        if node.left:
            left = self.char(node.left, _OPEN, size)
            glyphs.extend(left.glyphs)
            x = left.width
        glyphs.extend(den.shifted(x + (width - den.width) / 2, -den_shift))
        glyphs.extend(num.shifted(x + (width - num.width) / 2, num_shift))
        x += width
        if node.right:
            right = self.char(node.right, _CLOSE, size)
            glyphs.extend(right.shifted(x, 0.0))
            x += right.width
        return _Box(width=x + 0.12 * size, height=num_shift + num.height, depth=den_shift + den.depth, glyphs=glyphs, cls=_INNER if node.left else _ORD)

    def sqrt(self, node: _Sqrt, style: str) -> _Box:
        size = _SIZE[_base(style)]
        body = self.node(node.body, _cramped(style))
        glyphs: list = []
        offset = 0.85 * size
        if node.index is not None:
            index = self.node(node.index, "SS")
            glyphs.extend(index.shifted(0.15 * size, 0.45 * size))
            offset = max(offset, 0.15 * size + index.width + 0.3 * size)
        glyphs.extend(body.shifted(offset, 0.0))
        return _Box(width=offset + body.width, height=body.height + 0.2 * size, depth=body.depth, glyphs=glyphs)

    def accent(self, node: _Accent, style: str) -> _Box:
        size = _SIZE[_base(style)]
        body = self.node(node.body, _cramped(style))
        glyphs = list(body.glyphs)
        if node.char is not None and not node.under:
            # The accent box sits over the base, a hair higher (0.4 px in KaTeX), so the base's up
            # neighbour is its accent. KaTeX's skew puts most accents a pixel or so right of the
            # base's centre (so the accent is also the base's right neighbour); a bar is drawn
            # from the base's left edge.
            dx = -0.05 if node.char == "ˉ" else 0.03
            glyphs.append((node.char, body.width / 2 + dx * size, (_CENTER + max(node.dy, 0.015)) * size))
        return _Box(width=body.width, height=body.height + 0.2 * size, depth=body.depth, glyphs=glyphs, is_char=body.is_char, cls=body.cls)

    def left_right(self, node: _LeftRight, style: str) -> _Box:
        size = _SIZE[_base(style)]
        body = self.row(node.body, style)
        node = _LeftRight(_drawn_delimiter(node.left, body, size), node.body, _drawn_delimiter(node.right, body, size))
        glyphs: list = []
        x = 0.0
        if node.left:
            left = self.char(node.left, _OPEN, size)
            glyphs.extend(left.glyphs)
            x = left.width
        glyphs.extend(body.shifted(x, 0.0))
        x += body.width
        if node.right:
            right = self.char(node.right, _CLOSE, size)
            glyphs.extend(right.shifted(x, 0.0))
            x += right.width
        height = max(body.height, 0.75 * size)
        depth = max(body.depth, 0.25 * size)
        return _Box(width=x, height=height, depth=depth, glyphs=glyphs, cls=_INNER)

    def stack(self, node: _Stack, style: str, extra: _Scripts | None = None) -> _Box:
        size = _SIZE[_base(style)]
        body = self.node(node.body, style)
        over_node, under_node = node.over, node.under
        if extra is not None:
            over_node = extra.sup if extra.sup is not None else over_node
            under_node = extra.sub if extra.sub is not None else under_node
        script_style = _keep_cramp(style, _SUP_STYLE[_base(style)])
        over = self.node(over_node, script_style) if over_node is not None else None
        under = self.node(under_node, _cramped(script_style)) if under_node is not None else None
        width = max(body.width, over.width if over else 0.0, under.width if under else 0.0)
        glyphs: list = []
        extra_gap = 0.3 * size if node.brace else 0.1 * size
        depth, height = body.depth, body.height
        if under is not None:
            shift = body.depth + extra_gap + under.height
            glyphs.extend(under.shifted((width - under.width) / 2, -shift))
            depth = shift + under.depth
        glyphs.extend(body.shifted((width - body.width) / 2, 0.0))
        if over is not None:
            shift = body.height + extra_gap + over.depth
            glyphs.extend(over.shifted((width - over.width) / 2, shift))
            height = shift + over.height
        return _Box(width=width, height=height, depth=depth, glyphs=glyphs, cls=_REL if node.over is not None and not node.brace else _ORD)

    def array(self, node: _Array, style: str) -> _Box:
        size = _SIZE[_base(style)]
        cell_style = "D" if node.display else ("T" if _base(style) in ("D", "T") else _base(style))
        grid = [[self.row(cell, cell_style) for cell in row] for row in node.rows]
        if not grid:
            grid = [[_Box()]]
        columns = max(len(row) for row in grid)
        widths = [0.0] * columns
        for row in grid:
            for index, box in enumerate(row):
                widths[index] = max(widths[index], box.width)
        heights = [max([0.7 * size] + [box.height for box in row]) for row in grid]
        depths = [max([0.3 * size] + [box.depth for box in row]) for row in grid]
        # Baselines: consecutive rows at least row_step apart; the block is centred on the axis.
        baselines = [0.0]
        for index in range(1, len(grid)):
            step = max(node.row_step * size, depths[index - 1] + heights[index] + 0.1 * size)
            baselines.append(baselines[-1] - step)
        total_height = heights[0] - baselines[-1] + depths[-1]
        offset = heights[0] - total_height / 2 - 0.25 * size  # centre on the axis
        glyphs: list = []
        x_left = 0.0
        block = _Box(height=heights[0] - offset, depth=-(baselines[-1] - offset) + depths[-1])
        node = _Array(node.rows, _drawn_delimiter(node.left, block, size), _drawn_delimiter(node.right, block, size), node.col_gap, node.row_step, node.display, node.align_pairs)
        if node.left:
            left = self.char(node.left, _OPEN, size)
            glyphs.extend(left.glyphs)
            x_left = left.width + 0.1 * size
        gap = node.col_gap * size
        column_x = []
        x = x_left + (gap / 2 if node.col_gap else 0.0)
        for width in widths:
            column_x.append(x)
            x += width + gap
        if node.col_gap:
            x -= gap / 2
        for row_index, row in enumerate(grid):
            y = baselines[row_index] - offset
            for index, box in enumerate(row):
                if node.align_pairs:
                    # align: odd columns flush right, even flush left (the relation starts the cell).
                    dx = widths[index] - box.width if index % 2 == 0 else 0.0
                elif node.left == "{" or node.right == "}":
                    dx = 0.0  # cases: left-aligned cells
                else:
                    dx = (widths[index] - box.width) / 2
                glyphs.extend(box.shifted(column_x[index] + dx, y))
        if node.right:
            right = self.char(node.right, _CLOSE, size)
            glyphs.extend(right.shifted(x + 0.1 * size, 0.0))
            x += 0.1 * size + right.width
        top = heights[0] - offset
        bottom = -(baselines[-1] - offset) + depths[-1]
        return _Box(width=x, height=max(top, 0.75 * size), depth=max(bottom, 0.25 * size), glyphs=glyphs, cls=_INNER if node.left or node.right else _ORD)


# =================================================================================================
# Layouts, neighbours and matching
# =================================================================================================


@dataclass
class Layout:
    """An equation's glyphs (characters with centre positions, em, y up) and, lazily, each glyph's
    nearest neighbour up, down, left and right. ``error`` is set (and there are no glyphs) when
    the LaTeX does not parse."""

    glyphs: tuple[tuple[str, float, float], ...]
    error: str | None = None
    key: str = ""  # the equation's tokens, whitespace dropped
    rows: frozenset = frozenset()  # keys of every row inside it (see _row_keys)
    _neighbours: tuple | None = field(default=None, repr=False, compare=False)
    _counts: Counter | None = field(default=None, repr=False, compare=False)
    _by_char: dict | None = field(default=None, repr=False, compare=False)

    @property
    def chars(self) -> tuple[str, ...]:
        return tuple(g[0] for g in self.glyphs)

    def counts(self) -> Counter:
        if self._counts is None:
            self._counts = Counter(g[0] for g in self.glyphs)
        return self._counts

    def by_char(self) -> dict[str, list[int]]:
        if self._by_char is None:
            index: dict[str, list[int]] = {}
            for i, glyph in enumerate(self.glyphs):
                index.setdefault(glyph[0], []).append(i)
            self._by_char = index
        return self._by_char

    def neighbours(self) -> tuple:
        """Per glyph: (up, down, left, right) glyph indices or None (olmOCR-bench's rule)."""
        if self._neighbours is None:
            self._neighbours = _compute_neighbours(self.glyphs)
        return self._neighbours


def syntax_problem(source: str) -> str | None:
    """Why ``source`` does not parse as (KaTeX-compatible) LaTeX, or None if it does."""
    try:
        _parse(source)
    except LatexError as error:
        return str(error)
    except RecursionError:
        return "nesting too deep"
    return None


def _parse(source: str) -> list:
    if len(source) > MAX_EQUATION_CHARS:
        raise LatexError(f"equation longer than {MAX_EQUATION_CHARS} characters")
    return _parse_top(_Parser(source))


def _parse_top(parser: _Parser) -> list:
    lines: list[list] = [[]]
    while True:
        token = parser._peek()
        if token is None:
            break
        if token in ("\\\\", "\\newline", "\\cr"):
            parser._next()
            parser._optional_raw()
            lines.append([])
            continue
        if token == "}":
            raise LatexError("unbalanced '}'")
        if token == "&":
            raise LatexError("'&' outside an environment")
        if token in _STYLE_SWITCHES:
            parser._next()
            lines[-1].append(_StyleSwitch(_STYLE_SWITCHES[token]))
            continue
        if token in ("\\over", "\\choose", "\\atop", "\\above"):
            # Infix fraction at the top level: everything before over everything after.
            parser._next()
            if token == "\\above":
                parser._raw_group()
            rest = parser._expression(stop={"\\\\"})
            frac = _Frac(_Group(lines[-1]), _Group(rest), bar=token != "\\choose" and token != "\\atop")
            if token == "\\choose":
                frac.left, frac.right = "(", ")"
            lines[-1] = [frac]
            continue
        lines[-1].append(parser._atom_or_scripts())
    if len(lines) == 1:
        return lines[0]
    return [_Array([[line] for line in lines], "", "", 0.0, 1.2, True, False)]


@lru_cache(maxsize=4096)
def layout(source: str) -> Layout:
    """Lay out ``source`` in display style; a source that does not parse gives an empty layout
    with ``error`` set. Cached (equations repeat across tests and completions)."""
    try:
        nodes = _parse(source)
        tags = [node for node in nodes if isinstance(node, _Tag)]
        layouter = _Layouter()
        box = layouter.row([node for node in nodes if not isinstance(node, _Tag)], "D")
        for tag in tags:
            # KaTeX positions a tag absolutely against the right end of the equation: its glyphs
            # end where the equation ends, on the same baseline (so they overlap it).
            tag_box = layouter.text(tag.chunks, "D")
            box.glyphs.extend(tag_box.shifted(box.width - tag_box.width, 0.0))
    except LatexError as error:
        return Layout(glyphs=(), error=str(error))
    except RecursionError:
        return Layout(glyphs=(), error="nesting too deep")
    glyphs = tuple((char, x, y) for char, x, y in box.glyphs if char not in ("\u200b", " ", "\u00a0"))
    tokens = [token for token in tokenize(source) if not token.isspace()]
    return Layout(glyphs=glyphs, key=_ROW_SEPARATOR.join(tokens), rows=_row_keys(tokens))


_ROW_SEPARATOR = "\x00"
# Commands whose braced argument is not a math row in KaTeX's MathML.
_RAW_ARGUMENT_COMMANDS = _TEXT_COMMANDS | _FONT_COMMANDS | _SPACE_WITH_ARGUMENT | {
    "\\begin", "\\end", "\\color", "\\textcolor", "\\colorbox", "\\operatorname", "\\operatorname*",
}
_WRAPPERS_DROPPED = {"\\tag", "\\tag*", "\\label"}


def _row_keys(tokens: list[str]) -> frozenset:
    """Keys of the rows KaTeX's MathML wraps in an <mrow> of their own: the whole equation without
    \\tag/\\label, every braced group, every environment's body and cells. olmOCR-bench passes a
    candidate whose MathML contains the reference's; when that holds the reference is one of these
    rows (a conservative stand-in for the MathML comparison, which needs no layout)."""
    keys: set[str] = set()
    # The equation without tags and labels (KaTeX puts the tag in a separate table cell).
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        if tokens[i] in _WRAPPERS_DROPPED and i + 1 < len(tokens) and tokens[i + 1] == "{":
            depth, j = 0, i + 1
            while j < len(tokens):
                depth += tokens[j] == "{"
                depth -= tokens[j] == "}"
                j += 1
                if depth == 0:
                    break
            i = j
            continue
        if tokens[i] in ("\\nonumber", "\\notag"):
            i += 1
            continue
        kept.append(tokens[i])
        i += 1
    keys.add(_ROW_SEPARATOR.join(kept))
    # Braced groups (not raw arguments such as environment names, colours or text) and
    # environment bodies and cells.
    stack: list[tuple[bool, int]] = []
    for index, token in enumerate(kept):
        if token == "{":
            previous = kept[index - 1] if index else ""
            raw = previous in _RAW_ARGUMENT_COMMANDS or (previous == "}" and index >= 2 and "\\begin" in kept[max(0, index - 4) : index])
            stack.append((raw, index + 1))
        elif token == "}" and stack:
            raw, start = stack.pop()
            if not raw:
                keys.add(_ROW_SEPARATOR.join(kept[start:index]))
    text = _ROW_SEPARATOR.join(kept)
    for body in re.findall(r"\\begin\x00\{\x00[^\x00]+\x00\}\x00(.*?)\x00\\end\x00\{", text):
        keys.add(body)
        for row in body.split("\x00\\\\\x00"):
            keys.add(row)
            keys.update(row.split("\x00&\x00"))
    return frozenset(keys)


def _compute_neighbours(glyphs: tuple) -> tuple:
    """Nearest glyph in each direction: up/down among glyphs whose centre x is within the
    tolerance, left/right among those whose centre y is; ties go to the lower index."""
    n = len(glyphs)
    tol = TOLERANCE_EM
    by_y = sorted(range(n), key=lambda i: glyphs[i][2])
    ys = [glyphs[i][2] for i in by_y]
    by_x = sorted(range(n), key=lambda i: glyphs[i][1])
    xs = [glyphs[i][1] for i in by_x]
    result = []
    for i in range(n):
        _, cx, cy = glyphs[i]
        up = down = left = right = None
        up_d = down_d = left_d = right_d = 0.0
        lo = bisect.bisect_left(ys, cy - tol - 1e-12)
        hi = bisect.bisect_right(ys, cy + tol + 1e-12)
        for j in by_y[lo:hi]:
            if j == i:
                continue
            _, ox, oy = glyphs[j]
            if abs(oy - cy) > tol:
                continue
            if ox < cx:
                d = cx - ox
                if left is None or d < left_d or (d == left_d and j < left):
                    left, left_d = j, d
            elif ox > cx:
                d = ox - cx
                if right is None or d < right_d or (d == right_d and j < right):
                    right, right_d = j, d
        lo = bisect.bisect_left(xs, cx - tol - 1e-12)
        hi = bisect.bisect_right(xs, cx + tol + 1e-12)
        for j in by_x[lo:hi]:
            if j == i:
                continue
            _, ox, oy = glyphs[j]
            if abs(ox - cx) > tol:
                continue
            if oy > cy:
                d = oy - cy
                if up is None or d < up_d or (d == up_d and j < up):
                    up, up_d = j, d
            elif oy < cy:
                d = cy - oy
                if down is None or d < down_d or (d == down_d and j < down):
                    down, down_d = j, d
        result.append((up, down, left, right))
    return tuple(result)


def equation_contains(candidate: Layout, reference: Layout) -> bool:
    """olmOCR-bench's glyph comparison: can every reference glyph be mapped to a distinct candidate
    glyph with the same character such that, in every direction where the reference glyph has a
    neighbour, the candidate glyph has a neighbour with the same character — the very glyph the
    reference neighbour is mapped to, if that one is already mapped? Assignment proceeds in
    reference glyph order with backtracking, at most ``MAX_MATCH_STEPS`` steps.

    A reference that did not parse matches nothing; an empty reference (no glyphs) matches any
    candidate that parsed (as in olmOCR-bench).
    """
    if reference.error is not None or candidate.error is not None:
        return False
    if reference.key and reference.key in candidate.rows:
        return True  # the MathML-containment route (see _row_keys)
    ref_glyphs = reference.glyphs
    n = len(ref_glyphs)
    if n == 0:
        return True
    cand_counts = candidate.counts()
    for char, count in reference.counts().items():
        if cand_counts.get(char, 0) < count:
            return False
    ref_nb = reference.neighbours()
    cand_nb = candidate.neighbours()
    cand_glyphs = candidate.glyphs
    by_char = candidate.by_char()
    # Static filter: a candidate glyph must have, in each direction the reference glyph has a
    # neighbour, a neighbour with the same character (checked again below in either case).
    options: list[list[int]] = []
    for i in range(n):
        char = ref_glyphs[i][0]
        wanted = [(d, ref_glyphs[nb][0]) for d, nb in enumerate(ref_nb[i]) if nb is not None]
        keep = []
        for j in by_char.get(char, ()):
            for d, nb_char in wanted:
                other = cand_nb[j][d]
                if other is None or cand_glyphs[other][0] != nb_char:
                    break
            else:
                keep.append(j)
        if not keep:
            return False
        options.append(keep)

    assignment: dict[int, int] = {}
    used: set[int] = set()
    steps = 0
    # Iterative depth-first search over reference glyphs in order (olmOCR-bench's recursion).
    choice = [0] * n
    i = 0
    while True:
        if i == n:
            return True
        if i < 0:
            return False
        found = False
        while choice[i] < len(options[i]):
            j = options[i][choice[i]]
            choice[i] += 1
            steps += 1
            if steps > MAX_MATCH_STEPS:
                return False
            if j in used:
                continue
            valid = True
            for d, nb in enumerate(ref_nb[i]):
                if nb is not None and nb in assignment and assignment[nb] != cand_nb[j][d]:
                    valid = False
                    break
            if valid:
                assignment[i] = j
                used.add(j)
                found = True
                break
        if found:
            i += 1
            if i < n:
                choice[i] = 0
            continue
        # Backtrack.
        choice[i] = 0
        i -= 1
        if i >= 0:
            j = assignment.pop(i)
            used.discard(j)
