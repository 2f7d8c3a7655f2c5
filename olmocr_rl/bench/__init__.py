"""olmOCR-bench unit tests, written from scratch: verdict-compatible with olmOCR-bench, no browser.

The tests read olmOCR-bench JSONL (one test a line) and judge a page's text:

- ``present`` / ``absent`` — is a text (fuzzily) in the page, optionally within its first/last chars;
- ``order`` — does one text appear before another (approximate search, ``max_diffs`` edits);
- ``table`` — a cell with given neighbours/headings in a markdown or HTML table (spans supported);
- ``math`` — an equation that renders like the reference (see :mod:`olmocr_rl.bench.latex`);
- ``baseline`` — not blank, no degenerate repetition at the end, no disallowed scripts; or blank;
- ``format`` — a text shown as heading, bold or italic;
- ``footnote`` — a footnote marker with the expected text around it.

Public API::

    from olmocr_rl.bench import load_tests, load_single_test, prepare_text, evaluate_page
    tests = load_tests("bench/dataset.jsonl")             # strict: TestLoadError names file:line field
    passed, why = tests[0].run(page_text)                  # one test
    results = evaluate_page(page_tests, page_text)         # all tests of a page, shared work, never raises

Semantics follow olmOCR-bench (olmocr 0.4.27 / HEAD; docs/bench.md), including its normalisation
(:func:`normalize_text`), thresholds ``1 - max_diffs/len`` and rapidfuzz scores; differences are
listed in the docstring of the module concerned (present/absent's near-empty guard in ``types.text``, this
project's rule, which ``PreparedText(text, "olmocr-bench")`` turns off,
the near-match search in ``fuzzy``, table span clamping in ``tables``, browser-free math in ``latex``).

Cost limits on pathological completions (every test returns, none raises on any ``str``):

- normalisation, table parsing and equation extraction are linear passes, done once per completion
  (``PreparedText``); HTML tables are parsed only when ``<table`` occurs;
- tables: spans clamped (colspan ≤ 1000, rowspan ≤ 65534), at most 50,000 grid slots a table;
- ``order``: at most ``fuzzy.MAX_ANCHORS`` anchors examined per search, each a few C-level
  Levenshtein calls on ``len(text) + max_diffs`` characters;
- ``baseline``: the tail-repetition check reads at most ``(max_repeats + 1) * 5`` characters;
- ``format``: spans found by linear scans (no quadratic ``(.*?)`` regexes);
- ``math``: equations over ``latex.MAX_EQUATION_CHARS`` do not parse, at most
  ``types.math_eq.MAX_CANDIDATES`` candidates are compared per test, and the glyph assignment search
  stops after ``latex.MAX_MATCH_STEPS`` steps.

This package imports no torch / transformers / trl (it is the lowest layer of olmocr_rl).
"""

from .base import BenchTest
from .errors import TestLoadError
from .loading import load_single_test, load_tests
from .normalize import normalize_text
from .page import evaluate_page, pass_rate
from .prepared import PreparedText, prepare_text
from .registry import TEST_CLASSES, TEST_TYPES, test_types
from .types import BaselineTest, FootnoteTest, FormatTest, MathTest, OrderTest, PresenceTest, TableTest

__all__ = [
    "BenchTest",
    "BaselineTest",
    "FootnoteTest",
    "FormatTest",
    "MathTest",
    "OrderTest",
    "PresenceTest",
    "TableTest",
    "TEST_CLASSES",
    "TEST_TYPES",
    "test_types",
    "TestLoadError",
    "PreparedText",
    "evaluate_page",
    "load_single_test",
    "load_tests",
    "normalize_text",
    "pass_rate",
    "prepare_text",
]
