"""Local file helpers shared by the storage modules: a cross-process folder lock and atomic JSON writes."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from olmocr_rl.storage.s3 import PARTIAL_SUFFIX


@contextlib.contextmanager
def folder_lock(lock_path: Path) -> Iterator[None]:
    """Serialise processes on one machine (e.g. 8 ranks loading one model) around a download."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # non-POSIX: no cross-process lock, temp names still keep files whole
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_json_atomic(path: str | os.PathLike, data: Any, *, indent: int | None = None, sort_keys: bool = False) -> None:
    """Write ``data`` as JSON (and a newline) to ``path`` whole or not at all: a temporary name, then a rename.

    The temporary name ends in ``PARTIAL_SUFFIX``, which the S3 mirror never uploads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    partial.write_text(json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")
    os.replace(partial, path)
