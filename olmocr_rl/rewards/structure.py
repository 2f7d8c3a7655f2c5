"""Structure rewards (experimental in olmOCR): element counts and rectangular HTML tables.

docs/rewards.md ("The rewards") gives their scores; olmOCR's versions score the same.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from olmocr_rl.bench.tables import parse_html_tables

from olmocr_rl.rewards.completions import column_item, completion_text

_HTML_TABLE = re.compile(r"<table.*?>.*?</table>", re.IGNORECASE | re.DOTALL)
# Display and inline math delimiters, each counted on the whole text (a `$$x$$` is one match of the first).
_MATH_PATTERNS = (
    re.compile(r"\$\$.*?\$\$", re.DOTALL),
    re.compile(r"\\\(.*?\\\)", re.DOTALL),
    re.compile(r"\\\[.*?\\\]", re.DOTALL),
)


def element_counts(text: str) -> tuple[int, int]:
    """(number of HTML tables, number of math spans) in ``text``; non-greedy, so nested tables count once."""
    tables = len(_HTML_TABLE.findall(text))
    maths = sum(len(pattern.findall(text)) for pattern in _MATH_PATTERNS)
    return tables, maths


def element_count_score(text: str | None, reference: str | None) -> float:
    """0.5 for an equal table count plus 0.5 for an equal math count; 0.0 without a reference or text."""
    if text is None or reference is None:
        return 0.0
    tables, maths = element_counts(text)
    ref_tables, ref_maths = element_counts(reference)
    return 0.5 * ((tables == ref_tables) + (maths == ref_maths))


def reward_element_count(
    prompts: Sequence[Any], completions: Sequence[Any], claude_original: Sequence[str | None] | None = None, **kwargs: Any
) -> list[float]:
    """Per completion :func:`element_count_score` against ``claude_original[i]`` (missing reference: 0.0)."""
    rewards = []
    for i, completion in enumerate(completions):
        reference = column_item(claude_original, i)
        rewards.append(element_count_score(completion_text(completion), reference if isinstance(reference, str) else None))
    return rewards


def rectangular_table_score(text: str | None) -> float:
    """Share of the HTML tables in ``text`` that are rectangular (no hole in the span-expanded grid).

    No HTML table gives 1.0 (markdown tables are ignored); an unreadable completion gives 0.0.
    """
    if text is None:
        return 0.0
    tables = parse_html_tables(text)
    if not tables:
        return 1.0
    return sum(bool(table.is_rectangular) for table in tables) / len(tables)


def reward_rect_tables(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Per completion :func:`rectangular_table_score`."""
    return [rectangular_table_score(completion_text(completion)) for completion in completions]
