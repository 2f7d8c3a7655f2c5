"""Text-similarity rewards (experimental in olmOCR, not used for its release): medoid and edit distance.

docs/rewards.md ("The rewards") gives their scores; olmOCR's versions score the same.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from rapidfuzz import fuzz, process
from rapidfuzz.distance import Levenshtein

from olmocr_rl.rewards.completions import column_item, completion_text


def medoid_scores(texts: Sequence[str]) -> list[float]:
    """Closeness of each text to the medoid of ``texts`` (pure).

    The medoid is the text with the smallest mean Levenshtein distance to the others (first on ties); it
    scores 1.0 and every other text ``max(0, 1 - d(text, medoid) / D)`` with D the largest pairwise distance
    (all 1.0 when D is 0). n = 0 gives [], n = 1 gives [1.0].
    Example: "aaaa", "aaab", "bbbb": distances 1, 4, 3; means 2.5, 2, 3.5; medoid "aaab"; D = 4;
    scores 1 - 1/4 = 0.75, 1.0, 1 - 3/4 = 0.25.
    """
    n = len(texts)
    if n == 0:
        return []
    if n == 1:
        return [1.0]
    # cdist computes the matrix in C++ threads without the GIL; completions can be tens of kilobytes.
    distances = process.cdist(texts, texts, scorer=Levenshtein.distance, dtype=np.int64, workers=-1)
    mean_to_others = distances.sum(axis=1) / (n - 1)
    medoid = int(np.argmin(mean_to_others))  # argmin returns the first index on ties
    largest = int(distances.max())
    if largest == 0:
        return [1.0] * n
    scores = [max(0.0, 1.0 - float(distances[i, medoid]) / largest) for i in range(n)]
    scores[medoid] = 1.0
    return scores


def medoid_reward(
    prompts: Sequence[Any], completions: Sequence[Any], pdf_path: Sequence[str] | None = None, **kwargs: Any
) -> list[float]:
    """Closeness of each completion to the medoid of the completions of the same page in this call.

    olmOCR took the medoid over the whole list TRL passed to the process, which is one page's group only for
    some batch geometries; here completions are grouped by ``pdf_path`` and ``test_ids`` when those columns are
    present (one page per call gives olmOCR's numbers). Unreadable completions count as empty text.
    """
    texts = [completion_text(c) or "" for c in completions]
    groups: dict[Any, list[int]] = {}
    for i in range(len(texts)):
        test_ids = column_item(kwargs.get("test_ids"), i)
        key = (column_item(pdf_path, i), tuple(test_ids) if test_ids else None)
        groups.setdefault(key, []).append(i)
    rewards = [0.0] * len(texts)
    for indices in groups.values():
        for i, score in zip(indices, medoid_scores([texts[i] for i in indices])):
            rewards[i] = score
    return rewards


def bench_edit_distance_reward(
    prompts: Sequence[Any], completions: Sequence[Any], claude_original: Sequence[str | None] | None = None, **kwargs: Any
) -> list[float]:
    """``fuzz.ratio(completion, reference) / 100`` on the full strings (front matter included, as in olmOCR).

    A missing reference or an unreadable completion scores 0.0.
    """
    rewards = []
    for i, completion in enumerate(completions):
        text = completion_text(completion)
        reference = column_item(claude_original, i)
        if text is None or not isinstance(reference, str):
            rewards.append(0.0)
        else:
            rewards.append(fuzz.ratio(text, reference) / 100)
    return rewards
