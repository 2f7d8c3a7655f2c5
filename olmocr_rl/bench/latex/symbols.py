"""What LaTeX commands and characters mean to the layout: glyph, math class, and which family of
constructs a command belongs to (fonts, text, spaces, accents, operators, environments).

Command → (character, math class) comes from the Unicode math table shipped with the
``latex2mathml`` dependency, with KaTeX's choices layered on top where they differ.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .errors import LatexError

ORD, OP, BIN, REL, OPEN, CLOSE, PUNCT, INNER = "ord", "op", "bin", "rel", "open", "close", "punct", "inner"

CLASS_OF_UNIMATH = {
    "mathbin": BIN,
    "mathrel": REL,
    "mathopen": OPEN,
    "mathclose": CLOSE,
    "mathpunct": PUNCT,
    "mathop": OP,
}


@lru_cache(maxsize=1)
def symbol_table() -> dict[str, tuple[str, str]]:
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
            cls = CLASS_OF_UNIMATH.get(columns[5], ORD)
            command = columns[2]
            if command.startswith("\\") and command not in exact:
                exact[command] = (char, cls)
            for alias in re.findall(r"=\s*(\\[A-Za-z]+)\b(?!\{)", columns[7]):
                equivalent.setdefault(alias, (char, cls))
    table = {**equivalent, **exact}
    table.update(KATEX_SYMBOLS)
    return table


# KaTeX's rendering where the Unicode table differs, and synonyms KaTeX draws with one glyph.
KATEX_SYMBOLS: dict[str, tuple[str, str]] = {
    "\\to": ("→", REL),
    "\\gets": ("←", REL),
    "\\le": ("≤", REL),
    "\\ge": ("≥", REL),
    "\\ne": ("\ue020=", REL),  # KaTeX: \not= — an overlay slash glyph, then "="
    "\\neq": ("\ue020=", REL),
    "\\cdot": ("⋅", BIN),
    "\\ast": ("∗", BIN),
    "\\vert": ("∣", ORD),
    "\\lvert": ("∣", OPEN),
    "\\rvert": ("∣", CLOSE),
    "\\mid": ("∣", REL),
    "\\Vert": ("∥", ORD),
    "\\lVert": ("∥", OPEN),
    "\\rVert": ("∥", CLOSE),
    "\\|": ("∥", ORD),
    "\\parallel": ("∥", REL),
    "\\{": ("{", OPEN),
    "\\}": ("}", CLOSE),
    "\\lbrace": ("{", OPEN),
    "\\rbrace": ("}", CLOSE),
    "\\lbrack": ("[", OPEN),
    "\\rbrack": ("]", CLOSE),
    "\\langle": ("⟨", OPEN),
    "\\rangle": ("⟩", CLOSE),
    "\\lceil": ("⌈", OPEN),
    "\\rceil": ("⌉", CLOSE),
    "\\lfloor": ("⌊", OPEN),
    "\\rfloor": ("⌋", CLOSE),
    "\\colon": (":", PUNCT),
    "\\ldots": ("…", INNER),
    "\\dotsc": ("…", INNER),
    "\\dotso": ("…", INNER),
    "\\cdots": ("⋯", INNER),
    "\\dotsb": ("⋯", INNER),
    "\\dotsm": ("⋯", INNER),
    "\\dotsi": ("⋯", INNER),
    "\\vdots": ("⋮", ORD),
    "\\ddots": ("⋱", INNER),
    "\\sim": ("∼", REL),
    "\\setminus": ("∖", BIN),
    "\\backslash": ("\\", ORD),
    "\\emptyset": ("∅", ORD),
    "\\varnothing": ("∅", ORD),
    "\\lnot": ("¬", ORD),
    "\\neg": ("¬", ORD),
    "\\land": ("∧", BIN),
    "\\wedge": ("∧", BIN),
    "\\lor": ("∨", BIN),
    "\\vee": ("∨", BIN),
    "\\iff": ("⟺", REL),
    "\\implies": ("⟹", REL),
    "\\impliedby": ("⟸", REL),
    "\\#": ("#", ORD),
    "\\$": ("$", ORD),
    "\\%": ("%", ORD),
    "\\&": ("&", ORD),
    "\\_": ("_", ORD),
    "\\lt": ("<", REL),
    "\\gt": (">", REL),
    "\\prime": ("′", ORD),
    "\\degree": ("°", ORD),
    "\\infty": ("∞", ORD),
    "\\surd": ("√", ORD),
}

# Plain characters in math mode as KaTeX draws them.
MATH_CHARS = {"-": "−", "*": "∗", "|": "∣", "`": "‘"}
CHAR_CLASS = {}
for _ch in "+−±∓×÷⋅∗∘∙∪∩∧∨⊕⊗⊖⊙∖⋆⊎⊔⊓≀⨿":
    CHAR_CLASS[_ch] = BIN
for _ch in "=<>≤≥≠≈≡∼≃≅∈∉∋⊂⊃⊆⊇→←↔⇒⇐⇔↦∝∣∥⊥≪≫≺≻⪯⪰:≐≍⊢⊣⊨⟶⟵⟹⟸⟺≲≳":
    CHAR_CLASS[_ch] = REL
for _ch in "([{⟨⌈⌊":
    CHAR_CLASS[_ch] = OPEN
for _ch in ")]}⟩⌉⌋!?":
    CHAR_CLASS[_ch] = CLOSE
for _ch in ",;":
    CHAR_CLASS[_ch] = PUNCT

# Named operators: (text, takes limits in display style).
FUNCTIONS = {
    **{name: False for name in (
        "arcsin arccos arctan arctg arcctg arg ch cos cosec cosh cot cotg coth csc ctg cth deg dim exp hom "
        "ker lg ln log sec sin sinh sh tan tanh tg th"
    ).split()},
    **{name: True for name in "det gcd inf lim liminf limsup max min Pr sup injlim projlim".split()},
}
FUNCTION_TEXT = {"liminf": "liminf", "limsup": "limsup", "injlim": "injlim", "projlim": "projlim"}

# Big operators: character, limits in display style.
BIG_OPERATORS = {
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
ACCENTS = {
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
BRACES = {"\\overbrace": True, "\\underbrace": False}
INTEGRALS = set("∫∬∭∮∯∰")

FONT_COMMANDS = {
    "\\mathrm", "\\mathit", "\\mathbf", "\\mathsf", "\\mathtt", "\\mathcal", "\\mathscr", "\\mathbb",
    "\\mathfrak", "\\mathnormal", "\\boldsymbol", "\\bm", "\\bold", "\\Bbb", "\\mathbold", "\\pmb",
    "\\mathsfit", "\\symbf", "\\symit", "\\symrm", "\\bf", "\\it", "\\rm", "\\sf", "\\tt", "\\cal",
    "\\frak", "\\Bbb",
}
TEXT_COMMANDS = {"\\text", "\\textrm", "\\textbf", "\\textit", "\\textsf", "\\texttt", "\\textnormal", "\\textup", "\\textmd", "\\mbox", "\\hbox", "\\emph", "\\textsl", "\\textsc"}
CLASS_COMMANDS = {"\\mathord": ORD, "\\mathop": OP, "\\mathbin": BIN, "\\mathrel": REL, "\\mathopen": OPEN, "\\mathclose": CLOSE, "\\mathpunct": PUNCT, "\\mathinner": INNER}
OLD_FONT_SWITCHES = {"\\bf", "\\it", "\\rm", "\\sf", "\\tt", "\\cal", "\\frak", "\\Bbb", "\\bold", "\\boldmath", "\\unboldmath", "\\normalfont", "\\em"}
SPACES = {
    "\\,": 3 / 18, "\\thinspace": 3 / 18, "\\:": 4 / 18, "\\>": 4 / 18, "\\medspace": 4 / 18, "\\;": 5 / 18,
    "\\thickspace": 5 / 18, "\\!": -3 / 18, "\\negthinspace": -3 / 18, "\\negmedspace": -4 / 18,
    "\\negthickspace": -5 / 18, "\\quad": 1.0, "\\qquad": 2.0, "\\enspace": 0.5, "\\ ": 0.25, "\\space": 0.25,
    "\\nobreakspace": 0.25, "~": 0.25, "\\nobreak": 0.0, "\\allowbreak": 0.0, "\\enskip": 0.5,
    "\\relax": 0.0, "\\nonumber": 0.0, "\\notag": 0.0, "\\limits": 0.0, "\\nolimits": 0.0,
    "\\strut": 0.0, "\\mathstrut": 0.0,
}
SPACE_WITH_ARGUMENT = {"\\hspace", "\\hspace*", "\\kern", "\\mkern", "\\hskip", "\\mskip", "\\mspace"}
COLOR_COMMANDS = {"\\textcolor": 2, "\\colorbox": 2, "\\fcolorbox": 3}
DELIMITER_SIZES = {
    "\\big", "\\Big", "\\bigg", "\\Bigg", "\\bigl", "\\Bigl", "\\biggl", "\\Biggl", "\\bigr", "\\Bigr",
    "\\biggr", "\\Biggr", "\\bigm", "\\Bigm", "\\biggm", "\\Biggm",
}
STYLE_SWITCHES = {"\\displaystyle": "D", "\\textstyle": "T", "\\scriptstyle": "S", "\\scriptscriptstyle": "SS"}
ENVIRONMENTS = {
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
ENV_WITH_SPEC = {"array", "darray", "subarray", "alignat", "alignat*", "alignedat"}
ALIGN_ENVS = {"aligned", "align", "align*", "alignat", "alignat*", "alignedat", "split"}

# Commands with a glyph of their own that the Unicode table may lack or misclassify.
EXTRA_COMMANDS = {
    "\\And": ("&", BIN),
    "\\cdotp": ("⋅", PUNCT),
    "\\ldotp": (".", PUNCT),
    "\\mathellipsis": ("…", INNER),
    "\\dotsc": ("…", INNER),
    "\\hbar": ("ℏ", ORD),
    "\\ell": ("ℓ", ORD),
    "\\Box": ("□", ORD),
    "\\square": ("□", ORD),
    "\\checkmark": ("✓", ORD),
    "\\bigstar": ("★", ORD),
    "\\diamond": ("⋄", BIN),
    "\\lvertneqq": ("≨", REL),
}


# =================================================================================================
# Tree
# =================================================================================================


# KaTeX stretches these by stacking pieces (drawn as SVG, no text) as soon as they must be larger
# than the normal glyph; the large-delimiter ones use bigger font glyphs up to 3 em first.
STACK_ALWAYS = set("∣∥↑↓↕⇑⇓⇕")
STACK_LARGE = set("()[]{}⌊⌋⌈⌉√")


def delimiter_char(token: str) -> str:
    """The character a delimiter token draws ("" for `.`); raises :class:`LatexError` if it is none."""
    if token in (".", ""):
        return ""
    if token in ("<", ">"):
        return "⟨" if token == "<" else "⟩"
    if not token.startswith("\\") and token not in "()[]|/":
        raise LatexError(f"invalid delimiter {token!r}")
    if token.startswith("\\"):
        entry = KATEX_SYMBOLS.get(token) or symbol_table().get(token)
        if entry is None:
            raise LatexError(f"invalid delimiter {token}")
        return entry[0]
    return MATH_CHARS.get(token, token)
