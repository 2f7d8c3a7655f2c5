"""Strict loading of olmOCR-bench test definitions (JSONL, one test per line).

:func:`read_test_jsonl` is the one reader of a JSONL file of unit tests (the data scan and the reward's
page-test cache use it too): every JSON object with its line number, and every problem with the file,
the line and the fix. On top of it, every problem a user can cause is reported as a
:class:`TestLoadError` naming the file, the line and the field, with what to do about it: a line that
is not JSON or not an object, a missing or unknown ``type``, a missing, empty, unknown or wrongly typed
field, a ``max_diffs`` too large for its text, and an ``id`` used twice in one file (both lines are
named). Blank lines are skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, overload

from .base import BenchTest
from .errors import FieldError, TestLoadError
from .registry import TEST_CLASSES, test_types

__all__ = ["load_single_test", "load_tests", "read_test_jsonl"]


def _parse_line(text: str, *, source: str | None, line: int | None) -> dict[str, Any]:
    """One JSONL line as a JSON object; TestLoadError (file:line and the fix) for anything else."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise TestLoadError(
            f"not valid JSON ({error.msg} at column {error.colno}); write one JSON object per line", path=source, line=line
        ) from None
    return _require_object(data, source=source, line=line)


def _require_object(data: object, *, source: str | None, line: int | None) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TestLoadError(
            f"expected a JSON object, got {type(data).__name__}; write each test as one JSON object", path=source, line=line
        )
    return data


def read_test_jsonl(path: str | os.PathLike[str]) -> tuple[list[tuple[int, dict[str, Any]]], list[TestLoadError]]:
    """Every JSON object of a JSONL file of unit tests with its 1-based line number, and every problem.

    Never raises for bad data: a file that is missing, unreadable or not UTF-8 (located at the line of
    the first bad byte) gives no entries and one error; a line that is not JSON or not an object gives
    an error for that line. Blank lines are skipped. Lines are split on ``"\\n"`` only: a JSON string
    may legally hold U+2028 and other separators that ``splitlines`` would cut at.
    """
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return [], [TestLoadError("file not found; check the path", path=source)]
    except OSError as exc:
        return [], [TestLoadError(f"cannot read the file ({exc.strerror or exc}); check its permissions", path=source)]
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return [], [TestLoadError("not UTF-8 text; save the file as UTF-8", path=source, line=line)]
    entries: list[tuple[int, dict[str, Any]]] = []
    errors: list[TestLoadError] = []
    for number, text in enumerate(content.split("\n"), start=1):
        if not text.strip():
            continue
        try:
            entries.append((number, _parse_line(text, source=source, line=number)))
        except TestLoadError as error:
            errors.append(error)
    return entries, errors


def load_single_test(data: dict[str, Any] | str, *, source: str | None = None, line: int | None = None) -> BenchTest:
    """Build one test from a parsed JSONL object or a JSON string.

    ``source`` and ``line`` only locate errors. Raises :class:`TestLoadError` for any invalid
    definition (the JSON itself, the ``type``, or any field).
    """
    if isinstance(data, str):
        if not data.strip():
            raise TestLoadError("empty test definition; expected a JSON object", path=source, line=line)
        data = _parse_line(data.strip(), source=source, line=line)  # a JSON object, or TestLoadError
    else:
        data = _require_object(data, source=source, line=line)
    test_type = data.get("type")
    if test_type is None:
        raise TestLoadError(f"missing; set it to one of {', '.join(test_types())}", path=source, line=line, field="type")
    if not isinstance(test_type, str) or test_type not in TEST_CLASSES:
        raise TestLoadError(
            f"unknown test type {test_type!r}; expected one of {', '.join(test_types())}", path=source, line=line,
            field="type",
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
    entries, errors = read_test_jsonl(path)
    tests: list[BenchTest] = []
    first_line_of: dict[str, int] = {}
    for number, entry in entries:
        try:
            test = load_single_test(entry, source=source, line=number)
            if test.id in first_line_of:
                raise TestLoadError(
                    f"duplicate id {test.id!r}: already used on line {first_line_of[test.id]}; ids must be unique in a file",
                    path=source,
                    line=number,
                    field="id",
                )
        except TestLoadError as error:
            errors.append(error)
            continue
        first_line_of[test.id] = number
        tests.append(test)
    errors.sort(key=lambda error: error.line or 0)  # file order: the reader's and the tests' errors interleave
    if collect_errors:
        return tests, errors
    if errors:
        raise errors[0]
    return tests
