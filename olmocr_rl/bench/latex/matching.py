"""olmOCR-bench's glyph matching: does a candidate equation's layout contain the reference's?"""

from __future__ import annotations

from .equation import Layout
from .neighbours import Neighbours

__all__ = ["MAX_MATCH_STEPS", "equation_contains", "glyph_match_fraction"]

MAX_MATCH_STEPS = 20_000


def equation_contains(candidate: Layout, reference: Layout) -> bool:
    """olmOCR-bench's glyph comparison: can every reference glyph be mapped to a distinct candidate
    glyph with the same character such that, in every direction where the reference glyph has a
    neighbour, the candidate glyph has a neighbour with the same character — the very glyph the
    reference neighbour is mapped to, if that one is already mapped? Assignment proceeds in
    reference glyph order with backtracking, at most ``MAX_MATCH_STEPS`` steps.

    A reference that did not parse matches nothing; an empty reference (no glyphs) matches any
    candidate that parsed (as in olmOCR-bench).
    """
    if reference.error is not None or candidate.error is not None:
        return False
    if reference.key and reference.key in candidate.rows:
        return True  # the MathML-containment route (see rows.row_keys)
    if not reference.glyphs:
        return True
    cand_counts = candidate.counts()
    for char, count in reference.counts().items():
        if cand_counts.get(char, 0) < count:
            return False
    options = _options(candidate, reference)
    if options is None:
        return False
    return _assign(options, reference.neighbours(), candidate.neighbours())


def glyph_match_fraction(candidate: Layout, reference: Layout) -> float:
    """The share of reference glyphs that have at least one candidate glyph with the same character and, in
    every direction where the reference glyph has a neighbour, a neighbour with the same character (the
    per-glyph condition of :func:`equation_contains`, without the distinct, consistent assignment). 0.0 when
    either layout did not parse or the reference has no glyph. The continuous bench reward's math credit."""
    if reference.error is not None or candidate.error is not None or not reference.glyphs:
        return 0.0
    ref_glyphs, ref_nb = reference.glyphs, reference.neighbours()
    cand_glyphs, cand_nb = candidate.glyphs, candidate.neighbours()
    by_char = candidate.by_char()
    matched = 0
    for i, (char, _, _) in enumerate(ref_glyphs):
        wanted = [(d, ref_glyphs[nb][0]) for d, nb in enumerate(ref_nb[i]) if nb is not None]
        for j in by_char.get(char, ()):
            if all(cand_nb[j][d] is not None and cand_glyphs[cand_nb[j][d]][0] == nb_char for d, nb_char in wanted):
                matched += 1
                break
    return matched / len(ref_glyphs)


def _options(candidate: Layout, reference: Layout) -> list[list[int]] | None:
    """Per reference glyph, the candidate glyphs it may map to: same character and, in each
    direction the reference glyph has a neighbour, a neighbour with the same character. None when
    some reference glyph has no option."""
    ref_glyphs = reference.glyphs
    ref_nb = reference.neighbours()
    cand_nb = candidate.neighbours()
    cand_glyphs = candidate.glyphs
    by_char = candidate.by_char()
    options: list[list[int]] = []
    for i, (char, _, _) in enumerate(ref_glyphs):
        wanted = [(d, ref_glyphs[nb][0]) for d, nb in enumerate(ref_nb[i]) if nb is not None]
        keep = []
        for j in by_char.get(char, ()):
            for d, nb_char in wanted:
                other = cand_nb[j][d]
                if other is None or cand_glyphs[other][0] != nb_char:
                    break
            else:
                keep.append(j)
        if not keep:
            return None
        options.append(keep)
    return options


def _assign(options: list[list[int]], ref_nb: tuple[Neighbours, ...], cand_nb: tuple[Neighbours, ...]) -> bool:
    """Depth-first search over reference glyphs in order (olmOCR-bench's recursion, iterative):
    give each one a distinct candidate glyph from its options whose neighbours agree with those
    already assigned; False when none exists or after ``MAX_MATCH_STEPS`` steps."""
    n = len(options)
    assignment: dict[int, int] = {}
    used: set[int] = set()
    steps = 0
    choice = [0] * n
    i = 0
    while True:
        if i == n:
            return True
        if i < 0:
            return False
        found = False
        while choice[i] < len(options[i]):
            j = options[i][choice[i]]
            choice[i] += 1
            steps += 1
            if steps > MAX_MATCH_STEPS:
                return False
            if j in used:
                continue
            if _agrees(ref_nb[i], cand_nb[j], assignment):
                assignment[i] = j
                used.add(j)
                found = True
                break
        if found:
            i += 1
            if i < n:
                choice[i] = 0
            continue
        # Backtrack.
        choice[i] = 0
        i -= 1
        if i >= 0:
            used.discard(assignment.pop(i))


def _agrees(ref_neighbours: Neighbours, cand_neighbours: Neighbours, assignment: dict[int, int]) -> bool:
    """Whether every already-assigned reference neighbour maps to the candidate's neighbour there."""
    for d, nb in enumerate(ref_neighbours):
        if nb is not None and nb in assignment and assignment[nb] != cand_neighbours[d]:
            return False
    return True
