"""Which class implements which olmOCR-bench test ``type``: the one table every reader of test types uses.

Loading, the bench-folder scan and validation, ``--bench_type_filter``, the per-type reward and its telemetry
all read :data:`TEST_CLASSES` (through :func:`test_types` for the names), so a new type is one class and one
entry here; docs/bench.md ("Adding a test type") has the steps.
"""

from __future__ import annotations

from .base import BenchTest
from .types import BaselineTest, FootnoteTest, FormatTest, MathTest, OrderTest, PresenceTest, TableTest

__all__ = ["TEST_CLASSES", "TEST_TYPES", "test_types"]

TEST_CLASSES: dict[str, type[BenchTest]] = {
    "present": PresenceTest,
    "absent": PresenceTest,
    "order": OrderTest,
    "table": TableTest,
    "math": MathTest,
    "baseline": BaselineTest,
    "format": FormatTest,
    "footnote": FootnoteTest,
}

#: The built-in types, in olmOCR-bench's order (readers call :func:`test_types`, which sees added ones too).
TEST_TYPES: tuple[str, ...] = tuple(TEST_CLASSES)


def test_types() -> tuple[str, ...]:
    """Every registered test type, in registration order (olmOCR-bench's, then any added)."""
    return tuple(TEST_CLASSES)


test_types.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
