"""One completion, prepared once for all the tests of its page.

All tests of a page run against the same completion; much of their work depends only on the
completion (normalising it, lower-casing it, parsing its tables, extracting its equations, counting
its alphanumerics). :class:`PreparedText` computes each of these the first time a test asks and keeps
the result, so a page with 40 tests normalises and parses its completion once, not 40 times.

A ``PreparedText`` is cheap to create (nothing is computed up front) and is a per-completion cache:
make a new one for each completion. Values are computed deterministically from ``text``, so two
threads racing to fill the same entry store equal values (harmless).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable, TypeVar

from .equations import extract_equations
from .normalize import normalize_text
from .tables import parse_html_tables, parse_markdown_tables

__all__ = ["PreparedText", "prepare_text", "SCORING_RULES", "PROJECT_RULE", "OLMOCR_BENCH_RULE"]

T = TypeVar("T")

#: The project's rule (the default): olmOCR-bench's tests plus the near-empty guard of ``present``/``absent``
#: (:mod:`.types.text`), which olmocr's scorer lacks at its pinned commit (olmocr PR #462 proposes it).
PROJECT_RULE = "olmocr-rl"
#: olmOCR-bench's scorer as published: no near-empty guard (docs/evaluate.md lists the remaining differences).
OLMOCR_BENCH_RULE = "olmocr-bench"
SCORING_RULES = (PROJECT_RULE, OLMOCR_BENCH_RULE)


class PreparedText:
    """A completion plus lazily computed, cached views of it.

    ``text`` is the completion exactly as given (tests that look at raw markup use it); the
    properties below are the shared views. ``derived(key, compute)`` caches any other per-completion
    value ``compute(self)`` under ``key`` (used by the table, math, baseline and format modules).
    """

    __slots__ = ("text", "rule", "_cache")

    def __init__(self, text: str, rule: str = PROJECT_RULE) -> None:
        if not isinstance(text, str):
            raise TypeError(f"a completion must be a str, got {type(text).__name__}")
        if rule not in SCORING_RULES:
            raise ValueError(f"unknown scoring rule {rule!r}; choose one of {', '.join(SCORING_RULES)}")
        self.text = text
        self.rule = rule  # which scoring rule the tests apply (SCORING_RULES)
        self._cache: dict[Any, Any] = {}

    def derived(self, key: Any, compute: Callable[["PreparedText"], T]) -> T:
        """Return ``compute(self)``, computed at most once per key for this completion."""
        try:
            return self._cache[key]
        except KeyError:
            value = compute(self)
            self._cache[key] = value
            return value

    @property
    def normalized(self) -> str:
        """``normalize_text(text)``."""
        return self.derived("normalized", lambda p: normalize_text(p.text))

    @property
    def normalized_lower(self) -> str:
        """``normalize_text(text).lower()`` (case-insensitive tests)."""
        return self.derived("normalized_lower", lambda p: p.normalized.lower())

    @property
    def raw_runs_survive(self) -> bool:
        """Whether every run of ASCII letters/digits in ``normalized`` occurs in the raw text.

        True when the text has no ``*``, ``_`` or ``<`` (normalisation then deletes nothing between
        characters: whitespace runs become one space, NFC and the plain-form replacements produce
        no ASCII letter or digit) and no Kelvin sign (which NFC turns into "K"). Exact tests use it
        to rule a text out without normalising it."""
        return self.derived(
            "raw_runs_survive", lambda p: not any(mark in p.text for mark in ("*", "_", "<", "\u212a"))
        )

    @property
    def normalizes_by_spacing(self) -> bool:
        """Whether ``normalized`` is the raw text with whitespace runs collapsed and the plain-form
        character replacements applied, and nothing else: true for text without ``*``, ``_``, ``<``
        that is already in NFC. Exact searches can then run on the raw text (see types.text)."""
        def compute(p: "PreparedText") -> bool:
            return p.raw_runs_survive and (p.text.isascii() or unicodedata.is_normalized("NFC", p.text))

        return self.derived("normalizes_by_spacing", compute)

    def cannot_contain(self, probe: str | None) -> bool:
        """True if ``normalized`` certainly lacks ``probe`` (a run of ASCII letters/digits)."""
        return bool(probe) and self.raw_runs_survive and probe not in self.text

    @property
    def non_ascii(self) -> str:
        """The raw text's non-ASCII characters, in order (empty for ASCII text)."""
        return self.derived("non_ascii", lambda p: "" if p.text.isascii() else _ASCII_RUNS.sub("", p.text))

    @property
    def alnum_count(self) -> int:
        """Number of alphanumeric characters (``str.isalnum``) in the raw text."""
        return self.derived("alnum_count", lambda p: _count_alnum(p.text, p.non_ascii))

    def tables(self, *, include_markdown: bool) -> tuple:
        """Tables of the completion: markdown ones first (if asked), then HTML ones."""
        html = self.derived("html_tables", lambda p: parse_html_tables(p.text))
        if not include_markdown:
            return html
        markdown = self.derived("markdown_tables", lambda p: parse_markdown_tables(p.text))
        return markdown + html

    def equations(self, *, ignore_dollar_delimited: bool) -> tuple[str, ...]:
        """Candidate equations, in olmOCR-bench's extraction order (see :mod:`equations`)."""
        key = ("equations", ignore_dollar_delimited)
        return self.derived(key, lambda p: extract_equations(p.text, ignore_dollar_delimited))

    def __repr__(self) -> str:
        head = self.text[:40] + ("…" if len(self.text) > 40 else "")
        return f"PreparedText({head!r}, {len(self.text)} chars, cached={sorted(map(str, self._cache))})"


def _count_alnum(text: str, non_ascii: str) -> int:
    """``sum(ch.isalnum() for ch in text)``: ASCII characters counted in C (bytes.translate), the
    usually few non-ASCII ones with str.isalnum."""
    ascii_bytes = text.encode("ascii", "ignore")
    return len(ascii_bytes.translate(None, _ASCII_NOT_ALNUM)) + sum(map(str.isalnum, non_ascii))


_ASCII_NOT_ALNUM = bytes(i for i in range(128) if not chr(i).isalnum())
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")


def prepare_text(text: str | PreparedText, rule: str = PROJECT_RULE) -> PreparedText:
    """Wrap a completion for evaluation under ``rule``; a ``PreparedText`` is returned unchanged."""
    if isinstance(text, PreparedText):
        return text
    return PreparedText(text, rule)
