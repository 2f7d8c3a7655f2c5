"""Keys of the rows KaTeX's MathML gives an ``<mrow>`` of their own (the MathML-containment route)."""

from __future__ import annotations

import re

from .symbols import FONT_COMMANDS, SPACE_WITH_ARGUMENT, TEXT_COMMANDS

__all__ = ["ROW_SEPARATOR", "row_keys"]

ROW_SEPARATOR = "\x00"
# Commands whose braced argument is not a math row in KaTeX's MathML.
_RAW_ARGUMENT_COMMANDS = TEXT_COMMANDS | FONT_COMMANDS | SPACE_WITH_ARGUMENT | {
    "\\begin", "\\end", "\\color", "\\textcolor", "\\colorbox", "\\operatorname", "\\operatorname*",
}
_WRAPPERS_DROPPED = {"\\tag", "\\tag*", "\\label"}


def row_keys(tokens: list[str]) -> frozenset[str]:
    """Keys of the rows KaTeX's MathML wraps in an <mrow> of their own: the whole equation without
    \\tag/\\label, every braced group, every environment's body and cells. olmOCR-bench passes a
    candidate whose MathML contains the reference's; when that holds the reference is one of these
    rows (a conservative stand-in for the MathML comparison, which needs no layout)."""
    kept = _without_tags(tokens)
    keys = {ROW_SEPARATOR.join(kept)}
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
                keys.add(ROW_SEPARATOR.join(kept[start:index]))
    text = ROW_SEPARATOR.join(kept)
    for body in re.findall(r"\\begin\x00\{\x00[^\x00]+\x00\}\x00(.*?)\x00\\end\x00\{", text):
        keys.add(body)
        for row in body.split("\x00\\\\\x00"):
            keys.add(row)
            keys.update(row.split("\x00&\x00"))
    return frozenset(keys)


def _without_tags(tokens: list[str]) -> list[str]:
    """The equation's tokens without \\tag{…}, \\label{…}, \\nonumber and \\notag (KaTeX puts
    the tag in a separate table cell)."""
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
    return kept
