"""``format`` test (olmOCR-bench ``FormatTest``): is ``text`` shown as a heading, in bold or in italics?

Formatted spans are read from the raw completion:

- heading: markdown lines ``# …`` to ``###### …`` and HTML ``<h1>``–``<h6>`` elements (any closing
  ``</hN>`` ends one);
- bold: ``**x**``, ``__x__``, ``<b …>x</b>``, ``<strong …>x</strong>``;
- italic: ``*x*`` and ``_x_`` whose markers are single (not next to another ``*``/``_``),
  ``<i …>x</i>``, ``<em …>x</em>``.

HTML tags match case-insensitively, spans may cross lines, and each span is non-greedy (it ends at
the first closing marker). As in olmOCR-bench, ``<b …>`` also matches ``<br>``/``<body>`` and ``<i …>``
matches ``<img>``. Each span is normalised (lower-cased unless ``case_sensitive``) and the test passes
iff some span has ``partial_ratio(text, span) ≥ 1 - max_diffs/len(text)``.

Spans are found with ``str.find``-style scans rather than olmOCR-bench's ``(.*?)`` regexes: the same
spans, in linear time even for thousands of unclosed markers (the regexes go quadratic there).
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

__all__ = ["FormatTest", "formatted_spans", "FORMATS"]

FORMATS = ("heading", "bold", "italic")

_MARKDOWN_HEADING = re.compile(r"^#{1,6}\s+(.+?)$", re.MULTILINE)


def _paired_markers(text: str, marker: str) -> list[str]:
    """Spans of ``marker…marker`` (non-greedy, across lines): openers and closers pair up in order."""
    spans = []
    width = len(marker)
    pos = text.find(marker)
    while pos >= 0:
        close = text.find(marker, pos + width)
        if close < 0:
            break
        spans.append(text[pos + width : close])
        pos = text.find(marker, close + width)
    return spans


def _single_markers(text: str, marker: str) -> list[str]:
    """Spans between single ``marker`` characters, i.e. ones with no ``marker`` on either side.
    The regex ``(?<!m)m(?!m)(.*?)(?<!m)m(?!m)`` pairs such positions in order of appearance."""
    positions = []
    pos = text.find(marker)
    last = len(text) - 1
    while pos >= 0:
        run_end = pos
        while run_end < last and text[run_end + 1] == marker:
            run_end += 1
        if run_end == pos and (pos == 0 or text[pos - 1] != marker):
            positions.append(pos)
        pos = text.find(marker, run_end + 1)
    return [text[positions[i] + 1 : positions[i + 1]] for i in range(0, len(positions) - 1, 2)]


def _tag_spans(text: str, opener: re.Pattern[str], closer: re.Pattern[str]) -> list[str]:
    """Spans of ``<tag[^>]*>(.*?)</tag>`` (case-insensitive, across lines), scanned linearly."""
    spans = []
    pos = 0
    while True:
        start = opener.search(text, pos)
        if start is None:
            break
        gt = text.find(">", start.end())
        if gt < 0:
            break  # no '>' later in the text: no opener can complete any more
        end = closer.search(text, gt + 1)
        if end is None:
            break  # no closing tag later in the text: no later opener can close either
        spans.append(text[gt + 1 : end.start()])
        pos = end.end()
    return spans


_TAGS = {
    "heading": [(re.compile(r"<h[1-6]", re.I), re.compile(r"</h[1-6]>", re.I))],
    "bold": [(re.compile(r"<b", re.I), re.compile(r"</b>", re.I)), (re.compile(r"<strong", re.I), re.compile(r"</strong>", re.I))],
    "italic": [(re.compile(r"<i", re.I), re.compile(r"</i>", re.I)), (re.compile(r"<em", re.I), re.compile(r"</em>", re.I))],
}


def formatted_spans(text: str, fmt: str) -> list[str]:
    """Raw text of every span of ``text`` formatted as ``fmt`` (heading, bold or italic)."""
    spans: list[str] = []
    if fmt == "heading":
        if "#" in text:
            spans.extend(_MARKDOWN_HEADING.findall(text))
    elif fmt == "bold":
        spans.extend(_paired_markers(text, "**"))
        spans.extend(_paired_markers(text, "__"))
    else:
        spans.extend(_single_markers(text, "*"))
        spans.extend(_single_markers(text, "_"))
    if "<" in text:
        for opener, closer in _TAGS[fmt]:
            spans.extend(_tag_spans(text, opener, closer))
    return spans


def _normalized_spans(prepared: PreparedText, fmt: str, lower: bool) -> tuple[str, ...]:
    def compute(p: PreparedText) -> tuple[str, ...]:
        spans = [normalize_text(span) for span in formatted_spans(p.text, fmt)]
        return tuple(span.lower() for span in spans) if lower else tuple(spans)

    return prepared.derived(("formatted_spans", fmt, lower), compute)


@dataclass(frozen=True, kw_only=True)
class FormatTest(BenchTest):
    """``format``: ``text`` appears inside a heading, bold or italic span."""

    text: str
    format: str
    case_sensitive: bool = True

    reference: str = field(init=False, repr=False, compare=False)
    threshold: float = field(init=False, repr=False, compare=False)

    TYPES: ClassVar[tuple[str, ...]] = ("format",)
    FIELD_KINDS: ClassVar[dict[str, str]] = {"text": "str", "format": "str", "case_sensitive": "bool"}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format not in FORMATS:
            raise FieldError("format", f"must be one of {', '.join(FORMATS)}, got {self.format!r}")
        text = normalize_text(self.text)
        if not text.strip():
            raise FieldError("text", "must contain visible text; it is empty after normalisation")
        reference = text if self.case_sensitive else text.lower()
        check_max_diffs_fits(self.max_diffs, reference, "text")
        self._set(text=text, reference=reference, threshold=threshold_for(self.max_diffs, reference))

    def run_prepared(self, prepared: PreparedText) -> tuple[bool, str]:
        spans = _normalized_spans(prepared, self.format, lower=not self.case_sensitive)
        for span in spans:
            if partial_ratio_score(self.reference, span, self.threshold) >= self.threshold:
                return True, ""
        if not spans:
            return False, f"no {self.format} text found (looking for '{self.reference[:40]}')"
        sample = ", ".join(repr(span[:20]) for span in spans[:3])
        return False, f"'{self.reference[:40]}' not found with {self.format} formatting; {self.format} text found: {sample}"
