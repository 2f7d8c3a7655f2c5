"""``footnote`` test (olmOCR-bench ``FootnoteTest``): a footnote marker, and optionally its context.

Occurrences of ``marker`` in the raw completion: markdown references ``[^marker]`` (not
definitions ``[^marker]:``), ``<sup …>marker</sup>`` (case-insensitive) and, for an all-digit
marker, its Unicode superscript form (``12`` → ``¹²``). None: fail; no context asked: pass.

``appears_before_marker``: some occurrence must be preceded, within the 200 characters before it,
by the text — compared after keeping only alphanumerics, lower-cased, on the last
``2 × len(cleaned text)`` cleaned characters, with ``partial_ratio ≥ 1 - max_diffs/len(text)``
(``len`` of the normalised text, as olmOCR-bench does). ``appears_after_marker`` is the mirror image
on the 200 characters after an occurrence. The two may be satisfied by different occurrences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from ..base import BenchTest, check_max_diffs_fits, threshold_for
from ..errors import FieldError
from ..fuzzy import partial_ratio_score
from ..normalize import normalize_text
from ..prepared import PreparedText

__all__ = ["FootnoteTest", "CONTEXT_CHARS"]

CONTEXT_CHARS = 200
_SUPERSCRIPT_DIGITS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _clean(text: str) -> str:
    return "".join(ch for ch in normalize_text(text) if ch.isalnum()).lower()


@dataclass(frozen=True, kw_only=True)
class FootnoteTest(BenchTest):
    """``footnote``: the marker occurs as a footnote reference, with the expected text around it."""

    marker: str
    appears_before_marker: str | None = None
    appears_after_marker: str | None = None

    patterns: tuple[tuple[re.Pattern[str], ...], ...] = field(init=False, repr=False, compare=False)
    before_clean: str = field(init=False, repr=False, compare=False)
    after_clean: str = field(init=False, repr=False, compare=False)

    TYPES: ClassVar[tuple[str, ...]] = ("footnote",)
    FIELD_KINDS: ClassVar[dict[str, str]] = {"marker": "str", "appears_before_marker": "str?", "appears_after_marker": "str?"}

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.marker:
            raise FieldError("marker", "must not be empty; give the footnote marker, e.g. \"1\" or \"*\"")
        if any(ch.isspace() for ch in self.marker):
            raise FieldError("marker", f"cannot contain whitespace, got {self.marker!r}")
        derived: dict[str, object] = {}
        for name in ("appears_before_marker", "appears_after_marker"):
            value = getattr(self, name)
            if value is None:
                derived[name] = None
                continue
            normalized = normalize_text(value)
            if not normalized.strip():
                raise FieldError(name, "is empty after normalisation; remove the field or give the expected text")
            if not _clean(normalized):
                raise FieldError(name, "has no letters or digits, and context is compared on letters and digits only; fix the text")
            check_max_diffs_fits(self.max_diffs, normalized, f"'{name}' text")
            derived[name] = normalized
        escaped = re.escape(self.marker)
        patterns = [re.compile(rf"\[\^{escaped}\](?!:)"), re.compile(rf"<sup[^>]*>{escaped}</sup>", re.IGNORECASE)]
        if self.marker.isascii() and self.marker.isdigit():
            patterns.append(re.compile(re.escape(self.marker.translate(_SUPERSCRIPT_DIGITS))))
        before, after = derived["appears_before_marker"], derived["appears_after_marker"]
        self._set(
            **derived,
            patterns=tuple(patterns),
            before_clean=_clean(before) if before else "",
            after_clean=_clean(after) if after else "",
        )

    def _occurrences(self, text: str) -> list[tuple[int, int]]:
        spans = []
        for pattern in self.patterns:
            spans.extend(match.span() for match in pattern.finditer(text))
        return spans

    def _context_matches(self, text: str, occurrences: list[tuple[int, int]], target: str, clean: str, before: bool) -> bool:
        threshold = threshold_for(self.max_diffs, target)
        for start, end in occurrences:
            context = text[max(0, start - CONTEXT_CHARS) : start] if before else text[end : end + CONTEXT_CHARS]
            cleaned = _clean(context)
            if not cleaned:
                continue
            width = min(len(cleaned), 2 * len(clean))
            if width > 0:
                cleaned = cleaned[-width:] if before else cleaned[:width]
            if partial_ratio_score(clean, cleaned, threshold) >= threshold:
                return True
        return False

    def run_prepared(self, prepared: PreparedText) -> tuple[bool, str]:
        text = prepared.text
        occurrences = self._occurrences(text)
        if not occurrences:
            return False, f"footnote marker '{self.marker}' not found as [^{self.marker}], <sup>{self.marker}</sup> or superscript"
        failures = []
        if self.appears_before_marker and not self._context_matches(text, occurrences, self.appears_before_marker, self.before_clean, True):
            failures.append(f"'{self.appears_before_marker[:40]}' not found before any '{self.marker}' marker")
        if self.appears_after_marker and not self._context_matches(text, occurrences, self.appears_after_marker, self.after_clean, False):
            failures.append(f"'{self.appears_after_marker[:40]}' not found after any '{self.marker}' marker")
        if failures:
            return False, "; ".join(failures)
        return True, ""
