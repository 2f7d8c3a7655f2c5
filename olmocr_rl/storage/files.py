"""Local file helpers shared by the storage modules: cross-process locks (a download's, and the run's own lock on
its output folder), atomic JSON writes, and what a failed write says about the disk."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from olmocr_rl.storage.s3 import PARTIAL_SUFFIX, human_bytes


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


# ---- the run's lock on its output folder -----------------------------------------------------------------

RUN_LOCK = ".olmocr_rl-run.lock"  # in --output_dir; the mirror never uploads *.lock
_HELD: dict[str, Any] = {}  # folder -> open lock file, held until the process exits (flock ends with it)


class FolderInUseError(RuntimeError):
    """Another live process holds the run lock of the output folder; the message names it."""


def hold_run_lock(folder: str | os.PathLike) -> Path:
    """Take the exclusive run lock of ``folder`` for the rest of this process's life (the kernel drops it at
    exit, however the process ends: no stale lock after a crash or SIGKILL). The lock file records who holds
    it. Raises FolderInUseError, naming the holder, when another process has it. Returns the lock file."""
    path = Path(folder) / RUN_LOCK
    key = str(path.resolve())
    if key in _HELD:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # non-POSIX: no cross-process lock
        return path
    handle = open(path, "a+")  # not "w": truncating before the lock is ours would erase the holder's record
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "a process that left no record"
        handle.close()
        raise FolderInUseError(f"{folder} is in use by another run ({holder})") from None
    except OSError as exc:  # a file system without locks (some network mounts): go on, unprotected
        handle.close()
        logging.getLogger(__name__).warning("cannot lock %s (%s): a second run into this folder would not be "
                                            "stopped", path, exc)
        return path
    import socket
    import time

    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                 f"{' '.join(sys.argv)}\n")
    handle.flush()
    _HELD[key] = handle
    return path


# ---- write failures --------------------------------------------------------------------------------------

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_WHAT = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
         errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
         errno.EPERM: "operation not permitted", errno.EIO: "input/output error"}
_ERRNO_IN_TEXT = re.compile(r"(?:code: |\[Errno |errno )(\d+)")


def _errno_of(exc: BaseException) -> int | None:
    """The OS error number behind ``exc``: an OSError's, or one named in a wrapped message (safetensors'
    ``Os { code: 28, ... }``), following the exception's causes."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno:
            return exc.errno
        match = _ERRNO_IN_TEXT.search(str(exc))
        if match:
            return int(match.group(1))
        if "No space left on device" in str(exc):
            return errno.ENOSPC
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def describe_write_failure(exc: BaseException, folder: str | os.PathLike, needed: int | None) -> str | None:
    """Why a write into ``folder`` failed, in words, when the disk is why (full, read-only, not ours), else None.

    ``needed``: the bytes the whole write needs (a checkpoint's size), for the "needs ..., ... free" part.
    torch's writer reports a full disk as a bare ``RuntimeError`` (``basic_ios::clear: iostream error``): when
    the file system has less room than what is still to be written, that is taken as a full disk too.
    """
    folder = Path(folder)
    code = _errno_of(exc)
    root = _existing(folder.parent)
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        free = None
    if code is None:
        if not isinstance(exc, (OSError, RuntimeError)) and type(exc).__name__ != "SafetensorError":
            return None
        if free is None or needed is None or free >= max(needed - _bytes_under(folder), 1 << 20):
            return None
        code = errno.ENOSPC
    if code not in _WHAT:
        return None
    reason = _WHAT[code]
    if code in _DISK_FULL:
        need = f"needs about {human_bytes(needed)}" if needed else "needs more room"
        room = f"{human_bytes(free)} free" if free is not None else "its free space unknown"
        reason += f": it {need}, {room} on the file system of {root}"
    elif code in (errno.EACCES, errno.EPERM) and hasattr(os, "getuid"):
        reason += f": user id {os.getuid()} may not write in {root}"
    elif code == errno.EROFS:
        reason += f" ({root})"
    return reason


def _bytes_under(folder: Path) -> int:
    total = 0
    if folder.is_dir():
        for path in folder.rglob("*"):
            try:
                total += path.stat().st_size if path.is_file() else 0
            except OSError:
                continue
    return total
