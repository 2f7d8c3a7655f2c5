"""Checking an olmOCR-bench folder as training uses it: every problem at once, the counts, and what was read.

Checks: the folder, `pdfs/` and `*.jsonl` exist; the `--jsonl_filter` regex compiles and matches a file;
`--bench_type_filter` names known types that occur; every JSONL line is a JSON object with a known `type`,
valid fields for that type (olmOCR-bench's rules, via `olmocr_rl.bench`), a `pdf` that exists and opens (not
encrypted or corrupt), a `page` inside it, and an `id` unused elsewhere in any JSONL file; every
`claude_original/` reference of a page has valid front matter. The report keeps the scan and the references,
so the dataset is built from it without reading anything again. `python -m olmocr_rl.validate_bench` is the
command-line front door.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from olmocr_rl.bench import TestLoadError, load_single_test
from olmocr_rl.data.references import InvalidReferenceError, find_reference
from olmocr_rl.data.scan import BenchProblem, BenchScan, scan_bench_folder
from olmocr_rl.data.summary import BenchSummary, summarize

__all__ = ["BenchReport", "validate_bench_folder"]


@dataclass(frozen=True)
class BenchReport:
    """The result of validate_bench_folder: every problem, the counts of the usable part, the scan, and each
    page's reference.

    `scan` is the folder read once (every PDF opened) and `references` every page's `claude_original/` text
    (None where it has none or it is invalid, which is a problem): the training CLI and evaluate build their
    dataset from the report (`OlmOCRBenchDataset(..., report=report)`) instead of reading the folder, opening
    the PDFs, parsing the references and counting the tests again.
    """

    folder: str
    problems: list[BenchProblem]
    summary: BenchSummary
    scan: BenchScan
    references: Mapping[tuple[str, int], str | None]

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary_line(self) -> str:
        """One line: what is there when all is well, else how many problems and the first one."""
        if self.ok:
            return (
                f"OK: {self.folder}: {self.summary.pages} pages, {self.summary.tests} tests "
                f"in {len(self.summary.tests_by_jsonl)} JSONL file(s)"
            )
        return f"FAILED: {self.folder}: {len(self.problems)} problem(s); first: {self.problems[0]}"

    def format(self) -> str:
        """The full report: the table and the OK line, or every problem and the FAILED line."""
        if self.ok:
            return f"{self.summary.table()}\n{self.summary_line()}"
        return "\n".join([*(str(problem) for problem in self.problems), self.summary_line()])


def validate_bench_folder(
    folder: str | os.PathLike, jsonl_filter: str | None = None, test_types: Sequence[str] | None = None
) -> BenchReport:
    """Check a bench folder as training would use it (same filters); never raises for bad data."""
    scan = scan_bench_folder(folder, jsonl_filter, test_types)
    problems = list(scan.problems)

    # Field-level checks: olmOCR-bench's own rules for each test type.
    for ref in scan.kept_tests:
        try:
            load_single_test(ref.entry, source=ref.jsonl_file, line=ref.line)
        except TestLoadError as exc:
            problems.append(BenchProblem(exc.path or ref.jsonl_file, exc.line or ref.line, exc.field, exc.reason))

    references: dict[tuple[str, int], str | None] = {}
    for page in scan.pages:
        try:
            references[(page.pdf, page.page)] = find_reference(folder, page.pdf, page.page)
        except InvalidReferenceError as exc:
            problems.append(BenchProblem(exc.path, None, None, exc.detail))
            references[(page.pdf, page.page)] = None

    if not scan.problems and not scan.kept_tests:
        problems.append(BenchProblem(str(folder), None, None, "the JSONL files hold no tests; add tests or pick another folder"))

    summary = summarize(
        str(folder),
        scan.pages,
        scan.jsonl_files,
        pages_with_reference=sum(text is not None for text in references.values()),
        dropped_tests_by_type=scan.dropped_tests_by_type,
        dropped_pages_by_type=scan.dropped_pages_by_type,
    )
    return BenchReport(str(folder), problems, summary, scan, MappingProxyType(references))
