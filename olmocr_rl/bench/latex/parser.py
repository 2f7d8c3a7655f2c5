"""LaTeX → a tree of :mod:`nodes`: tokenizer and recursive-descent parser.

The parser reads atoms, scripts, groups, infix fractions (``\\over``), rows of environments and
text-mode arguments; what a command means is looked up in :data:`commands.COMMANDS`. Commands KaTeX
does not know and unbalanced groups raise :class:`LatexError`, as KaTeX refuses to render them.
"""

from __future__ import annotations

import re

from .commands import COMMANDS, is_argument_free, symbol_node
from .errors import MAX_DEPTH, MAX_EQUATION_CHARS, LatexError
from .nodes import Array, Cell, Frac, Group, Node, Op, Scripts, Space, StyleSwitch, Sym, Text, TextChunk
from .symbols import CHAR_CLASS, EXTRA_COMMANDS, FONT_COMMANDS, MATH_CHARS, OP, ORD, STYLE_SWITCHES, TEXT_COMMANDS, symbol_table

__all__ = ["Parser", "parse", "syntax_problem", "tokenize"]

_TOKEN = re.compile(r"\\[A-Za-z]+\*?|\\[^A-Za-z]|%[^\n]*|\s+|.", re.DOTALL)


def tokenize(source: str) -> list[str]:
    """LaTeX tokens: ``\\command`` (with a trailing ``*``), ``\\x``, whitespace runs, single chars;
    comments dropped."""
    return [token for token in _TOKEN.findall(source) if not token.startswith("%")]


class Parser:
    """A recursive-descent parser over one equation's tokens; see :func:`parse`."""

    def __init__(self, source: str) -> None:
        self.tokens = tokenize(source)
        self.pos = 0
        self.depth = 0

    # --- token helpers ---------------------------------------------------------------------------

    def peek(self, skip_space: bool = True) -> str | None:
        """The next token (whitespace skipped unless told otherwise), not consumed; None at the end."""
        pos = self.pos
        while skip_space and pos < len(self.tokens) and self.tokens[pos].isspace():
            pos += 1
        return self.tokens[pos] if pos < len(self.tokens) else None

    def take(self, skip_space: bool = True) -> str | None:
        """Consume and return the next token; None at the end."""
        while skip_space and self.pos < len(self.tokens) and self.tokens[self.pos].isspace():
            self.pos += 1
        if self.pos >= len(self.tokens):
            return None
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        """Consume ``token``, or raise."""
        got = self.take()
        if got != token:
            raise LatexError(f"expected {token!r}, got {got!r}")

    def enter(self) -> None:
        """One nesting level deeper; raises past ``MAX_DEPTH``."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LatexError("nesting too deep")

    def leave(self) -> None:
        """One nesting level back out."""
        self.depth -= 1

    def subparse(self, source: str) -> list[Node]:
        """A separate source (an optional argument such as a root's index), parsed on its own."""
        return Parser(source).parse()

    # --- arguments -------------------------------------------------------------------------------

    def raw_group(self) -> str:
        """The text of a braced argument, unparsed (environment names, colours, dimensions)."""
        token = self.take()
        if token != "{":
            if token is None:
                raise LatexError("missing argument")
            return token
        depth, parts = 1, []
        while True:
            token = self.take(skip_space=False)
            if token is None:
                raise LatexError("unbalanced braces")
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
                if depth == 0:
                    return "".join(parts)
            parts.append(token)

    def optional_raw(self) -> str | None:
        """The text of an optional ``[…]`` argument, unparsed; None when there is none."""
        if self.peek() != "[":
            return None
        self.take()
        depth, parts = 0, []
        while True:
            token = self.take(skip_space=False)
            if token is None:
                raise LatexError("unterminated optional argument")
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
            elif token == "]" and depth == 0:
                return "".join(parts)
            parts.append(token)

    def argument(self, text_mode: bool = False) -> Node:
        """One argument: a braced group or a single token (a command counts as one)."""
        token = self.peek()
        if token is None:
            raise LatexError("missing argument")
        if token == "{":
            self.take()
            if text_mode:
                return Text(self.text_until_close())
            return Group(self.expression(stop={"}"}, closing="}"))
        if token in ("}", "&", "\\\\", "^", "_"):
            raise LatexError(f"missing argument before {token!r}")
        if token.startswith("\\") and not is_argument_free(token):
            # KaTeX: "Got function '\\vec' with no arguments as argument to '\\dot'".
            raise LatexError(f"got function {token} with no arguments as an argument")
        if text_mode:
            self.take()
            return Text([token])
        return self.atom()

    def text_until_close(self) -> list[TextChunk]:
        """Text-mode content up to the matching ``}``: characters, with nested groups and a few
        commands that print characters."""
        chunks: list[TextChunk] = []
        self.enter()
        while True:
            token = self.take(skip_space=False)
            if token is None:
                raise LatexError("unbalanced braces in text")
            if token == "}":
                break
            if token == "{":
                chunks.extend(self.text_until_close())
            elif token == "$":
                math: list[Node] = []
                while self.peek(skip_space=False) not in ("$", None):
                    math.append(self.atom_or_scripts())
                if self.take() != "$":
                    raise LatexError("unterminated $ in text")
                chunks.append(Group(math))
            elif token.startswith("\\"):
                if token in TEXT_COMMANDS or token in FONT_COMMANDS:
                    continue  # nested font/text switch: its group follows and is read as text
                if token in ("\\ ", "\\,", "\\;", "\\quad", "\\qquad", "~", "\\!", "\\:"):
                    chunks.append(" ")
                elif len(token) == 2:
                    chunks.append(token[1])
                else:
                    entry = symbol_table().get(token) or EXTRA_COMMANDS.get(token)
                    if entry is None:
                        raise LatexError(f"undefined control sequence {token}")
                    chunks.append(entry[0])
            elif token.isspace():
                chunks.append(" ")
            elif token == "~":
                chunks.append(" ")
            else:
                chunks.append(token)
        self.leave()
        return chunks

    # --- expressions -----------------------------------------------------------------------------

    def parse(self) -> list[Node]:
        """All tokens as one expression; anything left over is an error."""
        nodes = self.expression(stop=set())
        if self.pos < len(self.tokens) and self.peek() is not None:
            raise LatexError(f"unexpected {self.peek()!r}")
        return nodes

    def expression(self, stop: set[str], closing: str | None = None) -> list[Node]:
        """Atoms up to (and consuming) ``closing``, or up to a token in ``stop`` (not consumed)."""
        self.enter()
        nodes: list[Node] = []
        over: tuple[str, list[Node]] | None = None  # \over, \choose: (kind, numerator nodes)
        while True:
            token = self.peek()
            if token is None:
                if closing is not None:
                    raise LatexError(f"missing {closing!r}")
                break
            if closing is not None and token == closing:
                self.take()
                break
            if token in stop:
                break
            if token == "}":
                raise LatexError("unbalanced '}'")
            if token in ("\\over", "\\choose", "\\atop", "\\above"):
                self.take()
                if token == "\\above":
                    self.raw_group()
                over = (token, nodes)
                nodes = []
                continue
            if token in STYLE_SWITCHES:
                self.take()
                nodes.append(StyleSwitch(STYLE_SWITCHES[token]))
                continue
            nodes.append(self.atom_or_scripts())
        self.leave()
        if over is not None:
            kind, numerator = over
            frac = Frac(Group(numerator), Group(nodes), bar=kind in ("\\over", "\\above"))
            if kind == "\\choose":
                frac.left, frac.right = "(", ")"
            return [frac]
        return nodes

    def atom_or_scripts(self) -> Node:
        """An atom with its scripts: primes, ``^``, ``_``, ``\\limits``/``\\nolimits``."""
        # Primes with nothing before them are a superscript of an empty base (x^{'} is not x').
        base = Group([]) if self.peek() == "'" else self.atom()
        if isinstance(base, (Space, StyleSwitch)) and self.peek() not in ("^", "_"):
            return base
        sub: Node | None = None
        sup: Node | None = None
        limits: bool | None = None
        while True:
            token = self.peek(skip_space=True)
            if token in ("\\limits", "\\nolimits"):
                self.take()
                limits = token == "\\limits"
                continue
            if token == "'":
                # KaTeX: adjacent primes form one superscript, which a directly following ^{…}
                # extends; a prime after a superscript is a double superscript.
                if sup is not None:
                    raise LatexError("double superscript")
                self.take()
                primes = "′"
                while self.peek(skip_space=False) == "'":
                    self.take(skip_space=False)
                    primes += "′"
                sup = Sym(primes, ORD)
                if self.peek(skip_space=False) == "^":
                    self.take()
                    sup = Group([sup, self.script_argument()])
                continue
            if token == "^":
                self.take()
                if sup is not None:
                    raise LatexError("double superscript")
                sup = self.script_argument()
                continue
            if token == "_":
                self.take()
                if sub is not None:
                    raise LatexError("double subscript")
                sub = self.script_argument()
                continue
            break
        if limits is not None and not _is_operator(base):
            raise LatexError("limit controls must follow a math operator")  # KaTeX's rule for \\limits/\\nolimits
        if sub is None and sup is None:  # nothing to place: a limit control alone changes nothing
            return base
        return Scripts(base, sub, sup, limits)

    def script_argument(self) -> Node:
        """The argument of ``^`` or ``_``."""
        token = self.peek()
        if token is None:
            raise LatexError("missing script")
        if token in ("^", "_", "}", "&", "\\\\"):
            raise LatexError(f"missing script before {token!r}")
        return self.argument()

    def atom(self) -> Node:
        """One atom: a group, a character, or a command's node (see :data:`commands.COMMANDS`)."""
        token = self.take()
        if token is None:
            raise LatexError("missing atom")
        if token == "{":
            return Group(self.expression(stop=set(), closing="}"))
        if token == "}":
            raise LatexError("unbalanced '}'")
        if token in ("^", "_"):
            # A script with an empty base, as in {}^{2} or ^2 at the start: KaTeX allows it.
            self.pos -= 1
            return Group([])
        if token == "&":
            raise LatexError("'&' outside an environment")
        if token == "'":
            return Sym("′", ORD)
        if token == "~":
            return Space(0.25)
        if token.startswith("\\"):
            handler = COMMANDS.get(token)
            return handler(self, token) if handler is not None else symbol_node(token)
        if token == "$":
            raise LatexError("'$' in math")
        char = MATH_CHARS.get(token, token)
        return Sym(char, CHAR_CLASS.get(char, ORD))

    def rows_until(self, end_token: str | None, end_name: str | None) -> list[list[Cell]]:
        """Rows of cells separated by ``&`` and ``\\\\`` until ``\\end{end_name}`` (or ``}``)."""
        rows: list[list[Cell]] = [[[]]]
        self.enter()
        while True:
            token = self.peek()
            if token is None:
                raise LatexError(f"missing \\end{{{end_name}}}" if end_name else "missing '}'")
            if end_name is not None and token == "\\end":
                self.take()
                name = self.raw_group().strip()
                if name != end_name:
                    raise LatexError(f"\\begin{{{end_name}}} ended by \\end{{{name}}}")
                break
            if end_token is not None and token == end_token:
                self.take()
                break
            if token == "&":
                self.take()
                rows[-1].append([])
                continue
            if token in ("\\\\", "\\cr", "\\newline"):
                self.take()
                self.optional_raw()  # \\[2pt]
                rows.append([[]])
                continue
            if token in ("\\hline", "\\hdashline"):
                self.take()
                continue
            if token == "}":
                raise LatexError("unbalanced '}'")
            if token in STYLE_SWITCHES:
                self.take()
                rows[-1][-1].append(StyleSwitch(STYLE_SWITCHES[token]))
                continue
            rows[-1][-1].append(self.atom_or_scripts())
        self.leave()
        if rows and rows[-1] == [[]]:
            rows.pop()  # a trailing \\ does not start a row
        return rows


def parse(source: str) -> list[Node]:
    """The nodes of a whole equation; top-level line breaks make it a one-column array."""
    if len(source) > MAX_EQUATION_CHARS:
        raise LatexError(f"equation longer than {MAX_EQUATION_CHARS} characters")
    parser = Parser(source)
    lines: list[list[Node]] = [[]]
    while True:
        token = parser.peek()
        if token is None:
            break
        if token in ("\\\\", "\\newline", "\\cr"):
            parser.take()
            parser.optional_raw()
            lines.append([])
            continue
        if token == "}":
            raise LatexError("unbalanced '}'")
        if token == "&":
            raise LatexError("'&' outside an environment")
        if token in STYLE_SWITCHES:
            parser.take()
            lines[-1].append(StyleSwitch(STYLE_SWITCHES[token]))
            continue
        if token in ("\\over", "\\choose", "\\atop", "\\above"):
            lines[-1] = [_top_level_fraction(parser, token, lines[-1])]
            continue
        lines[-1].append(parser.atom_or_scripts())
    if len(lines) == 1:
        return lines[0]
    return [Array([[line] for line in lines], "", "", 0.0, 1.2, True, False)]


def _top_level_fraction(parser: Parser, token: str, numerator: list[Node]) -> Frac:
    """Infix fraction at the top level: everything before over everything after (to a line break)."""
    parser.take()
    if token == "\\above":
        parser.raw_group()
    rest = parser.expression(stop={"\\\\"})
    frac = Frac(Group(numerator), Group(rest), bar=token != "\\choose" and token != "\\atop")
    if token == "\\choose":
        frac.left, frac.right = "(", ")"
    return frac


def syntax_problem(source: str) -> str | None:
    """Why ``source`` does not parse as (KaTeX-compatible) LaTeX, or None if it does."""
    try:
        parse(source)
    except LatexError as error:
        return str(error)
    except RecursionError:
        return "nesting too deep"
    return None


def _is_operator(node: Node) -> bool:
    """A big or named operator (``\\sum``, ``\\lim``, ``\\operatorname*``), or a symbol or group of class op."""
    return isinstance(node, Op) or (isinstance(node, (Sym, Group)) and node.cls == OP)
