"""Check an olmOCR-bench folder before training: every problem at once, or a summary table.

    python -m olmocr_rl.validate_bench DIR [--jsonl_filter REGEX] [--bench_type_filter TYPE ...] [--list_pages]

The checks are :func:`olmocr_rl.data.validation.validate_bench_folder`'s (the training CLI runs the same at
start): the folder's files, every JSONL line's fields by olmOCR-bench's rules, the PDFs and pages they name,
unique ids, the references' front matter. Exit status 0 with a summary table when all is well; 1 with every
problem (file:line: field: problem; fix) and a one-line summary otherwise. ``--list_pages`` prints, instead of the
table, every page's name, one a line in training order: ``<pdf under pdfs/>:<page>``, the names the trainer's and
evaluate's ``--pages`` / ``--exclude_pages`` regexes are searched in.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from olmocr_rl.data.validation import BenchReport, validate_bench_folder

__all__ = ["BenchReport", "main", "validate_bench_folder"]


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
    parser.add_argument(
        "--list_pages", action="store_true", help="print every page's name (<pdf under pdfs/>:<page>, the names "
        "--pages and --exclude_pages search in), one a line, instead of the summary table"
    )
    args = parser.parse_args(argv)
    report = validate_bench_folder(args.folder, args.jsonl_filter, args.bench_type_filter)
    if report.ok and args.list_pages:
        from olmocr_rl.data.page_names import page_key

        print("\n".join(page_key(page.pdf, page.page) for page in report.scan.pages))
        return 0
    if report.ok:
        print(report.format())
        return 0
    print(report.format(), file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
