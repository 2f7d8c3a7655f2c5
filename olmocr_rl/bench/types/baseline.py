"""``baseline`` test (olmOCR-bench ``BaselineTest``): basic sanity of a page's output.

1. With ``max_length`` set (a blank-page test): pass iff the number of alphanumeric characters
   (``str.isalnum``) is at most ``max_length`` — markdown image tags ``![…](…)`` are left out of the
   count when ``max_length_skips_image_alt_tags`` — and nothing else is checked.
2. Otherwise fail on text with no alphanumeric character;
3. fail when the text, whitespace runs collapsed to one space, *ends* with more than
   ``max_repeats`` back-to-back copies of its last k characters, for any k in 1..5 (degenerate
   repetition at the tail; repetition elsewhere is not looked at);
4. with ``check_disallowed_characters``, fail on any CJK ideograph, Hiragana, Katakana or emoji
   (the emoticon, pictograph, transport and flag blocks).

Cost: counting alphanumerics is linear (C speed for ASCII); the tail check reads at most
``(max_repeats + 1) * 5`` characters from the end, so a 100k-character run costs no more than a
short one; the character check is one regex scan, shared by all baseline tests of the page.
"""

from __future__ import annotations

import re
from itertools import islice
from dataclasses import dataclass
from typing import ClassVar

from ..base import BenchTest
from ..errors import FieldError
from ..prepared import PreparedText

__all__ = ["BaselineTest", "tail_repeat_counts"]

MAX_NGRAM = 5
_IMAGE_TAG = re.compile(r"!\[.*?\]\(.*?\)")
_WHITESPACE = re.compile(r"\s+")
_DISALLOWED = re.compile(
    "["
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\U0001f600-\U0001f64f"  # emoticons
    "\U0001f300-\U0001f5ff"  # miscellaneous symbols and pictographs
    "\U0001f680-\U0001f6ff"  # transport and map symbols
    "\U0001f1e0-\U0001f1ff"  # regional indicators (flags)
    "]"
)


def _collapsed_tail(text: str, needed: int) -> str:
    """The last ``needed`` characters (or all, if fewer) of ``re.sub(r"\\s+", " ", text)``,
    computed from a tail of ``text`` only."""
    size = needed + 1
    while True:
        piece = text[-size:]
        collapsed = _WHITESPACE.sub(" ", piece)
        if size >= len(text):
            return collapsed[-needed:]
        # The first character may be part of a longer whitespace run cut in two; dropping it
        # leaves a tail identical to the tail of the fully collapsed text.
        if len(collapsed) - 1 >= needed:
            return collapsed[-needed:]
        size *= 4


def tail_repeat_counts(text: str, cap: int) -> tuple[int, ...]:
    """For k = 1..5: how many back-to-back copies of its last k characters the whitespace-collapsed
    ``text`` ends with (0 when shorter than k), each count capped at ``cap``."""
    tail = _collapsed_tail(text, cap * MAX_NGRAM)
    counts = []
    for size in range(1, MAX_NGRAM + 1):
        if len(tail) < size:
            counts.append(0)
            continue
        target = tail[-size:]
        # "ends with m copies" holds for every m up to the count: binary search on m.
        low, high = 1, min(cap, len(tail) // size)
        while low < high:
            middle = (low + high + 1) // 2
            if tail.endswith(target * middle):
                low = middle
            else:
                high = middle - 1
        counts.append(low)
    return tuple(counts)


def _image_free_alnum_count(prepared: PreparedText) -> int:
    return PreparedText(_IMAGE_TAG.sub("", prepared.text)).alnum_count


def _disallowed_characters(prepared: PreparedText) -> list[str]:
    """Up to ten disallowed characters, in order of appearance (enough for a verdict and a message)."""
    # All disallowed characters are non-ASCII: scan only those (none at all for ASCII text).
    return [match.group() for match in islice(_DISALLOWED.finditer(prepared.non_ascii), 10)]


@dataclass(frozen=True, kw_only=True)
class BaselineTest(BenchTest):
    """``baseline``: not blank, not degenerate at the tail, no disallowed scripts (or blank, with ``max_length``)."""

    max_length: int | None = None
    max_length_skips_image_alt_tags: bool = False
    max_repeats: int = 30
    check_disallowed_characters: bool = True

    TYPES: ClassVar[tuple[str, ...]] = ("baseline",)
    FIELD_KINDS: ClassVar[dict[str, str]] = {
        "max_length": "int?",
        "max_length_skips_image_alt_tags": "bool",
        "max_repeats": "int",
        "check_disallowed_characters": "bool",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_length is not None and self.max_length < 0:
            raise FieldError("max_length", f"must be 0 or more (or null), got {self.max_length}")
        if self.max_repeats < 1:
            raise FieldError("max_repeats", f"must be at least 1, got {self.max_repeats}")

    def run_prepared(self, prepared: PreparedText) -> tuple[bool, str]:
        if self.max_length is not None:
            if self.max_length_skips_image_alt_tags:
                count = prepared.derived("alnum_count_without_images", _image_free_alnum_count)
            else:
                count = prepared.alnum_count
            if count > self.max_length:
                return False, f"{count} alphanumeric characters on a page expected to be blank (max_length {self.max_length})"
            return True, ""
        if prepared.alnum_count == 0:
            return False, "the text contains no alphanumeric characters"
        cap = self.max_repeats + 1
        counts = prepared.derived(("tail_repeats", cap), lambda p: tail_repeat_counts(p.text, cap))
        for size, count in enumerate(counts, start=1):
            if count > self.max_repeats:
                return False, f"the text ends with more than {self.max_repeats} repeats of a {size}-character sequence"
        if self.check_disallowed_characters:
            found = prepared.derived("disallowed_characters", _disallowed_characters)
            if found:
                return False, f"the text contains disallowed characters {found}"
        return True, ""
