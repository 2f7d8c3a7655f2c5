"""Text normalisation shared by every olmOCR-bench test (olmOCR-bench's ``normalize_text``).

Applied once to each reference string when a test is loaded and once to a completion before
text tests run (``PreparedText`` caches it). The steps and their order follow olmOCR-bench
(docs/bench.md) so that scores agree character for character:

1. ``<br>`` and ``<br/>`` (exactly these spellings) become a space;
2. ``**x**`` and ``__x__`` lose their markers (non-greedy, within a line), ``<b>``/``</b>``/``<i>``/
   ``</i>`` tags are removed;
3. paired ``**``/``__`` are stripped again (the same marker both sides), then paired single ``*``/``_``
   (italics) — markers removed, inner text kept;
4. every whitespace run becomes one space;
5. Unicode NFC;
6. typographic quotes, dashes, the full-width low line and the micro sign are mapped to their plain
   forms (‘ ’ ‚ → ', “ ” „ → ", ＿ → _, – — ‑ ‒ − → -, µ → μ).

Step 3 also strips paired underscores inside identifiers (``snake_case_name`` → ``snakecasename``);
olmOCR-bench does the same, on references and completions alike.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize_text"]

_BR = re.compile(r"<br/?>")
_BOLD_STARS = re.compile(r"\*\*(.*?)\*\*")
_BOLD_UNDERSCORES = re.compile(r"__(.*?)__")
_HTML_B = re.compile(r"</?b>")
_HTML_I = re.compile(r"</?i>")
_PAIRED_DOUBLE = re.compile(r"(\*\*|__)(.*?)\1")
_PAIRED_SINGLE = re.compile(r"(\*|_)(.*?)\1")
_ALREADY_NORMAL = re.compile(r"[^<*_\s]+(?: [^<*_\s]+)*")

# Step 6: one character in, one character out. A replace per character present is much faster
# than str.translate with a mapping (which looks up every character in Python).
_PLAIN_FORMS = tuple(
    {
        "\u2018": "'",  # left single quotation mark
        "\u2019": "'",  # right single quotation mark
        "\u201a": "'",  # single low-9 quotation mark
        "\u201c": '"',  # left double quotation mark
        "\u201d": '"',  # right double quotation mark
        "\u201e": '"',  # double low-9 quotation mark
        "\uff3f": "_",  # full-width low line
        "\u2013": "-",  # en dash
        "\u2014": "-",  # em dash
        "\u2011": "-",  # non-breaking hyphen
        "\u2012": "-",  # figure dash
        "\u2212": "-",  # minus sign
        "\u00b5": "\u03bc",  # micro sign -> Greek small mu
    }.items()
)


def _collapse_whitespace(text: str) -> str:
    """``re.sub(r"\\s+", " ", text)``: str.split() splits on exactly the characters ``\\s`` matches
    (both use Unicode's whitespace property), and is faster than a regex on long text."""
    if not text:
        return text
    collapsed = " ".join(text.split())
    if text[0].isspace():
        collapsed = " " + collapsed
    if text[-1].isspace() and collapsed != " ":
        collapsed += " "
    return collapsed


def normalize_text(text: str | None) -> str | None:
    """Return ``text`` normalised as olmOCR-bench does; ``None`` stays ``None``.

    Pure and deterministic; linear in the length of ``text`` (each step is one regex pass, and a
    step whose marker does not occur is skipped).
    """
    if text is None:
        return None
    if text.isascii() and _ALREADY_NORMAL.fullmatch(text):
        return text  # single-spaced ASCII words without markers: nothing would change
    if "<br" in text:
        text = _BR.sub(" ", text)
    if "**" in text:
        text = _BOLD_STARS.sub(r"\1", text)
    if "__" in text:
        text = _BOLD_UNDERSCORES.sub(r"\1", text)
    if "<b>" in text or "</b>" in text:
        # Two passes, as olmOCR-bench does: removing <b> can expose an <i> ("<<b>i>").
        text = _HTML_B.sub("", text)
    if "<i>" in text or "</i>" in text:
        text = _HTML_I.sub("", text)
    if "**" in text or "__" in text:
        text = _PAIRED_DOUBLE.sub(r"\2", text)
    if "*" in text or "_" in text:
        text = _PAIRED_SINGLE.sub(r"\2", text)
    text = _collapse_whitespace(text)
    if not text.isascii():
        if not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        for fancy, plain in _PLAIN_FORMS:
            if fancy in text:
                text = text.replace(fancy, plain)
    return text
