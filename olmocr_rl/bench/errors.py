"""Errors raised while loading olmOCR-bench tests."""

from __future__ import annotations

__all__ = ["TestLoadError", "FieldError"]


class FieldError(ValueError):
    """A test definition is invalid; raised by the test classes, located by the loader.

    ``field`` names the JSON key at fault (``None`` when the line as a whole is wrong).
    """

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


class TestLoadError(ValueError):
    """A test definition could not be loaded.

    Attributes: ``path`` (file the definition came from, or ``None``), ``line`` (1-based line
    number, or ``None``), ``field`` (the JSON key at fault, or ``None``) and ``reason`` (the bare
    explanation). ``str(error)`` reads like ``dataset.jsonl:12: field 'max_diffs': 40 is larger than
    the text it applies to (31 chars); lower it``.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, reason: str, *, path: str | None = None, line: int | None = None, field: str | None = None) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        elif self.line is not None:
            where = f"line {self.line}: "
        what = f"field '{self.field}': " if self.field is not None else ""
        return f"{where}{what}{self.reason}"

    def __reduce__(self):  # keep the keyword-only attributes when pickled (multiprocessing)
        return (_rebuild_load_error, (self.reason, self.path, self.line, self.field))


def _rebuild_load_error(reason: str, path: str | None, line: int | None, field: str | None) -> TestLoadError:
    return TestLoadError(reason, path=path, line=line, field=field)
