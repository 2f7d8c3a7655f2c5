"""What each LaTeX command parses to: a table from command name to handler.

A handler gets the parser (positioned just after the command) and the command's name, reads the
command's arguments and returns its node. :data:`COMMANDS` holds every command with a handler of
its own; any other command is a symbol (:func:`symbol_node`) or undefined. A command listed in two
families keeps the handler of the family registered first (``\\bf`` is an old font switch, not a
font command taking an argument).
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

from .errors import LatexError
from .nodes import Accent, Array, Cell, Frac, Group, LeftRight, Node, Op, Space, Sqrt, Stack, StyleSwitch, Sym, Tag, Text
from .symbols import (
    ACCENTS,
    ALIGN_ENVS,
    BIG_OPERATORS,
    BIN,
    BRACES,
    CHAR_CLASS,
    CLASS_COMMANDS,
    CLOSE,
    COLOR_COMMANDS,
    DELIMITER_SIZES,
    ENV_WITH_SPEC,
    ENVIRONMENTS,
    EXTRA_COMMANDS,
    FONT_COMMANDS,
    FUNCTION_TEXT,
    FUNCTIONS,
    INNER,
    KATEX_SYMBOLS,
    MATH_CHARS,
    OLD_FONT_SWITCHES,
    OPEN,
    ORD,
    REL,
    SPACE_WITH_ARGUMENT,
    SPACES,
    STACK_ALWAYS,
    STYLE_SWITCHES,
    TEXT_COMMANDS,
    delimiter_char,
    symbol_table,
)

__all__ = ["COMMANDS", "CommandParser", "is_argument_free", "symbol_node"]


class CommandParser(Protocol):
    """The parser operations handlers use (see :class:`olmocr_rl.bench.latex.parser.Parser`)."""

    def peek(self, skip_space: bool = True) -> str | None: ...
    def take(self, skip_space: bool = True) -> str | None: ...
    def expect(self, token: str) -> None: ...
    def enter(self) -> None: ...
    def leave(self) -> None: ...
    def raw_group(self) -> str: ...
    def optional_raw(self) -> str | None: ...
    def argument(self, text_mode: bool = False) -> Node: ...
    def atom_or_scripts(self) -> Node: ...
    def rows_until(self, end_token: str | None, end_name: str | None) -> list[list[Cell]]: ...
    def subparse(self, source: str) -> list[Node]: ...


Handler = Callable[[CommandParser, str], Node]

_WRAPPERS = (
    "\\boxed", "\\fbox", "\\cancel", "\\bcancel", "\\xcancel", "\\sout", "\\smash", "\\mathclap", "\\mathllap",
    "\\mathrlap", "\\clap", "\\llap", "\\rlap", "\\hphantom",
)
_EXTENSIBLE_ARROWS = ("\\xrightarrow", "\\xleftarrow", "\\xRightarrow", "\\xLeftarrow", "\\xleftrightarrow", "\\xmapsto")
_FRAC_STYLES = {"\\frac": None, "\\dfrac": "D", "\\tfrac": "T", "\\cfrac": "D"}
_BINOM_STYLES = {"\\binom": None, "\\dbinom": "D", "\\tbinom": "T"}
_GENFRAC_STYLES = {"0": "D", "1": "T", "2": "S", "3": "SS"}


# --- handlers -------------------------------------------------------------------------------------


def _line_break(parser: CommandParser, name: str) -> Node:
    raise LatexError("line break outside a row context")


def _without_left(parser: CommandParser, name: str) -> Node:
    raise LatexError(f"{name} without \\left")


def _end_without_begin(parser: CommandParser, name: str) -> Node:
    raise LatexError("\\end without \\begin")


def _space(parser: CommandParser, name: str) -> Node:
    return Space(SPACES[name])


def _nothing(parser: CommandParser, name: str) -> Node:
    return Space(0.0)


def _space_with_argument(parser: CommandParser, name: str) -> Node:
    parser.raw_group()
    return Space(0.0)


def _style_switch(parser: CommandParser, name: str) -> Node:
    return StyleSwitch(STYLE_SWITCHES[name])


def _font(parser: CommandParser, name: str) -> Node:
    return Group([parser.argument()])


def _text(parser: CommandParser, name: str) -> Node:
    return parser.argument(text_mode=True)


def _math_class(parser: CommandParser, name: str) -> Node:
    return Group([parser.argument()], cls=CLASS_COMMANDS[name])


def _operatorname(parser: CommandParser, name: str) -> Node:
    text = parser.argument(text_mode=True)
    chunks = text.chunks if isinstance(text, Text) else []  # a text-mode argument is always Text
    chars = "".join(chunk for chunk in chunks if isinstance(chunk, str)).replace(" ", "")
    return Op(chars, limits=name != "\\operatorname", symbol=False)


def _function(parser: CommandParser, name: str) -> Node:
    return Op(FUNCTION_TEXT.get(name[1:], name[1:]), limits=FUNCTIONS[name[1:]], symbol=False)


def _big_operator(parser: CommandParser, name: str) -> Node:
    char, limits = BIG_OPERATORS[name]
    return Op(char, limits=limits, symbol=True)


def _frac(parser: CommandParser, name: str) -> Node:
    num = parser.argument()
    den = parser.argument()
    return Frac(num, den, style=_FRAC_STYLES[name])


def _binom(parser: CommandParser, name: str) -> Node:
    num = parser.argument()
    den = parser.argument()
    return Frac(num, den, style=_BINOM_STYLES[name], bar=False, left="(", right=")")


def _genfrac(parser: CommandParser, name: str) -> Node:
    left = parser.raw_group()
    right = parser.raw_group()
    parser.raw_group()
    style_code = parser.raw_group().strip()
    num = parser.argument()
    den = parser.argument()
    style = _GENFRAC_STYLES.get(style_code)
    return Frac(num, den, style=style, left=delimiter_char(left.strip()), right=delimiter_char(right.strip()))


def _sqrt(parser: CommandParser, name: str) -> Node:
    index_source = parser.optional_raw()
    index = Group(parser.subparse(index_source)) if index_source else None
    return Sqrt(parser.argument(), index)


def _accent(parser: CommandParser, name: str) -> Node:
    char, dy = ACCENTS[name]
    return Accent(parser.argument(), char, dy, under=name.startswith("\\under"))


def _brace(parser: CommandParser, name: str) -> Node:
    return Stack(parser.argument(), brace=True)


def _overset(parser: CommandParser, name: str) -> Node:
    over = parser.argument()
    return Stack(parser.argument(), over=over)


def _underset(parser: CommandParser, name: str) -> Node:
    under = parser.argument()
    return Stack(parser.argument(), under=under)


def _substack(parser: CommandParser, name: str) -> Node:
    parser.expect("{")
    rows = parser.rows_until("}", None)
    return Array(rows, "", "", 0.0, 0.85, False, False)


def _left_right(parser: CommandParser, name: str) -> Node:
    """``\\left`` … ``\\right``: the body up to the matching ``\\right``, with ``\\middle`` bars."""
    left = parser.take()
    if left is None:
        raise LatexError("missing delimiter after \\left")
    body: list[Node] = []
    parser.enter()
    while True:
        token = parser.peek()
        if token is None:
            raise LatexError("\\left without \\right")
        if token == "\\right":
            parser.take()
            right = parser.take()
            if right is None:
                raise LatexError("missing delimiter after \\right")
            break
        if token == "\\middle":
            parser.take()
            middle = parser.take()
            body.append(Sym(delimiter_char(middle or ""), REL))
            continue
        if token == "}":
            raise LatexError("unbalanced '}' inside \\left…\\right")
        if token in STYLE_SWITCHES:
            parser.take()
            body.append(StyleSwitch(STYLE_SWITCHES[token]))
            continue
        body.append(parser.atom_or_scripts())
    parser.leave()
    return LeftRight(delimiter_char(left), body, delimiter_char(right))


def _sized_delimiter(parser: CommandParser, name: str) -> Node:
    delimiter = parser.take()
    if delimiter is None:
        raise LatexError(f"missing delimiter after {name}")
    char = delimiter_char(delimiter)
    if char in STACK_ALWAYS:
        char = ""  # \\big| and friends: a stacked (SVG) bar in KaTeX, no glyph
    if name.endswith("l"):
        cls = OPEN
    elif name.endswith("r"):
        cls = CLOSE
    elif name.endswith("m"):
        cls = REL
    else:
        cls = CHAR_CLASS.get(char, ORD)
    return Sym(char, cls) if char else Space(0.0)


def _environment(parser: CommandParser, name: str) -> Node:
    env = parser.raw_group().strip()
    if env not in ENVIRONMENTS:
        raise LatexError(f"no such environment: {env}")
    if env in ENV_WITH_SPEC:
        parser.raw_group()
    elif env.endswith("matrix*"):
        parser.optional_raw()
    left, right, col_gap, row_step, display = ENVIRONMENTS[env]
    rows = parser.rows_until(None, env)
    return Array(rows, left, right, col_gap, row_step, display, env in ALIGN_ENVS)


def _tag(parser: CommandParser, name: str) -> Node:
    text = parser.argument(text_mode=True)
    chunks = text.chunks if isinstance(text, Text) else [text]
    return Tag(chunks if name == "\\tag*" else ["("] + chunks + [")"])


def _colored(parser: CommandParser, name: str) -> Node:
    for _ in range(COLOR_COMMANDS[name] - 1):
        parser.raw_group()
    return parser.argument(text_mode=name != "\\textcolor")


def _wrapper(parser: CommandParser, name: str) -> Node:
    return Group([parser.argument(text_mode=name == "\\fbox")])


def _phantom(parser: CommandParser, name: str) -> Node:
    parser.argument()
    return Space(0.5)


def _vphantom(parser: CommandParser, name: str) -> Node:
    parser.argument()
    return Space(0.0)


def _extensible_arrow(parser: CommandParser, name: str) -> Node:
    below = parser.optional_raw()
    above = parser.argument()
    return Stack(Space(1.0), over=above, under=Group(parser.subparse(below)) if below else None)


def _not(parser: CommandParser, name: str) -> Node:
    return Sym("\u0338", REL)


def _dots(parser: CommandParser, name: str) -> Node:
    """KaTeX's \\dots: centred (⋯) before a binary operator, relation or integral, else low (…)."""
    following = parser.peek()
    if following is None:
        return Sym("…", INNER)
    if following.startswith("\\"):
        entry = KATEX_SYMBOLS.get(following) or symbol_table().get(following)
        if following in ("\\int", "\\iint", "\\iiint", "\\oint"):
            return Sym("⋯", INNER)
        return Sym("⋯" if entry is not None and entry[1] in (BIN, REL) else "…", INNER)
    char = MATH_CHARS.get(following, following)
    return Sym("⋯" if CHAR_CLASS.get(char) in (BIN, REL) else "…", INNER)


def symbol_node(name: str) -> Node:
    """A command without a handler: its symbol, or :class:`LatexError` when there is none."""
    entry = EXTRA_COMMANDS.get(name) or symbol_table().get(name)
    if entry is None:
        raise LatexError(f"undefined control sequence {name}")
    char, cls = entry
    return Sym(char, cls)


# --- the table ------------------------------------------------------------------------------------

# Families in priority order: a command in two families keeps its first handler.
_FAMILIES: tuple[tuple[Iterable[str], Handler], ...] = (
    (("\\\\", "\\newline", "\\cr"), _line_break),
    (SPACES, _space),
    (SPACE_WITH_ARGUMENT, _space_with_argument),
    (STYLE_SWITCHES, _style_switch),
    (OLD_FONT_SWITCHES, _nothing),
    (FONT_COMMANDS, _font),
    (TEXT_COMMANDS, _text),
    (CLASS_COMMANDS, _math_class),
    (("\\operatorname", "\\operatorname*", "\\operatornamewithlimits"), _operatorname),
    (["\\" + name for name in FUNCTIONS], _function),
    (BIG_OPERATORS, _big_operator),
    (_FRAC_STYLES, _frac),
    (_BINOM_STYLES, _binom),
    (("\\genfrac",), _genfrac),
    (("\\sqrt",), _sqrt),
    (ACCENTS, _accent),
    (BRACES, _brace),
    (("\\overset", "\\stackrel"), _overset),
    (("\\underset",), _underset),
    (("\\substack",), _substack),
    (("\\left",), _left_right),
    (("\\right", "\\middle"), _without_left),
    (DELIMITER_SIZES, _sized_delimiter),
    (("\\begin",), _environment),
    (("\\end",), _end_without_begin),
    (("\\tag", "\\tag*"), _tag),
    (COLOR_COMMANDS, _colored),
    (("\\color",), _space_with_argument),
    (_WRAPPERS, _wrapper),
    (("\\phantom",), _phantom),
    (("\\vphantom",), _vphantom),
    (_EXTENSIBLE_ARROWS, _extensible_arrow),
    (("\\not",), _not),
    (("\\hline", "\\hdashline", "\\displaylimits"), _nothing),
    (("\\dots",), _dots),
)


def _command_table() -> dict[str, Handler]:
    table: dict[str, Handler] = {}
    for names, handler in _FAMILIES:
        for name in names:
            table.setdefault(name, handler)
    return table


COMMANDS: dict[str, Handler] = _command_table()

# Handlers of the families that take no argument and are no structure; every other family's commands
# take arguments (or are structure: \\end, \\right, \\not, …).
_ARGUMENT_FREE_HANDLERS = (_line_break, _space, _style_switch, _nothing, _function, _big_operator, _dots)

# Commands that take arguments (or are structure): KaTeX refuses them as an unbraced argument. By
# family, not by the table's winning handler: \\bf and the other old font switches (handled as
# nothing) are font commands too. \\label has no handler here, but it is structure as well.
STRUCTURAL_COMMANDS = {
    name for names, handler in _FAMILIES if handler not in _ARGUMENT_FREE_HANDLERS for name in names
} | {"\\label"}


def is_argument_free(name: str) -> bool:
    """Whether the command ``name`` may stand alone as an unbraced argument. KaTeX refuses
    functions there ("Got function '\\sum' with no arguments as subscript"), operators included."""
    return name not in STRUCTURAL_COMMANDS and name not in BIG_OPERATORS and name[1:] not in FUNCTIONS
