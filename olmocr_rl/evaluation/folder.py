"""An evaluation's folder, written page by page so that a stopped run continues where it stopped.

    OUTPUTS/run.json                               what the run is: model, tests, pages, protocol, settings
    OUTPUTS/pages.jsonl                            one record per finished page, appended (and synced) as it finishes
    OUTPUTS/<pdf stem>_pg<page>_repeat<k>.md       the scored transcriptions (olmOCR-bench's layout)
    OUTPUTS/model_only/<...>_repeat<k>.md          --protocol olmocr-pipeline: what the model-only score reads
    OUTPUTS/scores.json, scores_model_only.json    at the end: the scorer's results
    OUTPUTS/evaluation.json                        at the end: what ran and what it counted

A page's files are written before its record, so a page without a record is redone. :meth:`EvaluationFolder.open`
refuses a folder that holds another run (another model, bench, page selection or setting: the first difference is
named) unless ``overwrite``, which deletes the evaluation's files first.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from olmocr_rl.config.values import DEFAULT_TARGET_LONGEST_IMAGE_DIM
from olmocr_rl.evaluation.common import EvaluateError, output_path

RUN = "run.json"
PAGES = "pages.jsonl"
SUMMARY = "evaluation.json"
SCORES = "scores.json"
MODEL_ONLY_SCORES = "scores_model_only.json"
MODEL_ONLY = "model_only"
#: Files --compare writes into EVAL_B by default.
COMPARE_FILES = ("compare.png", "compare.json")
#: The packages whose versions an evaluation records.
VERSIONED = ("olmocr_rl", "torch", "transformers", "trl", "vllm", "pypdfium2")
#: How a difference in run.json's identity is named: key -> the flag (or what) that made it.
IDENTITY_FLAGS = {
    "model": "--model", "model_files": "the model folder's files (retrained or replaced since?)",
    "pages": "the page selection (--pages / --exclude_pages / --jsonl_filter)",
    "test_set": "the tests of the selected pages (another --bench, --jsonl_filter, or edited JSONL files)",
    "protocol": "--protocol",
    "backend": "--backend", "server_model": "--server_model", "num_samples": "--num_samples",
    "temperature": "--temperature", "max_new_tokens": "--max_new_tokens", "max_attempts": "--max_attempts",
    "seed": "--seed", "batch_size": "--batch_size", "scoring": "--scoring",
    "image_dim": "--target_longest_image_dim",
}
_REPEAT_FILE = re.compile(r".+_pg\d+_repeat\d+\.md")


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


def model_fingerprint(model: str) -> dict:
    """A local model folder's weight and config files with their sizes and modification times (a retrained or
    replaced model differs); {} for a hub id or an s3:// prefix."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return {}
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(path.iterdir())
            if p.is_file() and (p.suffix in (".safetensors", ".bin") or p.name in ("config.json", "adapter_config.json"))}


def write_json(path: Path, data: dict) -> None:
    """``data`` as JSON at ``path``, replaced whole (a reader never sees half a file)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for key in sorted(set(old) | set(new), key=lambda k: list(IDENTITY_FLAGS).index(k) if k in IDENTITY_FLAGS else 99):
        if old.get(key) != new.get(key):
            was, now = old.get(key), new.get(key)
            if isinstance(was, list) and isinstance(now, list):
                was, now = f"{len(was)} pages", f"{len(now)} pages"
            elif isinstance(was, dict) or isinstance(now, dict):
                was, now = "other files", "these"
            out.append(f"{IDENTITY_FLAGS.get(key, key)} (the folder's run: {was}; this run: {now})")
    return out


class EvaluationFolder:
    """One evaluation folder (the module docstring): its identity, its page records, its files."""

    def __init__(self, path: str | os.PathLike, pipeline: bool):
        self.path, self.pipeline = Path(path), pipeline

    # --- opening --------------------------------------------------------------------------------------------------

    def evaluation_files(self) -> list[Path]:
        """The files (and the model_only folder) an evaluation writes that are in the folder now."""
        if not self.path.is_dir():
            return []
        named = [self.path / name for name in (RUN, PAGES, SUMMARY, SCORES, MODEL_ONLY_SCORES, *COMPARE_FILES)]
        found = [p for p in named if p.exists()]
        found += [p for p in self.path.rglob("*.md") if _REPEAT_FILE.fullmatch(p.name)
                  and MODEL_ONLY not in p.relative_to(self.path).parts]
        return found + ([self.path / MODEL_ONLY] if (self.path / MODEL_ONLY).is_dir() else [])

    def open(self, identity: dict, *, overwrite: bool = False, about: dict | None = None) -> dict[str, dict]:
        """Make the folder this run's (new, resumed, or replaced with ``overwrite``); returns the records of the
        pages an earlier session of the same run finished, by page name. EvaluateError (one line) for a path that is
        not a folder, one that cannot be written, or another run's folder without ``overwrite``."""
        flag = f"--outputs {self.path}"
        if self.path.exists() and not self.path.is_dir():
            raise EvaluateError(f"{flag} is a file, not a folder; pass a folder (it is created if missing)")
        run = self.path / RUN
        if run.is_file():
            try:
                stored = json.loads(run.read_text(encoding="utf-8"))["identity"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                stored = {"unreadable": str(exc)}
            if "unreadable" not in stored and "image_dim" in identity:  # written before the flag: olmOCR's size
                stored.setdefault("image_dim", DEFAULT_TARGET_LONGEST_IMAGE_DIM)
            if stored != identity and not overwrite:
                differences = _differences(stored, identity)
                raise EvaluateError(f"{flag} holds another run's evaluation: {differences[0]}"
                                    + (f" (and {len(differences) - 1} more difference(s))" if len(differences) > 1
                                       else "") + "; pass another --outputs, or --overwrite to replace it")
            if stored == identity:
                return self.records()
        elif self.evaluation_files() and not overwrite:
            raise EvaluateError(f"{flag} holds evaluation files without a run.json (an evaluation of an earlier "
                                "version, or written by hand), which this run would mix with its own; pass another "
                                "--outputs, or --overwrite to replace them")
        self._clear()
        self._create(identity, about or {})
        return {}

    def _clear(self) -> None:
        for path in self.evaluation_files():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    def _create(self, identity: dict, about: dict) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            write_json(self.path / RUN, {"identity": identity, **about,
                                         "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            (self.path / PAGES).touch()
        except OSError as exc:
            raise EvaluateError(f"--outputs {self.path}: cannot write there ({exc.strerror or exc}); pass a folder "
                                "on a writable file system") from None

    def records(self) -> dict[str, dict]:
        """The page records, the last one of each page winning; a partial last line (a kill mid-write) is cut off
        the file; a record whose files are gone, or with a failed request (the backend's failure: retried), does
        not count."""
        path = self.path / PAGES
        raw = path.read_bytes() if path.is_file() else b""
        complete = raw[: raw.rfind(b"\n") + 1]
        if complete != raw:
            with path.open("r+b") as handle:
                handle.truncate(len(complete))
        records: dict[str, dict] = {}
        for line in complete.decode("utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or "page" not in record:
                continue
            retry = any(repeat.get("failed_requests") for repeat in record.get("repeats", ()))
            if retry or not all(self.page_files_exist(record)):
                records.pop(record["page"], None)
            else:
                records[record["page"]] = record
        return records

    def page_files_exist(self, record: dict) -> list[bool]:
        folders = [self.path] + ([self.path / MODEL_ONLY] if self.pipeline else [])
        return [output_path(folder, record["pdf"], record["page_number"], k).is_file()
                for folder in folders for k, repeat in enumerate(record.get("repeats", ()), start=1)
                if repeat.get("outcome") != "error"]

    # --- pages ----------------------------------------------------------------------------------------------------

    def clear_page(self, pdf: str, page: int) -> None:
        """Remove a page's repeat files (a redone page must not keep a stale one: the scorer reads every repeat)."""
        from olmocr_rl.bench.score import output_files

        for folder in [self.path] + ([self.path / MODEL_ONLY] if self.pipeline else []):
            for path in output_files(folder, pdf, page):
                path.unlink(missing_ok=True)

    def write_page(self, record: dict, transcriptions: Sequence) -> None:
        """A finished page: its transcription files (a failed request's repeat is not written: its tests fail as
        missing), then its record, appended and synced."""
        for k, transcription in enumerate(transcriptions, start=1):
            if transcription.outcome == "error":
                continue
            texts = [(self.path, transcription.text)]
            if self.pipeline:
                texts.append((self.path / MODEL_ONLY, transcription.model_only_text))
            for folder, text in texts:
                path = output_path(folder, record["pdf"], record["page_number"], k)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        with (self.path / PAGES).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def finish(self, scores: dict, model_only_scores: dict | None, summary: dict) -> None:
        write_json(self.path / SCORES, scores)
        if model_only_scores is not None:
            write_json(self.path / MODEL_ONLY_SCORES, model_only_scores)
        write_json(self.path / SUMMARY, summary)


def read_evaluation(folder: str | os.PathLike, flag: str) -> tuple[dict, dict, dict | None]:
    """``(summary, scores, model-only scores or None)`` of an evaluation folder; ValueError naming ``flag`` when it
    is not one (a missing or unreadable file; an unfinished run is named as such)."""
    folder = Path(folder)
    if not (folder / SUMMARY).is_file() and (folder / RUN).is_file():
        raise ValueError(f"{flag} {folder}: an evaluation that has not finished (run.json but no {SUMMARY}); run "
                         "its command again to finish it")
    loaded = []
    for name in (SUMMARY, SCORES, MODEL_ONLY_SCORES):
        path = folder / name
        if not path.is_file():
            if name == MODEL_ONLY_SCORES:
                loaded.append(None)
                continue
            raise ValueError(f"{flag} {folder}: no {name} there; pass a folder written by python -m olmocr_rl.evaluate")
        try:
            loaded.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{flag} {path}: unreadable ({exc})") from None
    return loaded[0], loaded[1], loaded[2]
