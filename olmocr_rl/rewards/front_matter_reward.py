"""The format reward: does the completion open with valid YAML front matter, and does it agree with the reference?

olmOCR's format reward (docs/rewards.md, "The rewards"). Scoring in tenths, so the values are exact: 0 without valid front matter; 5 for valid
front matter; +1 for each of the five fields equal (Python ``==`` on the parsed values) to the reference's.
Reward = points / 10, one of 0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0. An unparseable reference keeps the 5 points
(warned once per reference).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Sequence

from olmocr_rl.data.front_matter import parse_page_response

from olmocr_rl.rewards.completions import column_item, completion_text

logger = logging.getLogger(__name__)

COMPARED_FIELDS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")

_warned_references: set[str] = set()


def front_matter_points(text: str | None, reference: str | None) -> int:
    """Points out of 10 for one completion (see the module docstring). Pure apart from a one-time warning."""
    if text is None:
        return 0
    try:
        response = parse_page_response(text)
    except Exception:  # noqa: BLE001 - FrontMatterError or anything else: not valid front matter
        return 0
    points = 5
    if reference is None:
        return points
    try:
        expected = parse_page_response(reference)
    except Exception as error:  # noqa: BLE001 - a bad reference must not cost the completion its format points
        digest = hashlib.blake2b(reference.encode(), digest_size=8).hexdigest()
        if digest not in _warned_references:
            _warned_references.add(digest)
            logger.warning("reference front matter does not parse (%s); scoring format only: %.80r", error, reference)
        return points
    return points + sum(getattr(response, name) == getattr(expected, name) for name in COMPARED_FIELDS)


def reward_front_matter(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    claude_original: Sequence[str | None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """Per completion, ``front_matter_points / 10``; unreadable completions (None, ``[]``, ``[{}]``) score 0."""
    rewards = []
    for i, completion in enumerate(completions):
        reference = column_item(claude_original, i)
        rewards.append(front_matter_points(completion_text(completion), reference if isinstance(reference, str) else None) / 10)
    return rewards
