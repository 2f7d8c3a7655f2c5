"""Strict loading of olmOCR-bench test definitions (JSONL, one test per line).

Every problem a user can cause is reported as a :class:`TestLoadError` naming the file, the line
and the field, with what to do about it: a line that is not JSON or not an object, a missing or
unknown ``type``, a missing, empty, unknown or wrongly typed field, a ``max_diffs`` too large for
its text, and an ``id`` used twice in one file (both lines are named). Blank lines are skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, overload

from .base import BenchTest
from .errors import FieldError, TestLoadError
from .registry import TEST_CLASSES, TEST_TYPES

__all__ = ["load_single_test", "load_tests"]


def load_single_test(data: dict[str, Any] | str, *, source: str | None = None, line: int | None = None) -> BenchTest:
    """Build one test from a parsed JSONL object or a JSON string.

    ``source`` and ``line`` only locate errors. Raises :class:`TestLoadError` for any invalid
    definition (the JSON itself, the ``type``, or any field).
    """
    if isinstance(data, str):
        stripped = data.strip()
        if not stripped:
            raise TestLoadError("empty test definition; expected a JSON object", path=source, line=line)
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise TestLoadError(f"not valid JSON ({error.msg} at column {error.colno}); fix the line", path=source, line=line) from None
    if not isinstance(data, dict):
        raise TestLoadError(f"expected a JSON object, got {type(data).__name__}", path=source, line=line)
    test_type = data.get("type")
    if test_type is None:
        raise TestLoadError(f"missing; set it to one of {', '.join(TEST_TYPES)}", path=source, line=line, field="type")
    if not isinstance(test_type, str) or test_type not in TEST_CLASSES:
        raise TestLoadError(
            f"unknown test type {test_type!r}; expected one of {', '.join(TEST_TYPES)}", path=source, line=line, field="type"
        )
    try:
        return TEST_CLASSES[test_type].from_json(data)
    except FieldError as error:
        raise TestLoadError(error.reason, path=source, line=line, field=error.field) from None


@overload
def load_tests(path: str | os.PathLike[str], *, collect_errors: Literal[False] = False) -> list[BenchTest]: ...
@overload
def load_tests(path: str | os.PathLike[str], *, collect_errors: Literal[True]) -> tuple[list[BenchTest], list[TestLoadError]]: ...


def load_tests(path, *, collect_errors=False):
    """Load every test of a JSONL file, in file order.

    Default: raise the first :class:`TestLoadError`. With ``collect_errors=True`` return
    ``(tests, errors)``: the tests that loaded and every error of the file (duplicates included;
    the second of two tests sharing an ``id`` is left out of ``tests``).
    """
    source = str(path)
    errors: list[TestLoadError] = []
    tests: list[BenchTest] = []
    try:
        content = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        error = TestLoadError("file not found; check the path", path=source)
        if collect_errors:
            return [], [error]
        raise error from None
    except (OSError, UnicodeDecodeError) as exc:
        error = TestLoadError(f"cannot read the file ({exc})", path=source)
        if collect_errors:
            return [], [error]
        raise error from None

    first_line_of: dict[str, int] = {}
    # split("\n"), not splitlines(): JSON strings may legally hold U+2028 and other separators.
    for number, text in enumerate(content.split("\n"), start=1):
        if not text.strip():
            continue
        try:
            test = load_single_test(text, source=source, line=number)
            if test.id in first_line_of:
                raise TestLoadError(
                    f"duplicate id {test.id!r}: already used on line {first_line_of[test.id]}; ids must be unique in a file",
                    path=source,
                    line=number,
                    field="id",
                )
        except TestLoadError as error:
            if not collect_errors:
                raise
            errors.append(error)
            continue
        first_line_of[test.id] = number
        tests.append(test)
    if collect_errors:
        return tests, errors
    return tests
