"""Fuzzy matching primitives: rapidfuzz similarity with exact fast paths, and a bounded
approximate substring search with ``fuzzysearch.find_near_matches`` semantics.

``partial_ratio_score`` / ``ratio_score`` are rapidfuzz's ``fuzz.partial_ratio`` / ``fuzz.ratio``
divided by 100 (what olmOCR-bench compares against ``1 - max_diffs/len``), with shortcuts that
cannot change a verdict: an exact substring scores 1.0 without calling rapidfuzz, and a
``score_cutoff`` just below the threshold lets rapidfuzz stop early.

``first_match_start`` / ``last_match_start`` answer the question the ``order`` test asks of
``find_near_matches(pattern, text, max_l_dist=k)``: where does the leftmost (rightmost) reported
match start? fuzzysearch reports one match per group of overlapping candidate matches, the
candidate with the smallest distance (longest on ties). Its candidates for ``k > 0`` come from the
pigeonhole principle: split the pattern into pieces of ``len // (k + 1)`` characters; a match with
at most ``k`` edits contains one piece unedited, so every exact occurrence of a piece anchors a
candidate, extended right with the fewest edits (longest on ties) and then left with the edits left
over. This module builds the same candidates, but measures each extension with rapidfuzz's
Levenshtein distance (C, bit-parallel) instead of a Python dynamic programme, and walks anchors from
the left (or right) only until the first (last) group is complete.

Bounds: anchors are found with ``str.find`` (C); at most ``MAX_ANCHORS`` anchors, and at most
``MAX_DISTANCE_CALLS`` rapidfuzz distance calls (``4k + 2`` an anchor, each on at most
``len(pattern) + k`` characters), are spent per search. Past the budget the search stops and reports
what it has (only reachable on pathological input: a 100k-character run of one letter, or a short
pattern with a large ``max_diffs``). fuzzysearch itself has no such bound: for a short pattern with a
large ``max_diffs`` it can run for minutes.

Known differences from fuzzysearch (they change a start position by at most ``k`` characters, so
an order verdict can differ only when the two texts' matches start within ``k`` characters of each
other): fuzzysearch switches to a different candidate generator for short patterns
(``len // (k + 1) < 3``) and stops extending at the first rise after a minimum, so it can report a
shorter extension on ties; ties inside a group are broken here by the leftmost start (fuzzysearch's
choice depends on set iteration order). docs/bench.md ("Compatibility") has the comparison with
fuzzysearch.
"""

from __future__ import annotations

import heapq
from typing import Iterator

from rapidfuzz import fuzz
from rapidfuzz.distance import Levenshtein

__all__ = [
    "partial_ratio_score",
    "ratio_score",
    "first_match_start",
    "last_match_start",
    "MAX_ANCHORS",
    "MAX_DISTANCE_CALLS",
]

MAX_ANCHORS = 4096
MAX_DISTANCE_CALLS = 40_000
_EPS = 1e-9


def partial_ratio_score(reference: str, text: str, threshold: float) -> float:
    """``fuzz.partial_ratio(reference, text) / 100`` exactly when it is ≥ ``threshold``; when it is
    lower the value returned is some number below ``threshold`` (0.0), which is all a verdict needs."""
    if reference and len(reference) <= len(text) and reference in text:
        return 1.0  # rapidfuzz scores an empty reference 0 against non-empty text, hence the guard
    cutoff = max(0.0, threshold * 100.0 - _EPS)
    return fuzz.partial_ratio(reference, text, score_cutoff=cutoff) / 100.0


def ratio_score(reference: str, text: str, threshold: float) -> float:
    """``fuzz.ratio(reference, text) / 100`` when it is ≥ ``threshold``; otherwise a value below it."""
    if reference == text:
        return 1.0
    cutoff = max(0.0, threshold * 100.0 - _EPS)
    return fuzz.ratio(reference, text, score_cutoff=cutoff) / 100.0


def first_match_start(pattern: str, text: str, max_dist: int) -> int | None:
    """Start of the leftmost match ``find_near_matches(pattern, text, max_l_dist=max_dist)`` reports,
    or ``None`` if it reports none. ``pattern`` must be non-empty and ``max_dist < len(pattern)``."""
    if max_dist == 0:
        index = text.find(pattern)
        return index if index >= 0 else None
    group = _edge_group(pattern, text, max_dist, from_left=True)
    return None if group is None else _best_start(group)


def last_match_start(pattern: str, text: str, max_dist: int) -> int | None:
    """Start of the rightmost match ``find_near_matches`` reports, or ``None``."""
    if max_dist == 0:
        index = text.rfind(pattern)
        return index if index >= 0 else None
    group = _edge_group(pattern, text, max_dist, from_left=False)
    return None if group is None else _best_start(group)


# --- candidate matches ---------------------------------------------------------------------------


def _pieces(pattern: str, k: int) -> list[tuple[int, str]]:
    length = len(pattern) // (k + 1)
    return [(offset, pattern[offset : offset + length]) for offset in range(0, len(pattern) - length + 1, length)]


def _anchors(text: str, pattern: str, pieces: list[tuple[int, str]], k: int, from_left: bool) -> Iterator[tuple[int, int, int]]:
    """Exact piece occurrences as (implied start, position, piece index), ordered by implied start
    (ascending from the left, descending from the right). Occurrences too close to an edge for the
    whole pattern to fit within ``k`` edits are skipped, as fuzzysearch does."""
    n, m = len(text), len(pattern)
    heap: list[tuple[int, int, int]] = []
    bounds = []
    for index, (offset, piece) in enumerate(pieces):
        lo = max(0, offset - k)
        hi = min(n, n - m + offset + len(piece) + k)  # occurrence must end by hi
        bounds.append((lo, hi))
        pos = text.find(piece, lo, hi) if from_left else text.rfind(piece, lo, hi)
        if pos >= 0:
            implied = pos - offset
            heap.append((implied if from_left else -implied, pos, index))
    heapq.heapify(heap)
    while heap:
        key, pos, index = heapq.heappop(heap)
        yield (key if from_left else -key), pos, index
        offset, piece = pieces[index]
        lo, hi = bounds[index]
        nxt = text.find(piece, pos + 1, hi) if from_left else text.rfind(piece, lo, pos + len(piece) - 1)
        if nxt >= 0:
            implied = nxt - offset
            heapq.heappush(heap, (implied if from_left else -implied, nxt, index))


def _best_extension(part: str, text: str, budget: int, rightwards: bool) -> tuple[int, int] | None:
    """Fewest edits to match ``part`` against a prefix (``rightwards``) or suffix of ``text`` within
    ``budget``; returns (edits, chars used), the longest on ties, or None if over budget."""
    if not part:
        return 0, 0
    best: tuple[int, int] | None = None
    low = max(0, len(part) - budget)
    high = min(len(text), len(part) + budget)
    distance = Levenshtein.distance
    for used in range(low, high + 1):
        window = text[:used] if rightwards else text[len(text) - used :]
        edits = distance(part, window, score_cutoff=budget)
        if edits <= budget and (best is None or edits <= best[0]):
            best = (edits, used)
    return best


def _candidate(text: str, pattern: str, pieces: list[tuple[int, str]], k: int, pos: int, index: int) -> tuple[int, int, int] | None:
    """The candidate match anchored at an exact occurrence of piece ``index`` at ``pos``:
    (start, end, distance) or None."""
    offset, piece = pieces[index]
    start = pos - offset
    if start >= 0 and text.startswith(pattern, start):
        return start, start + len(pattern), 0
    right_part = pattern[offset + len(piece) :]
    right_from = pos + len(piece)
    right = _best_extension(right_part, text[right_from : right_from + len(right_part) + k], k, rightwards=True)
    if right is None:
        return None
    left_budget = k - right[0]
    left_part = pattern[:offset]
    left = _best_extension(left_part, text[max(0, pos - offset - left_budget) : pos], left_budget, rightwards=False)
    if left is None:
        return None
    return pos - left[1], right_from + right[1], left[0] + right[0]


def _edge_group(pattern: str, text: str, k: int, from_left: bool) -> list[tuple[int, int, int]] | None:
    """All candidate matches of the leftmost (or rightmost) group of overlapping candidates."""
    m = len(pattern)
    pieces = _pieces(pattern, k)
    found: set[tuple[int, int, int]] = set()
    frontier: int | None = None  # right end (left search) / left end (right search) of what was found
    seen = 0
    # Each anchor costs at most 4k + 2 distance calls: cap both anchors and calls.
    budget = min(MAX_ANCHORS, max(1, MAX_DISTANCE_CALLS // (4 * k + 2)))
    for implied, pos, index in _anchors(text, pattern, pieces, k, from_left):
        # Candidates from later anchors start at >= implied - k (end at <= implied + m + k): once that
        # is past everything found, the edge group cannot grow any more.
        if frontier is not None and (implied - k >= frontier if from_left else implied + m + k <= frontier):
            break
        seen += 1
        if seen > budget:
            break
        match = _candidate(text, pattern, pieces, k, pos, index)
        if match is None or match in found:
            continue
        found.add(match)
        if from_left:
            frontier = match[1] if frontier is None else max(frontier, match[1])
        else:
            frontier = match[0] if frontier is None else min(frontier, match[0])
    if not found:
        return None
    groups = _group_overlapping(sorted(found))
    return groups[0] if from_left else groups[-1]


def _group_overlapping(matches: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """Group (start, end, dist) intervals that overlap (transitively); input sorted by start."""
    groups: list[list[tuple[int, int, int]]] = []
    group_end = None
    for match in matches:
        start, end, _ = match
        # Half-open intervals [start, end) overlap unless one ends where the other starts; an empty
        # interval overlaps nothing, exactly as fuzzysearch's grouping treats it.
        if groups and group_end is not None and start < group_end and end > start:
            groups[-1].append(match)
            group_end = max(group_end, end)
        else:
            groups.append([match])
            group_end = end
    return groups


def _best_start(group: list[tuple[int, int, int]]) -> int:
    """fuzzysearch keeps the group's smallest-distance candidate, the longest on ties."""
    best = min(group, key=lambda match: (match[2], -(match[1] - match[0]), match[0]))
    return best[0]
