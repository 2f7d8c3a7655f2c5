"""Each glyph's nearest neighbour up, down, left and right (olmOCR-bench's rule)."""

from __future__ import annotations

import bisect

from .nodes import Glyph

__all__ = ["Neighbours", "TOLERANCE_EM", "compute_neighbours"]

TOLERANCE_EM = 5.0 / 29.04  # olmOCR-bench's 5 px at KaTeX's 1.21 × 24 px font

# Per glyph: indices of its (up, down, left, right) neighbours, None where there is none.
Neighbours = tuple[int | None, int | None, int | None, int | None]


def compute_neighbours(glyphs: tuple[Glyph, ...]) -> tuple[Neighbours, ...]:
    """Nearest glyph in each direction: up/down among glyphs whose centre x is within the
    tolerance, left/right among those whose centre y is; ties go to the lower index. Glyphs are
    ``(char, x, y)`` tuples (:data:`~.nodes.Glyph`)."""
    n = len(glyphs)
    tol = TOLERANCE_EM
    by_y = sorted(range(n), key=lambda i: glyphs[i][2])
    ys = [glyphs[i][2] for i in by_y]
    by_x = sorted(range(n), key=lambda i: glyphs[i][1])
    xs = [glyphs[i][1] for i in by_x]
    result: list[Neighbours] = []
    for i in range(n):
        _, cx, cy = glyphs[i]
        up = down = left = right = None
        up_d = down_d = left_d = right_d = 0.0
        lo = bisect.bisect_left(ys, cy - tol - 1e-12)
        hi = bisect.bisect_right(ys, cy + tol + 1e-12)
        for j in by_y[lo:hi]:
            if j == i:
                continue
            _, ox, oy = glyphs[j]
            if abs(oy - cy) > tol:
                continue
            if ox < cx:
                d = cx - ox
                if left is None or d < left_d or (d == left_d and j < left):
                    left, left_d = j, d
            elif ox > cx:
                d = ox - cx
                if right is None or d < right_d or (d == right_d and j < right):
                    right, right_d = j, d
        lo = bisect.bisect_left(xs, cx - tol - 1e-12)
        hi = bisect.bisect_right(xs, cx + tol + 1e-12)
        for j in by_x[lo:hi]:
            if j == i:
                continue
            _, ox, oy = glyphs[j]
            if abs(ox - cx) > tol:
                continue
            if oy > cy:
                d = oy - cy
                if up is None or d < up_d or (d == up_d and j < up):
                    up, up_d = j, d
            elif oy < cy:
                d = cy - oy
                if down is None or d < down_d or (d == down_d and j < down):
                    down, down_d = j, d
        result.append((up, down, left, right))
    return tuple(result)
