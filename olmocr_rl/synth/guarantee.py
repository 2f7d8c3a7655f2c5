"""The guarantee: a test is written only if it loads, passes on its own reference, is not trivial, and is on the page.

For each candidate test of a page (:mod:`.derive`), in order, the first check it fails drops it with that reason:

1. ``load``: it is built through the bench loader (``bench.load_single_test``), as training will read it;
2. ``duplicate``: the page already has the same test;
3. ``reference``: it passes on the page's reference under both scoring rules (``olmocr-rl`` and
   ``olmocr-bench``), read both as the reward reads it (front matter removed) and as the raw file;
4. ``trivial``: it fails on some output (every type but ``absent``/``order`` on an empty page, ``absent`` on its
   own text, ``order`` on its two texts swapped), so it does not pass on any output;
5. ``text_layer``: its strings are on the PDF's text layer (pypdfium2) with their word boundaries (a space in
   the string is whitespace on the page, no space none: :func:`.shown.shown_in`), an order test's two strings
   are printed in its order, and an equation's glyphs are among the page's glyphs, so the test asks about what
   is printed (skipped when no PDF is given: golden tests).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from olmocr_rl.bench import TestLoadError, evaluate_page, load_single_test
from olmocr_rl.bench.prepared import SCORING_RULES
from olmocr_rl.data.front_matter import split_front_matter

from .shown import glyphs_on_layer, order_on_layer, shown_in

__all__ = ["PageTests", "check_tests", "text_layer_of", "on_layer", "glyphs_of_html", "DROP_REASONS"]

DROP_REASONS = ("load", "duplicate", "reference", "trivial", "text_layer")
_TAG = re.compile(r"<[^>]*>")
_INVISIBLE = re.compile(r"[\s\u200b\u200c\u200d\u2060\u2061\u2062\u2063\ufeff]+")
_STRING_FIELDS = ("text", "before", "after", "cell", "up", "down", "left", "right", "top_heading", "left_heading",
                  "appears_before_marker", "appears_after_marker")


@dataclass
class PageTests:
    kept: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)  # {"id", "type", "reason", "detail", "test"}


def text_layer_of(raw: str) -> str:
    """A PDF page's text (pypdfium2's ``get_text_range``) as one line: a hyphen at a line break (U+FFFE) joins
    the word again, a hyphen at the end of a line keeps the word whole, line breaks become spaces."""
    text = raw.replace("\r\n", "\n")
    text = re.sub(r"\ufffe\n?", "", text)
    text = re.sub(r"(?<=\w-)\n(?=\w)", "", text)
    return " ".join(text.split())


def on_layer(value: str, layer: str, cell: bool = False) -> bool:
    """Is ``value`` printed on the page, word boundaries kept (:func:`.shown.shown_in`; ``cell``: a table cell)."""
    return shown_in(value, layer, cell)


def glyphs_of_html(markup: str) -> str:
    """The visible characters of KaTeX's HTML (tags removed, entities decoded, invisible characters dropped)."""
    return _INVISIBLE.sub("", html.unescape(_TAG.sub("", markup)))


def _passes_everywhere(test, reference: str) -> str | None:
    _, body = split_front_matter(reference)
    for text, how in ((body, "the reference body"), (reference, "the raw reference file")):
        for rule in SCORING_RULES:
            (_, passed, why), = evaluate_page([test], text, rule)
            if not passed:
                return f"fails on {how} under --scoring {rule}: {why}"
    return None


def _trivial(test, data: dict) -> str | None:
    kind = data["type"]
    if kind == "absent":
        probe = data["text"]
    elif kind == "order":
        probe = f"{data['after']}\n\n{data['before']}"
    else:
        probe = ""
    (_, passed, _), = evaluate_page([test], probe)
    return f"passes on {probe[:40]!r} too" if passed else None


def _off_layer(data: dict, layer: str, glyphs: dict[str, str]) -> str | None:
    for name in _STRING_FIELDS:
        value = data.get(name)
        if value and not on_layer(value, layer, cell=data["type"] == "table"):
            return f"{name} {value!r} is not in the PDF's text layer (with these word boundaries)"
    if data["type"] == "order" and not order_on_layer(data["before"], data["after"], layer):
        return f"before {data['before'][:40]!r} is not printed before after {data['after'][:40]!r}"
    if data["type"] == "math":
        if not glyphs.get(data["math"], ""):
            return "the equation was not typeset on the page"
        missing = glyphs_on_layer(glyphs[data["math"]], layer)
        if missing:
            return f"glyphs {missing!r} of the equation are not in the PDF's text layer"
    return None


def check_tests(candidates: list[dict], pdf: str, page_key: str, reference: str, layer: str | None = None,
                glyphs: dict[str, str] | None = None) -> PageTests:
    """The page's tests that pass every check (with ``pdf``, ``page`` 1 and ids), and the dropped ones."""
    out = PageTests()
    seen: set[str] = set()
    for index, candidate in enumerate(candidates):
        data = {"pdf": pdf, "page": 1, "id": f"{page_key}_{candidate['type']}_{index:02d}", **candidate}
        reason, detail = None, ""
        try:
            test = load_single_test(data)
        except TestLoadError as error:
            reason, detail = "load", str(error)
        if reason is None:
            key = repr(sorted((k, v) for k, v in candidate.items()))
            if key in seen:
                reason, detail = "duplicate", "the page already has this test"
            seen.add(key)
        if reason is None and (detail := _passes_everywhere(test, reference) or ""):
            reason = "reference"
        if reason is None and (detail := _trivial(test, data) or ""):
            reason = "trivial"
        if reason is None and layer is not None and (detail := _off_layer(data, layer, glyphs or {}) or ""):
            reason = "text_layer"
        if reason is None:
            out.kept.append(data)
        else:
            out.dropped.append({"id": data["id"], "type": data["type"], "reason": reason, "detail": detail,
                                "test": data})
    return out
