"""Font metrics and spacing: TeX's font parameters, approximate glyph widths and heights, the four
styles and their sizes, and the inter-atom spacing table."""

from __future__ import annotations

from .symbols import BIN, CLOSE, INNER, OP, OPEN, ORD, PUNCT, REL

CENTER = 0.345  # a glyph box's centre sits this far above its baseline, in units of its size
VLIST_END = 2.0 / 29.04  # KaTeX's vlists end in a zero-width-space span drawn 2 px wide

# TeX font parameters (cmsy10 / cmsy7 / cmsy5 and cmex10), as KaTeX uses them, by size class.
METRICS = {
    "text": dict(xHeight=0.431, num1=0.677, num2=0.394, num3=0.444, denom1=0.686, denom2=0.345, sup1=0.413, sup2=0.363, sup3=0.289, sub1=0.150, sub2=0.247, supDrop=0.386, subDrop=0.050, axis=0.250, rule=0.04),
    "script": dict(xHeight=0.431, num1=0.732, num2=0.384, num3=0.471, denom1=0.752, denom2=0.344, sup1=0.503, sup2=0.431, sup3=0.286, sub1=0.143, sub2=0.286, supDrop=0.353, subDrop=0.071, axis=0.250, rule=0.049),
    "scriptscript": dict(xHeight=0.431, num1=0.925, num2=0.387, num3=0.504, denom1=1.025, denom2=0.532, sup1=0.504, sup2=0.404, sup3=0.294, sub1=0.200, sub2=0.400, supDrop=0.494, subDrop=0.100, axis=0.250, rule=0.049),
}
BIG_OP_SPACING = (0.111, 0.166, 0.2, 0.6, 0.1)

# Advance widths (em) of the glyphs as KaTeX's render page shows them: its own fonts are not
# loaded there, so Chromium falls back to Times-like system fonts (measured on Debian's Chromium).
ITALIC_WIDTHS = dict(zip("abcdefghijklmnopqrstuvwxyz", (0.5, 0.5, 0.444, 0.5, 0.444, 0.278, 0.5, 0.5, 0.278, 0.278, 0.444, 0.278, 0.722, 0.5, 0.5, 0.5, 0.5, 0.39, 0.39, 0.278, 0.5, 0.444, 0.667, 0.444, 0.444, 0.39)))
ITALIC_WIDTHS.update(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", (0.611, 0.611, 0.667, 0.722, 0.611, 0.611, 0.722, 0.722, 0.333, 0.444, 0.667, 0.556, 0.833, 0.667, 0.722, 0.611, 0.722, 0.611, 0.5, 0.556, 0.722, 0.611, 0.833, 0.611, 0.556, 0.556)))
UPRIGHT_WIDTHS = dict(zip("abcdefghijklmnopqrstuvwxyz", (0.444, 0.5, 0.444, 0.5, 0.444, 0.333, 0.5, 0.5, 0.278, 0.278, 0.5, 0.278, 0.778, 0.5, 0.5, 0.5, 0.5, 0.333, 0.39, 0.278, 0.5, 0.5, 0.722, 0.5, 0.5, 0.444)))
UPRIGHT_WIDTHS.update(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", (0.722, 0.667, 0.667, 0.722, 0.611, 0.556, 0.722, 0.722, 0.333, 0.39, 0.722, 0.611, 0.889, 0.722, 0.722, 0.556, 0.722, 0.667, 0.556, 0.611, 0.722, 0.722, 0.944, 0.722, 0.722, 0.611)))
SYMBOL_WIDTHS = {
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
DEFAULT_WIDTH = 0.5


def char_width(char: str, upright: bool = False) -> float:
    """Advance width (em at size 1) of ``char``, upright (text) or italic (math letters)."""
    width = (UPRIGHT_WIDTHS if upright else ITALIC_WIDTHS).get(char)
    if width is None:
        width = SYMBOL_WIDTHS.get(char, DEFAULT_WIDTH)
    return width


ASCENDERS = set("bdfhklt0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ()[]{}|∣∥/\\∂δλ⟨⟩⌈⌉⌊⌋θβζξ!?′")
DESCENDERS = set("gjpqyf()[]{}|∣∥/\\βγζημξρφχψ⟨⟩⌈⌉⌊⌋,;")


def char_height_depth(char: str) -> tuple[float, float]:
    """Height and depth (em at size 1) of ``char``'s box."""
    height = 0.694 if char in ASCENDERS else 0.431
    if char in "()[]{}∣∥⟨⟩⌈⌉⌊⌋|/\\":
        return 0.75, 0.25
    if char in "+−=<>±×÷⋅∗∘≤≥≠≈≡∼":
        return 0.583, 0.083
    depth = 0.194 if char in DESCENDERS else 0.0
    return height, depth


# Styles: D, T, S, SS (display, text, script, scriptscript); a trailing "'" marks TeX's cramped
# variant (denominators, subscripts, radicands, accented bases), where superscripts sit lower.
SIZE = {"D": 1.0, "T": 1.0, "S": 0.7, "SS": 0.5}
METRIC_SET = {"D": "text", "T": "text", "S": "script", "SS": "scriptscript"}
SUP_STYLE = {"D": "S", "T": "S", "S": "SS", "SS": "SS"}
FRAC_STYLE = {"D": "T", "T": "S", "S": "SS", "SS": "SS"}


def base_style(style: str) -> str:
    """The style without its cramped mark."""
    return style.rstrip("'")


def cramped(style: str) -> str:
    """The cramped variant of ``style``."""
    return style if style.endswith("'") else style + "'"


def keep_cramp(style: str, new_base: str) -> str:
    """``new_base``, cramped if ``style`` is."""
    return new_base + ("'" if style.endswith("'") else "")



# Inter-atom spacing in mu (1/18 em): (left class, right class) -> (space, also in script styles).
THIN, MED, THICK = 3 / 18, 4 / 18, 5 / 18
SPACING = {
    (ORD, OP): (THIN, True), (ORD, BIN): (MED, False), (ORD, REL): (THICK, False), (ORD, INNER): (THIN, False),
    (OP, ORD): (THIN, True), (OP, OP): (THIN, True), (OP, REL): (THICK, False), (OP, INNER): (THIN, False),
    (BIN, ORD): (MED, False), (BIN, OP): (MED, False), (BIN, OPEN): (MED, False), (BIN, INNER): (MED, False),
    (REL, ORD): (THICK, False), (REL, OP): (THICK, False), (REL, OPEN): (THICK, False), (REL, INNER): (THICK, False),
    (CLOSE, OP): (THIN, True), (CLOSE, BIN): (MED, False), (CLOSE, REL): (THICK, False), (CLOSE, INNER): (THIN, False),
    (PUNCT, ORD): (THIN, False), (PUNCT, OP): (THIN, False), (PUNCT, REL): (THIN, False), (PUNCT, OPEN): (THIN, False),
    (PUNCT, CLOSE): (THIN, False), (PUNCT, PUNCT): (THIN, False), (PUNCT, INNER): (THIN, False),
    (INNER, ORD): (THIN, False), (INNER, OP): (THIN, True), (INNER, BIN): (MED, False), (INNER, REL): (THICK, False),
    (INNER, OPEN): (THIN, False), (INNER, PUNCT): (THIN, False), (INNER, INNER): (THIN, False),
}
