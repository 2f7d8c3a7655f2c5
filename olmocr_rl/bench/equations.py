"""Candidate equations of a completion, in olmOCR-bench's extraction order.

The delimiters are tried in turn — ``\\( … \\)``, ``\\[ … \\]``, then (unless dollar-delimited
equations are ignored) ``$$ … $$`` and ``$ … $`` — each one's matches removed before the next is
applied; non-greedy, across lines, at least one character, stripped. Scanned with ``str.find``: the
same matches as olmOCR-bench's regexes, in linear time. A leaf module: it imports nothing of the
package, so :mod:`prepared` and the ``math`` test type can both use it.
"""

from __future__ import annotations

__all__ = ["extract_equations"]

_DELIMITERS = (("\\(", "\\)"), ("\\[", "\\]"))
_DOLLAR_DELIMITERS = (("$$", "$$"), ("$", "$"))


def _split_delimited(text: str, opener: str, closer: str) -> tuple[list[str], str]:
    """Matches of ``opener(.+?)closer`` (dot-all) and the text with them removed."""
    found: list[str] = []
    kept: list[str] = []
    pos = 0
    while True:
        start = text.find(opener, pos)
        if start < 0:
            break
        # `.+?` needs at least one character between the delimiters.
        end = text.find(closer, start + len(opener) + 1)
        if end < 0:
            break  # no closer after this opener, hence none after any later opener
        found.append(text[start + len(opener) : end].strip())
        kept.append(text[pos:start])
        pos = end + len(closer)
    kept.append(text[pos:])
    return found, "".join(kept)


def extract_equations(text: str, ignore_dollar_delimited: bool) -> tuple[str, ...]:
    """Candidate equations of ``text``, in olmOCR-bench's extraction order."""
    equations: list[str] = []
    delimiters = _DELIMITERS if ignore_dollar_delimited else _DELIMITERS + _DOLLAR_DELIMITERS
    for opener, closer in delimiters:
        if opener not in text:
            continue
        found, text = _split_delimited(text, opener, closer)
        equations.extend(found)
    return tuple(equations)
