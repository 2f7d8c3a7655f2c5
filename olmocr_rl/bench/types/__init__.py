"""The olmOCR-bench test types, one module each; :mod:`olmocr_rl.bench.registry` maps ``type`` to class."""

from .baseline import BaselineTest
from .footnote import FootnoteTest
from .format import FormatTest
from .math_eq import MathTest
from .table import TableTest
from .text import OrderTest, PresenceTest

__all__ = ["BaselineTest", "FootnoteTest", "FormatTest", "MathTest", "OrderTest", "PresenceTest", "TableTest"]
