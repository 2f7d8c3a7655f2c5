"""Reference transcriptions (`claude_original/`): the markdown a strong model wrote for a page.

Optional. Some rewards compare a completion with it (front matter, edit distance, element counts).
File naming is olmOCR's, matching what its synthetic-data miner writes:
`<folder>/claude_original/<pdf dir>/<name>_page<N>_pg1_repeat1.md`, where for a PDF named
`<name>_page<N>.pdf` (one page cut from page N of a longer document) N comes from the file name,
and otherwise <name> is the PDF's file name without `.pdf` and N is the test's page number.
"""

from __future__ import annotations

import os
from pathlib import Path

from olmocr_rl.data.front_matter import FrontMatterError, parse_page_response

REFERENCE_FOLDER = "claude_original"


class InvalidReferenceError(ValueError):
    """A reference markdown file that cannot be read or whose front matter is invalid."""

    def __init__(self, path: str | os.PathLike, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.detail = message


def reference_path(folder: str | os.PathLike, pdf: str, page: int) -> Path:
    """Where the reference for page `page` of `pdf` (relative to pdfs/) lives, present or not."""
    directory, filename = os.path.split(pdf)
    base = filename[:-4] if filename.lower().endswith(".pdf") else filename
    name, page_part = base, str(page)
    head, separator, tail = base.rpartition("_page")
    if separator and tail.isdigit():  # "<name>_page<N>": N as written, e.g. "_page03" stays "03"
        name, page_part = head, tail
    return Path(folder) / REFERENCE_FOLDER / directory / f"{name}_page{page_part}_pg1_repeat1.md"


def load_reference(path: str | os.PathLike) -> str:
    """The reference text (front matter included), after checking its front matter.

    Raises InvalidReferenceError naming the file when it is unreadable, not UTF-8, or its front
    matter fails `parse_page_response` (olmOCR stops training in that case too).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidReferenceError(path, "not UTF-8 text; save the file as UTF-8") from None
    except OSError as exc:
        raise InvalidReferenceError(path, f"cannot read the file ({exc.strerror})") from None
    try:
        parse_page_response(text)
    except FrontMatterError as exc:
        raise InvalidReferenceError(path, f"invalid reference: {exc}; fix the front matter or delete the file") from None
    return text


def find_reference(folder: str | os.PathLike, pdf: str, page: int) -> str | None:
    """The checked reference text for (pdf, page), or None when the folder has no such file."""
    path = reference_path(folder, pdf, page)
    return load_reference(path) if path.is_file() else None
