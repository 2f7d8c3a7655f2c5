"""``table`` test (olmOCR-bench ``TableTest``, the span-aware graph version).

The completion's tables are its markdown tables (unless ``ignore_markdown_tables``) followed by its
HTML tables (see :mod:`olmocr_rl.bench.tables`); none at all fails. A cell matches ``cell`` when
``ratio(cell, normalize(cell text)) ≥ max(0.5, 1 - max_diffs/len(cell))`` (whole-string ratio, not
partial). The test passes as soon as one matching cell of one table satisfies every relation given:
``up``/``down``/``left``/``right`` hold if any immediate neighbour in that direction matches the
expected text (same ratio rule, with the expected text's length), ``top_heading``/``left_heading``
if any heading cell reached walking up/left does. Empty relation strings are not checked.

Cost: tables are parsed once per completion (``PreparedText.tables``) with every cell normalised
once; with ``max_diffs = 0`` the threshold is 1.0, so matching is a dictionary lookup on the
normalised text instead of a ratio per cell; otherwise rapidfuzz scores each cell (C loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rapidfuzz import fuzz, process

from ..base import BenchTest
from ..errors import FieldError
from ..normalize import normalize_text
from ..prepared import PreparedText
from ..tables import Cell, TableData

__all__ = ["TableTest", "RELATIONS"]

RELATIONS = ("up", "down", "left", "right", "top_heading", "left_heading")


def _threshold(max_diffs: int, text: str) -> float:
    return max(0.5, 1.0 - (max_diffs / (len(text) if len(text) > 0 else 1)))


def _neighbours(table: TableData, cell: Cell, relation: str) -> frozenset[Cell]:
    if relation == "up":
        return table.up_relations.get(cell, frozenset())
    if relation == "down":
        return table.down_relations.get(cell, frozenset())
    if relation == "left":
        return table.left_relations.get(cell, frozenset())
    if relation == "right":
        return table.right_relations.get(cell, frozenset())
    if relation == "top_heading":
        return table.top_heading_relations(*cell)
    return table.left_heading_relations(*cell)


@dataclass(frozen=True, kw_only=True)
class TableTest(BenchTest):
    """``table``: a cell with the given text exists, with the given neighbours/headings."""

    cell: str
    up: str = ""
    down: str = ""
    left: str = ""
    right: str = ""
    top_heading: str = ""
    left_heading: str = ""
    ignore_markdown_tables: bool = False

    checks: tuple[tuple[str, str, float], ...] = field(init=False, repr=False, compare=False)
    cell_threshold: float = field(init=False, repr=False, compare=False)

    TYPES: ClassVar[tuple[str, ...]] = ("table",)
    FIELD_KINDS: ClassVar[dict[str, str]] = {
        "cell": "str",
        "up": "str?",
        "down": "str?",
        "left": "str?",
        "right": "str?",
        "top_heading": "str?",
        "left_heading": "str?",
        "ignore_markdown_tables": "bool",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        cell = normalize_text(self.cell)
        if not cell.strip():
            raise FieldError("cell", "must contain visible text; it is empty after normalisation")
        normalized = {"cell": cell}
        checks = []
        for relation in RELATIONS:
            value = normalize_text(getattr(self, relation) or "")
            normalized[relation] = value
            if value:  # olmOCR-bench checks a relation only when its normalised text is non-empty
                checks.append((relation, value, _threshold(self.max_diffs, value)))
        self._set(**normalized, checks=tuple(checks), cell_threshold=_threshold(self.max_diffs, cell))

    def _matching_cells(self, table: TableData) -> list[Cell]:
        if self.cell_threshold >= 1.0:
            return table.cells_by_text.get(self.cell, [])
        cells = list(table.normalized_text)
        texts = list(table.normalized_text.values())
        found = process.extract(
            self.cell, texts, scorer=fuzz.ratio, score_cutoff=self.cell_threshold * 100.0 - 1e-9, limit=None
        )
        # extract returns (text, score, index) sorted by score; re-check with the exact division and
        # restore table order so explanations are stable.
        keep = sorted(index for _, score, index in found if score / 100.0 >= self.cell_threshold)
        return [cells[index] for index in keep]

    @staticmethod
    def _relation_holds(table: TableData, neighbours: frozenset[Cell], expected: str, threshold: float) -> tuple[bool, float, str | None]:
        best, best_text = -1.0, None  # -1 so the first neighbour is reported even at score 0
        for other in neighbours:
            text = table.normalized_text[other]
            score = 1.0 if text == expected else fuzz.ratio(expected, text) / 100.0
            if score > best:
                best, best_text = score, text
            if score >= threshold:
                return True, score, text
        return False, max(best, 0.0), best_text

    def run_prepared(self, prepared: PreparedText) -> tuple[bool, str]:
        tables = prepared.tables(include_markdown=not self.ignore_markdown_tables)
        if not tables:
            return False, "No tables found in the content"
        reasons: list[str] = []
        for table in tables:
            for cell in self._matching_cells(table):
                failed = []
                for relation, expected, threshold in self.checks:
                    neighbours = _neighbours(table, cell, relation)
                    holds, best, best_text = self._relation_holds(table, neighbours, expected, threshold)
                    if not holds:
                        found = "no such neighbour" if best_text is None else f"best was '{best_text}' ({best:.2f})"
                        failed.append(f"{relation} of cell {cell}: expected '{expected}', {found}")
                if not failed:
                    return True, ""
                reasons.extend(failed)
        if not reasons:
            return False, f"no cell matching '{self.cell}' (threshold {self.cell_threshold:.2f}) in {len(tables)} table(s)"
        shown = "; ".join(reasons[:5]) + (f"; … {len(reasons) - 5} more" if len(reasons) > 5 else "")
        return False, f"cells matching '{self.cell}' found, but relations not satisfied: {shown}"
