"""Reading completion text the way TRL hands it to reward functions.

TRL passes conversational completions as one-message lists, ``[{"role": "assistant", "content": text}]``,
and plain completions as strings. Every reward accepts both forms.
"""

from __future__ import annotations

from typing import Any, Sequence

from olmocr_rl.data.front_matter import split_front_matter


def completion_text(completion: Any) -> str | None:
    """The text of one completion, or None when it cannot be read.

    Accepts a string (returned as is; the empty string is a valid, empty completion) or a message list whose
    first element is a mapping with a string ``"content"``. Anything else (None, ``[]``, ``[{}]``, a number,
    a message whose content is not a string) gives None; each reward says what None scores.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion:
        message = completion[0]
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str):
                return content
    return None


def page_body(text: str, raw_completion: bool) -> str:
    """The text the unit tests see: the completion minus its YAML front matter, unless ``raw_completion``.

    olmOCR-bench scores transcriptions whose front matter the pipeline has already removed, so tests run on
    the body by default. ``raw_completion=True`` feeds the whole completion, as olmOCR's GRPO trainer did
    (then front-matter characters count toward baseline tests' ``max_length``).
    """
    if raw_completion:
        return text
    _front_matter, body = split_front_matter(text)
    return body


def column_item(column: Sequence[Any] | None, i: int) -> Any:
    """Element i of a keyword column TRL forwarded (aligned with completions), or None if absent or short."""
    if column is None or i >= len(column):
        return None
    return column[i]
