"""Check an olmOCR-bench folder before training: every problem at once, or a summary table.

    python -m olmocr_rl.validate_bench DIR [--jsonl_filter REGEX] [--bench_type_filter TYPE ...]

Checks: the folder, `pdfs/` and `*.jsonl` exist; the `--jsonl_filter` regex compiles and matches
a file; `--bench_type_filter` names known types that occur; every JSONL line is a JSON object with
a known `type`, valid fields for that type (olmOCR-bench's rules, via `olmocr_rl.bench`), a
`pdf` that exists and opens (not encrypted or corrupt), a `page` inside it, and an `id` unused
elsewhere in any JSONL file; every `claude_original/` reference of a page has valid front matter.
Exit status 0 with a summary table when all is well; 1 with every problem (file:line: field:
problem; fix) and a one-line summary otherwise. The training CLI runs the same check at start.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from olmocr_rl.bench import TestLoadError, load_single_test
from olmocr_rl.data.references import InvalidReferenceError, find_reference
from olmocr_rl.data.scan import BenchProblem, BenchScan, scan_bench_folder
from olmocr_rl.data.summary import BenchSummary, summarize


@dataclass(frozen=True)
class BenchReport:
    """The result of validate_bench_folder: every problem, the counts of the usable part, and the scan.

    `scan` is the folder read once (every PDF opened): the training CLI builds its dataset from it
    (`OlmOCRBenchDataset(..., scan=report.scan)`) instead of reading the folder again.
    """

    folder: str
    problems: list[BenchProblem]
    summary: BenchSummary
    scan: BenchScan

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

    references = 0
    for page in scan.pages:
        try:
            references += find_reference(folder, page.pdf, page.page) is not None
        except InvalidReferenceError as exc:
            problems.append(BenchProblem(exc.path, None, None, exc.detail))

    if not scan.problems and not scan.kept_tests:
        problems.append(BenchProblem(str(folder), None, None, "the JSONL files hold no tests; add tests or pick another folder"))

    summary = summarize(
        str(folder),
        scan.pages,
        scan.jsonl_files,
        pages_with_reference=references,
        dropped_tests_by_type=scan.dropped_tests_by_type,
        dropped_pages_by_type=scan.dropped_pages_by_type,
    )
    return BenchReport(str(folder), problems, summary, scan)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.validate_bench",
        description="Check an olmOCR-bench folder (*.jsonl + pdfs/) and report every problem at once.",
    )
    parser.add_argument("folder", help="bench folder holding *.jsonl test files and pdfs/")
    parser.add_argument("--jsonl_filter", default=None, help="regex searched (case-insensitive) in JSONL file names; as in training")
    parser.add_argument(
        "--bench_type_filter", nargs="+", default=None, metavar="TYPE", help="keep only tests of these types; as in training"
    )
    args = parser.parse_args(argv)
    report = validate_bench_folder(args.folder, args.jsonl_filter, args.bench_type_filter)
    if report.ok:
        print(report.format())
        return 0
    print(report.format(), file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
