"""The common shape of an olmOCR-bench test: JSON fields, validation, and the run contract.

Every test type is a frozen dataclass deriving from :class:`BenchTest`. Its JSON schema is the
dataclass's own fields (``FIELD_KINDS`` gives the JSON type of each); values are validated in
``__post_init__`` so a test object, however it was made, is always valid. Derived values (normalised
reference strings, thresholds) are computed once there and stored on the frozen object, so a test
is immutable, hashable, picklable and safe to share between threads and processes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import FieldError
from .prepared import PreparedText, prepare_text

__all__ = ["BenchTest", "threshold_for", "check_max_diffs_fits"]

# JSON type of each field, by kind name: "str", "int", "bool", optional variants end with "?".
_KIND_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
}
_KIND_WORDS = {"str": "a string", "int": "an integer", "bool": "true or false"}

CHECKED_VALUES = ("verified", "rejected")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def threshold_for(max_diffs: int, reference: str) -> float:
    """olmOCR-bench's similarity threshold: ``1 - max_diffs / len(reference)`` (length 0 counts as 1)."""
    return 1.0 - (max_diffs / (len(reference) if len(reference) > 0 else 1))


def check_max_diffs_fits(max_diffs: int, reference: str, what: str) -> None:
    """Reject a ``max_diffs`` that makes a fuzzy test trivially true (threshold ≤ 0)."""
    if max_diffs > len(reference):
        raise FieldError("max_diffs", f"{max_diffs} is larger than the {what} it applies to ({len(reference)} chars); lower it")
    if max_diffs == len(reference) and max_diffs > 0:
        raise FieldError(
            "max_diffs", f"{max_diffs} equals the length of the {what} it applies to, so any text would match; lower it"
        )


@dataclass(frozen=True, kw_only=True)
class BenchTest:
    """Base of all test types: the fields every olmOCR-bench JSONL line carries.

    ``run(text)`` and ``run_prepared(prepared)`` return ``(passed, explanation)``; the explanation
    is empty when the test passes and says why when it fails. Both are pure: no I/O, no state.
    """

    __test__: ClassVar[bool] = False  # not a pytest test class

    pdf: str
    page: int
    id: str
    type: str
    max_diffs: int = 0
    checked: str | None = None
    url: str | None = None

    TYPES: ClassVar[tuple[str, ...]] = ()
    FIELD_KINDS: ClassVar[dict[str, str]] = {
        "pdf": "str",
        "page": "int",
        "id": "str",
        "type": "str",
        "max_diffs": "int",
        "checked": "str?",
        "url": "str?",
    }

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def json_fields(cls) -> dict[str, str]:
        """JSON key -> kind for this test type (common fields first)."""
        kinds: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            kinds.update(klass.__dict__.get("FIELD_KINDS", {}))
        return kinds

    @classmethod
    def required_fields(cls) -> tuple[str, ...]:
        return tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BenchTest":
        """Build a test from a parsed JSONL object; raises :class:`FieldError` on any problem."""
        kinds = cls.json_fields()
        for key in data:
            if key not in kinds:
                allowed = ", ".join(sorted(kinds))
                raise FieldError(key, f"unknown field for a '{data.get('type')}' test (allowed: {allowed}); remove it")
        for name in cls.required_fields():
            if name not in data:
                raise FieldError(name, f"required for a '{data.get('type')}' test but missing; add it")
        for key, value in data.items():
            kind = kinds[key]
            optional = kind.endswith("?")
            base = kind.rstrip("?")
            if value is None and optional:
                continue
            if not _KIND_CHECKS[base](value):
                expected = _KIND_WORDS[base] + (" or null" if optional else "")
                raise FieldError(key, f"expected {expected}, got {_describe(value)}")
        return cls(**data)

    def __post_init__(self) -> None:
        if not self.pdf.strip():
            raise FieldError("pdf", "must not be empty; give the PDF path relative to pdfs/")
        if not self.id.strip():
            raise FieldError("id", "must not be empty; give the test a unique id")
        if self.page < 1:
            raise FieldError("page", f"pages are numbered from 1, got {self.page}")
        if self.max_diffs < 0:
            raise FieldError("max_diffs", f"must be 0 or more, got {self.max_diffs}")
        if self.checked is not None and self.checked not in CHECKED_VALUES:
            raise FieldError("checked", f"must be one of {', '.join(CHECKED_VALUES)} or null, got {self.checked!r}")
        if self.TYPES and self.type not in self.TYPES:
            raise FieldError("type", f"{type(self).__name__} handles {', '.join(self.TYPES)}, not {self.type!r}")

    def _set(self, **derived: Any) -> None:
        """Store derived values on the frozen instance (used from ``__post_init__`` only)."""
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    # --- running ------------------------------------------------------------------------------

    def run(self, text: str) -> tuple[bool, str]:
        """Run the test on one completion's text; same verdict as ``run_prepared(prepare_text(text))``."""
        return self.run_prepared(prepare_text(text))

    def run_prepared(self, prepared: PreparedText) -> tuple[bool, str]:
        """Run the test on a :class:`PreparedText` (work shared by all tests of a page is cached there)."""
        raise NotImplementedError
