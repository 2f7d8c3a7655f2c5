"""An evaluation's folder: its transcriptions in olmOCR-bench's layout, ``scores.json`` (the scorer's result, each
test with its page) and ``evaluation.json`` (backend, protocol, model, seed, versions, counts), written whole or
not at all; and the progress bar on stderr."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

SUMMARY = "evaluation.json"
SCORES = "scores.json"
#: The packages whose versions an evaluation records.
VERSIONED = ("olmocr_rl", "torch", "transformers", "trl", "vllm", "pypdfium2")


def versions() -> dict:
    """Python's and the :data:`VERSIONED` packages' versions (None where not installed)."""
    found: dict = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def test_set_digest(test_ids: Sequence[str]) -> str:
    """A short digest of a set of test ids: two evaluations with equal digests scored the same tests."""
    return hashlib.sha256("\n".join(sorted(test_ids)).encode("utf-8")).hexdigest()[:16]


@contextlib.contextmanager
def staged(outputs: Path) -> Iterator[Path]:
    """A fresh folder beside ``outputs`` to write into; removed if the block raises (also on Ctrl-C)."""
    outputs.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outputs.name}.partial-", dir=outputs.parent))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, outputs: Path, replaced: Sequence[Path]) -> None:
    """Move what ``staging`` holds into ``outputs``: the files in ``replaced`` (earlier repeats of the pages just
    transcribed) are removed first; every staged file then replaces its namesake."""
    outputs.mkdir(parents=True, exist_ok=True)
    for old in replaced:
        old.unlink(missing_ok=True)
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            target = outputs / path.relative_to(staging)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def read_evaluation(folder: str | os.PathLike, flag: str) -> tuple[dict, dict]:
    """``(summary, scores)`` of an evaluation folder; ValueError naming ``flag`` when it is not one."""
    folder = Path(folder)
    for name in (SUMMARY, SCORES):
        if not (folder / name).is_file():
            raise ValueError(f"{flag} {folder}: no {name} there; pass a folder written by python -m olmocr_rl.evaluate")
    try:
        return (json.loads((folder / SUMMARY).read_text(encoding="utf-8")),
                json.loads((folder / SCORES).read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} {folder}: unreadable JSON ({exc})") from None


class Progress:
    """A progress bar on stderr: pages done, pages/s, time left. On a terminal one line redrawn; otherwise one line
    per finished page (logs stay readable)."""

    def __init__(self, total: int, label: str = "evaluate", stream=None, width: int = 24):
        self.total, self.label, self.width = total, label, width
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def rate(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, note: str = "") -> str:
        filled = int(self.width * self.done / self.total) if self.total else self.width
        rate = self.rate()
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = f", {left:.0f}s left" if rate > 0 and self.done < self.total else ""
        return (f"[{self.label}] |{'#' * filled}{'.' * (self.width - filled)}| {self.done}/{self.total} pages, "
                f"{rate:.2f} pages/s{eta}{f'  {note}' if note else ''}")

    def update(self, note: str = "") -> None:
        self.done += 1
        if self.tty:
            self.stream.write("\r" + self.line(note))
        else:
            self.stream.write(self.line(note) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
