"""Text normalisation shared by every olmOCR-bench test (olmOCR-bench's ``normalize_text``).

Applied once to each reference string when a test is loaded and once to a completion before
text tests run (``PreparedText`` caches it). The steps and their order follow olmOCR-bench
(reference §3.1) so that scores agree character for character:

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
# Matches exactly the whitespace runs that "\s+" -> " " would change (runs of two or more, and
# single non-space whitespace), so the many single spaces of ordinary text are left alone: the
# same result as re.sub(r"\s+", " ", text), about twice as fast.
_WHITESPACE = re.compile(r"\s\s+|[^\S ]")

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


def normalize_text(text: str | None) -> str | None:
    """Return ``text`` normalised as olmOCR-bench does; ``None`` stays ``None``.

    Pure and deterministic; linear in the length of ``text`` (each step is one regex pass).
    """
    if text is None:
        return None
    if "<" in text:
        text = _BR.sub(" ", text)
    # The marker passes only matter when a marker character is present; skipping them keeps
    # normalisation of long, marker-free completions to a few C-level passes.
    if "*" in text or "_" in text:
        text = _BOLD_STARS.sub(r"\1", text)
        text = _BOLD_UNDERSCORES.sub(r"\1", text)
    if "<" in text:
        # Two passes, as olmOCR-bench does: removing <b> can expose an <i> ("<<b>i>").
        text = _HTML_B.sub("", text)
        text = _HTML_I.sub("", text)
    if "*" in text or "_" in text:
        text = _PAIRED_DOUBLE.sub(r"\2", text)
        text = _PAIRED_SINGLE.sub(r"\2", text)
    text = _WHITESPACE.sub(" ", text)
    if not text.isascii():
        if not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        for fancy, plain in _PLAIN_FORMS:
            if fancy in text:
                text = text.replace(fancy, plain)
    return text
