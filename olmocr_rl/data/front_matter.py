"""The YAML front matter that olmOCR models write above every page transcription.

A completion looks like::

    ---
    primary_language: en
    is_rotation_valid: True
    rotation_correction: 0
    is_table: False
    is_diagram: False
    ---
    The page text, in markdown...

`split_front_matter` separates the two parts (rewards call it on every sampled completion, so it is
fast and never raises); `parse_page_response` validates the front matter the way olmOCR's
FrontMatterParser does, with the same type coercions; `format_front_matter` writes the SFT target
layout back out.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from typing import Any

import yaml

# The C loader is ~10x faster than the pure-Python one; both accept the same documents.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

FRONT_MATTER_KEYS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")
VALID_ROTATIONS = (0, 90, 180, 270)

_OPENING = "---\n"
_CLOSING = "\n---"
_INTEGER = re.compile(r"[+-]?\d+")


class FrontMatterError(ValueError):
    """A page transcription whose front matter is absent, not YAML, or has wrong keys or values."""


@dataclass(frozen=True)
class PageResponse:
    """One page as olmOCR models describe it: five front-matter values plus the page text.

    Construction checks every type (TypeError) and that `rotation_correction` is one of 0, 90, 180,
    270 (ValueError). `natural_text` is None for a page with no text.
    """

    primary_language: str | None
    is_rotation_valid: bool
    rotation_correction: int
    is_table: bool
    is_diagram: bool
    natural_text: str | None

    def __post_init__(self) -> None:
        if self.primary_language is not None and not isinstance(self.primary_language, str):
            raise TypeError(f"primary_language must be a string or None, got {self.primary_language!r}")
        for name in ("is_rotation_valid", "is_table", "is_diagram"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {value!r}")
        # bool is an int subclass; `rotation_correction: false` would otherwise pass as 0.
        if not isinstance(self.rotation_correction, int) or isinstance(self.rotation_correction, bool):
            raise TypeError(f"rotation_correction must be an int, got {self.rotation_correction!r}")
        if self.rotation_correction not in VALID_ROTATIONS:
            raise ValueError(f"rotation_correction must be one of 0, 90, 180, 270, got {self.rotation_correction}")
        if self.natural_text is not None and not isinstance(self.natural_text, str):
            raise TypeError(f"natural_text must be a string or None, got {type(self.natural_text).__name__}")


def _locate(text: str) -> tuple[str, str] | None:
    """(YAML source, body) when `text` opens with a '---' line closed by a later '---'; else None.

    Same delimiting rule as olmOCR: the text must start with "---\\n"; the block ends at the next
    "\\n---"; the body is what follows those four characters, stripped.
    """
    if not text.startswith(_OPENING):
        return None
    end = text.find(_CLOSING, len(_OPENING) - 1)  # -1: an empty block "---\n---" closes at once
    if end == -1:
        return None
    return text[len(_OPENING) : end], text[end + len(_CLOSING) :].strip()


_CACHED_SOURCE_CHARS = 2000  # a real front matter is ~120 characters; do not keep huge blocks alive


@functools.lru_cache(maxsize=4096)
def _parse_block(source: str) -> tuple[dict | None, str | None]:
    """(mapping, None) for a YAML mapping ({} when empty), else (None, why it is not one).

    Cached: the G completions of a page mostly share one front matter, and YAML parsing costs
    ~100x more than the rest of a split.
    """
    try:
        data = yaml.load(source, Loader=_YAML_LOADER)
    except Exception as exc:  # noqa: BLE001 - any YAML failure (incl. bad timestamps) means "no front matter"
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"front matter is not valid YAML ({detail}); write one 'key: value' per line"
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return None, f"front matter must be 'key: value' lines, got a YAML {type(data).__name__}: {str(data)[:60]!r}"
    return data, None


def _load_yaml(source: str) -> tuple[dict | None, str | None]:
    """`_parse_block`, with a private copy of the mapping for the caller."""
    data, problem = _parse_block(source) if len(source) <= _CACHED_SOURCE_CHARS else _parse_block.__wrapped__(source)
    if data is None:
        return None, problem
    nested = any(isinstance(value, (dict, list, set)) for value in data.values())
    return (copy.deepcopy(data) if nested else dict(data)), None


def split_front_matter(text: str) -> tuple[dict | None, str]:
    """Split a completion into (front matter, body). Never raises.

    Returns the parsed front-matter mapping and the body with the front matter removed (stripped).
    When the text has no front-matter block, or the block is not a YAML mapping, returns
    (None, text.strip()): like olmOCR, an unparseable block is treated as part of the page text.
    An empty block ("---\\n---") gives {}.
    """
    if not isinstance(text, str):
        return None, ""
    located = _locate(text)
    if located is None:
        return None, text.strip()
    source, body = located
    data, _problem = _load_yaml(source)
    if data is None:
        return None, text.strip()
    return data, body


def _as_optional_str(key: str, value: Any) -> str | None:
    # olmOCR turns YAML booleans (e.g. a bare `no`) and empty strings into "no language".
    if value is None or isinstance(value, bool) or value == "":
        return None
    if isinstance(value, str):
        return value
    raise FrontMatterError(f"front matter key '{key}': expected a language code such as en, got {value!r}")


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):  # olmOCR: "true" in any case is True, any other string False
        return value.lower() == "true"
    raise FrontMatterError(f"front matter key '{key}': expected True or False, got {value!r}")


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value)
    raise FrontMatterError(f"front matter key '{key}': expected one of 0, 90, 180, 270, got {value!r}")


def parse_page_response(text: str) -> PageResponse:
    """Parse and validate a page transcription with front matter, as olmOCR's FrontMatterParser does.

    Coercions: numeric strings for the int, strings for bools ("true" in any case -> True, any other
    string -> False), YAML booleans and "" -> None for `primary_language`. Missing or extra keys,
    other types, and rotations outside {0, 90, 180, 270} raise FrontMatterError naming the key.
    The body (stripped) becomes `natural_text`, None when empty.
    """
    located = _locate(text) if isinstance(text, str) else None
    if located is None:
        raise FrontMatterError(
            "no front matter: the text must start with a '---' line, then the keys "
            f"{', '.join(FRONT_MATTER_KEYS)} as 'key: value' lines, then a closing '---' line"
        )
    source, body = located
    data, problem = _load_yaml(source)
    if data is None:
        raise FrontMatterError(problem)

    missing = [key for key in FRONT_MATTER_KEYS if key not in data]
    extra = [str(key) for key in data if key not in FRONT_MATTER_KEYS]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing key(s) {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected key(s) {', '.join(extra)}")
        raise FrontMatterError(f"front matter: {'; '.join(parts)}; the keys are exactly {', '.join(FRONT_MATTER_KEYS)}")

    try:
        return PageResponse(
            primary_language=_as_optional_str("primary_language", data["primary_language"]),
            is_rotation_valid=_as_bool("is_rotation_valid", data["is_rotation_valid"]),
            rotation_correction=_as_int("rotation_correction", data["rotation_correction"]),
            is_table=_as_bool("is_table", data["is_table"]),
            is_diagram=_as_bool("is_diagram", data["is_diagram"]),
            natural_text=body or None,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, FrontMatterError):
            raise
        raise FrontMatterError(f"front matter: {exc}") from None


def format_front_matter(response: PageResponse) -> str:
    """The SFT target text for `response`: '---', the five 'key: value' lines in order, '---', the body.

    Values are written as Python prints them (True/False, 0/90/180/270, and a missing language as
    the text None, which YAML reads back as the string "None" -- olmOCR's own convention). The result
    is stripped, so a page without text is the front matter alone.
    """
    lines = [
        "---",
        f"primary_language: {response.primary_language}",
        f"is_rotation_valid: {response.is_rotation_valid}",
        f"rotation_correction: {response.rotation_correction}",
        f"is_table: {response.is_table}",
        f"is_diagram: {response.is_diagram}",
        "---",
    ]
    return ("\n".join(lines) + "\n" + (response.natural_text or "")).strip()
