"""Page names: ``<pdf relative to pdfs/>:<1-based page>``, what the page filters (``--pages``, ``--exclude_pages``)
search in, and how a message shows a folder's names. Light (no torch): ``validate_bench --list_pages`` uses it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def page_key(pdf: str, page: int) -> str:
    """A page's name for the page filters: ``<pdf relative to pdfs/>:<1-based page>``, e.g. ``counting.pdf:2``."""
    return f"{pdf}:{page}"


#: How many page names a message shows before "... (N more)".
_NAMES_SHOWN = 3


def list_pages_command(folder, jsonl_filter: str | None = None, test_types: Sequence[str] | None = None) -> str:
    """The command that prints every page name of ``folder`` with these filters, one a line (validate_bench)."""
    words = ["python", "-m", "olmocr_rl.validate_bench", str(folder), "--list_pages"]
    if jsonl_filter:
        words += ["--jsonl_filter", jsonl_filter]
    if test_types:
        words += ["--bench_type_filter", *test_types]
    return shlex.join(words)


def page_names_hint(keys: Sequence[str], command: str) -> str:
    """``its N pages are named <pdf under pdfs/>:<page>: a.pdf:1, b.pdf:1, c.pdf:2, ... (N-3 more; `command` lists them
    all)``: the first few of ``keys``, their count, and ``command`` (:func:`list_pages_command`)."""
    shown = ", ".join(keys[:_NAMES_SHOWN])
    more = len(keys) - _NAMES_SHOWN
    rest = f", ... ({more} more; `{command}` lists them all)" if more > 0 else f" (`{command}` lists them)"
    count = "its 1 page is" if len(keys) == 1 else f"its {len(keys)} pages are"
    return f"{count} named <pdf under pdfs/>:<page>: {shown}{rest}"
