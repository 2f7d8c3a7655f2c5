"""Which class implements which olmOCR-bench test ``type``."""

from __future__ import annotations

from .base import BenchTest
from .types import BaselineTest, FootnoteTest, FormatTest, MathTest, OrderTest, PresenceTest, TableTest

__all__ = ["TEST_CLASSES", "TEST_TYPES"]

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

TEST_TYPES: tuple[str, ...] = tuple(TEST_CLASSES)
