"""The unit tests of one page, looked up by id in the page's JSONL files and cached across steps.

A page's tests are named by its dataset item: ``jsonl_files`` (every bench file holding tests for the page)
and ``test_ids``. Looking them up must be cheap at every GRPO step, so two bounded caches sit here:

* a per-file index ``id -> raw JSON entry`` (a 30k-test file is parsed once, not once per page), kept
  while the file's size and modification time are unchanged;
* the constructed tests per :class:`PageKey` (constructing a test normalises its strings and may parse its
  reference equation, so a page seen again, e.g. in a second epoch, reuses them).

Decisions (olmOCR's behaviour where it has one; docs/rewards.md and docs/design.md):

* an id found in none of the files is left out of the denominator and reported in ``missing_ids``;
* an id present in several of the page's files is taken from the first file listed;
* an entry that fails to construct (``load_single_test`` raises) is left out and reported in ``load_errors``;
* a file that cannot be read leaves its ids missing and is reported in ``load_errors``.
The caller logs each report once; none of these raise.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from olmocr_rl.bench import load_single_test
from olmocr_rl.bench.loading import read_test_jsonl

# Bounds on the caches. A test set is a few kilobytes; 4096 pages covers the public synthetic mix
# (2,186 pages) for multi-epoch runs. Bench files are few, but each index can hold ~30k entries.
MAX_CACHED_PAGES = 4096
MAX_CACHED_FILES = 32


@dataclass(frozen=True)
class PageKey:
    """Identifies a page's test set: its JSONL files (in order), its test ids, and an optional type filter.

    Plain strings and tuples only, so it pickles cheaply to reward worker processes and hashes as a cache key.
    """

    jsonl_files: tuple[str, ...]
    test_ids: tuple[str, ...]
    type_filter: tuple[str, ...] | None = None

    @classmethod
    def build(
        cls, jsonl_files: Iterable[str], test_ids: Iterable[str], type_filter: Iterable[str] | None = None
    ) -> "PageKey":
        """Normalise ids (de-duplicated, sorted: order never changes a pass rate) and files (de-duplicated)."""
        return cls(
            jsonl_files=tuple(dict.fromkeys(str(f) for f in jsonl_files)),
            test_ids=tuple(sorted(set(str(i) for i in test_ids))),
            type_filter=None if type_filter is None else tuple(sorted(set(type_filter))),
        )

    def group_id(self) -> str:
        """A short id of the page, stable across processes (for grouping completions of the same page)."""
        digest = hashlib.blake2b("\n".join(self.jsonl_files + ("",) + self.test_ids).encode(), digest_size=8)
        return digest.hexdigest()


@dataclass(frozen=True)
class LoadedTest:
    """A constructed bench test and the basename of the JSONL file it came from (for per-file telemetry)."""

    test: Any
    jsonl_basename: str


@dataclass(frozen=True)
class PageTests:
    """The usable tests of a page plus what could not be used (each a human-readable problem)."""

    tests: tuple[LoadedTest, ...]
    missing_ids: tuple[str, ...] = ()
    load_errors: tuple[str, ...] = ()


def test_type_name(test: Any) -> str:
    """The test's type as a plain string (``present``, ``table``...), whether stored as a str or a str Enum."""
    kind = getattr(test, "type", "unknown")
    return str(getattr(kind, "value", kind))


@dataclass
class _FileIndex:
    stamp: tuple[int, int]
    entries: dict[str, dict]
    problems: list[str] = field(default_factory=list)


class PageTestCache:
    """Loads and caches page test sets (see the module docstring). Not thread-safe; one per process."""

    def __init__(self, max_pages: int = MAX_CACHED_PAGES, max_files: int = MAX_CACHED_FILES):
        self.max_pages = max_pages
        self.max_files = max_files
        self._pages: OrderedDict[PageKey, PageTests] = OrderedDict()
        self._files: OrderedDict[str, _FileIndex] = OrderedDict()
        self.file_parses = 0  # how many times a JSONL file was read (tests check the caching)

    def get(self, key: PageKey) -> PageTests:
        """The page's tests, from the cache when present."""
        cached = self._pages.get(key)
        if cached is not None:
            self._pages.move_to_end(key)
            return cached
        page = self._load(key)
        self._pages[key] = page
        if len(self._pages) > self.max_pages:
            self._pages.popitem(last=False)
        return page

    def _load(self, key: PageKey) -> PageTests:
        wanted = list(key.test_ids)
        found: dict[str, tuple[dict, str]] = {}
        problems: list[str] = []
        for path in key.jsonl_files:
            index = self._index(path)
            problems.extend(index.problems)
            for test_id in wanted:
                if test_id not in found and test_id in index.entries:
                    found[test_id] = (index.entries[test_id], os.path.basename(path))
        loaded: list[LoadedTest] = []
        for test_id in wanted:
            if test_id not in found:
                continue
            entry, basename = found[test_id]
            try:
                # A copy, so a constructor that pops keys cannot damage the shared index.
                test = load_single_test(dict(entry))
            except Exception as error:  # noqa: BLE001 - any bad entry is excluded, as olmOCR's loader does
                problems.append(f"{basename}: test {test_id!r} could not be loaded: {type(error).__name__}: {error}")
                continue
            if key.type_filter is not None and test_type_name(test) not in key.type_filter:
                continue
            loaded.append(LoadedTest(test, basename))
        missing = tuple(test_id for test_id in wanted if test_id not in found)
        return PageTests(tests=tuple(loaded), missing_ids=missing, load_errors=tuple(problems))

    def _index(self, path: str) -> _FileIndex:
        try:
            stat = os.stat(path)
        except OSError as error:
            return _FileIndex(stamp=(-1, -1), entries={}, problems=[f"{path}: cannot read: {error}"])
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._files.get(path)
        if cached is not None and cached.stamp == stamp:
            self._files.move_to_end(path)
            return cached
        index = _read_index(path, stamp)
        self.file_parses += 1
        self._files[path] = index
        if len(self._files) > self.max_files:
            self._files.popitem(last=False)
        return index


def _read_index(path: str, stamp: tuple[int, int]) -> _FileIndex:
    """Map each test id of a JSONL file to its raw entry (read by ``read_test_jsonl``); the first of duplicate ids wins.

    Unreadable files and bad lines are problems (``file:line: what; fix``); entries without a string id are skipped.
    """
    entries: dict[str, dict] = {}
    lines, errors = read_test_jsonl(path)
    for _line, entry in lines:
        test_id = entry.get("id")
        if isinstance(test_id, str):
            entries.setdefault(test_id, entry)
    return _FileIndex(stamp=stamp, entries=entries, problems=[str(error) for error in errors])


def page_key_for(
    jsonl_files: Sequence[str] | None,
    jsonl_file: str | None,
    test_ids: Sequence[str] | None,
    type_filter: Iterable[str] | None = None,
) -> PageKey | None:
    """The key of one dataset item's test set, or None when the item names no files or no tests.

    ``jsonl_files`` (every file with tests for the page) wins; ``jsonl_file`` alone is the fallback for
    items built the way olmOCR built them.
    """
    files = list(jsonl_files) if jsonl_files else ([jsonl_file] if jsonl_file else [])
    if not files or not test_ids:
        return None
    return PageKey.build(files, test_ids, type_filter)
