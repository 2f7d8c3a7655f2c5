"""Which class implements which olmOCR-bench test ``type``."""

from __future__ import annotations

from .base import BenchTest
from .baseline import BaselineTest
from .footnote import FootnoteTest
from .format_test import FormatTest
from .math_test import MathTest
from .table_test import TableTest
from .text_tests import OrderTest, PresenceTest

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
