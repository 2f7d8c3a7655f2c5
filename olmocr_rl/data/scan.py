"""Bench folder -> pages: find the JSONL files, read their tests, group them by (pdf, page), check the PDFs.

An olmOCR-bench folder holds `*.jsonl` files (one unit test per line, each naming a `pdf` under
`pdfs/` and a 1-based `page`) and the `pdfs/` folder. The RL prompt unit is a page: one
`BenchPage` per distinct (pdf, page), carrying every test of that page from every JSONL file.

`scan_bench_folder` never raises for bad data: it collects every problem it finds as a
`BenchProblem` (file, line, field, what is wrong and how to fix it), so that the validator can
report them all at once and the dataset can refuse to start with all of them listed.
Field-level checks of each test type live in `olmocr_rl.bench`; this module checks only what
grouping and rendering need (pdf, page, id, type), plus duplicate ids and the PDFs themselves.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from olmocr_rl.bench import test_types as registered_types  # olmOCR-bench's types in its order, then any added
from olmocr_rl.bench.loading import read_test_jsonl
from olmocr_rl.data.render import RenderError, pdf_page_count

__all__ = ["BenchPage", "BenchProblem", "BenchScan", "TestRef", "scan_bench_folder"]


@dataclass(frozen=True)
class BenchProblem:
    """One thing wrong with a bench folder, located as precisely as possible.

    `path` is the file (JSONL, PDF, reference markdown) or folder at fault; `line` (1-based) and
    `field` are None where they do not apply; `message` says what is wrong and how to fix it.
    """

    path: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        what = self.message if self.field is None else f"field '{self.field}': {self.message}"
        return f"{where}: {what}"


@dataclass(frozen=True)
class TestRef:
    """One test line of a JSONL file: the fields the data layer needs, and the whole entry."""

    __test__ = False  # not a pytest test class, despite the name

    id: str
    type: str
    pdf: str
    page: int
    jsonl_file: str
    line: int
    entry: dict = field(repr=False, compare=False, hash=False)


@dataclass
class BenchPage:
    """One (pdf, page) with all its tests, in JSONL file order then line order."""

    pdf: str  # as written in the JSONL: relative to pdfs/
    page: int  # 1-based
    pdf_path: str  # <folder>/pdfs/<pdf>
    tests: list[TestRef]

    @property
    def test_ids(self) -> list[str]:
        return [test.id for test in self.tests]

    @property
    def jsonl_file(self) -> str:
        """The first JSONL file holding a test of this page (what olmOCR records)."""
        return self.tests[0].jsonl_file

    @property
    def jsonl_files(self) -> list[str]:
        """Every JSONL file holding a test of this page, sorted."""
        return sorted({test.jsonl_file for test in self.tests})


@dataclass
class BenchScan:
    """What `scan_bench_folder` found: the usable pages (sorted) and every problem."""

    folder: str
    jsonl_files: list[str]  # the JSONL files read (after --jsonl_filter), sorted
    pages: list[BenchPage]
    problems: list[BenchProblem]
    tests_read: int  # well-formed, non-duplicate tests in the JSONL files read
    kept_tests: list[TestRef]  # those tests after the type filter, PDF problems or not
    dropped_tests_by_type: Counter  # tests left out by the type filter, by type
    dropped_pages_by_type: int  # pages left with no test after the type filter
    jsonl_filter: str | None = None  # the filters it was made with: a consumer checks they match its own
    test_types: tuple[str, ...] | None = None

    def made_with(self, folder: str | os.PathLike, jsonl_filter: str | None, test_types) -> bool:
        """Whether this scan is of ``folder`` with these filters, so it can stand in for scanning it again."""
        return (self.folder, self.jsonl_filter, self.test_types) == (str(folder), jsonl_filter, _types_key(test_types))


def list_jsonl_files(folder: Path, jsonl_filter: str | None) -> tuple[list[Path], list[BenchProblem]]:
    """The top-level *.jsonl files of `folder`, sorted, whose name matches `jsonl_filter` (re.search,
    case-insensitive, as olmOCR). Problems: none found, invalid regex, nothing matched."""
    all_files = sorted(path for path in folder.glob("*.jsonl") if path.is_file())
    if not all_files:
        return [], [
            BenchProblem(str(folder), None, None, "no *.jsonl test files in the folder; a bench folder holds *.jsonl and pdfs/")
        ]
    if jsonl_filter is None:
        return all_files, []
    try:
        pattern = re.compile(jsonl_filter, re.IGNORECASE)
    except re.error as exc:
        return [], [
            BenchProblem(
                "--jsonl_filter", None, None, f"invalid regular expression {jsonl_filter!r} ({exc}); fix the pattern"
            )
        ]
    matched = [path for path in all_files if pattern.search(path.name)]
    if not matched:
        names = ", ".join(path.name for path in all_files)
        return [], [
            BenchProblem(
                "--jsonl_filter",
                None,
                None,
                f"{jsonl_filter!r} matches none of the JSONL files in {folder} ({names}); it is searched in each file name",
            )
        ]
    return matched, []


def _check_pdf_field(value: object) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return "missing or empty; give the PDF's path relative to pdfs/"
    if os.path.isabs(value) or ".." in Path(value).parts:
        return f"{value!r} must be a path inside pdfs/ (no leading / and no ..)"
    return None


def read_test_refs(jsonl_path: Path) -> tuple[list[TestRef], list[BenchProblem]]:
    """Parse one JSONL file: a TestRef per well-formed line, a problem per bad line or field.

    The file is read by `olmocr_rl.bench.loading.read_test_jsonl` (blank lines allowed; unreadable,
    non-UTF-8, non-JSON and non-object lines are problems). Checked here: `pdf` (non-empty relative
    path), `page` (int >= 1), `id` (non-empty string), `type` (a registered type, `bench.test_types()`).
    """
    name = str(jsonl_path)
    entries, errors = read_test_jsonl(jsonl_path)
    problems = [BenchProblem(error.path or name, error.line, error.field, error.reason) for error in errors]
    refs: list[TestRef] = []
    for line_number, entry in entries:
        line_problems = [
            BenchProblem(name, line_number, field_name, message) for field_name, message in _ref_field_problems(entry)
        ]
        if line_problems:
            problems.extend(line_problems)
            continue
        refs.append(TestRef(entry["id"], entry["type"], entry["pdf"], entry["page"], name, line_number, entry))
    return refs, problems


def _ref_field_problems(entry: dict) -> list[tuple[str, str]]:
    """(field, problem; fix) for each field grouping and rendering need that is missing or wrong."""
    problems = []
    pdf_problem = _check_pdf_field(entry.get("pdf"))
    if pdf_problem:
        problems.append(("pdf", pdf_problem))
    page = entry.get("page")
    if "page" not in entry:
        problems.append(("page", "missing; give the 1-based page number"))
    elif isinstance(page, bool) or not isinstance(page, int):
        problems.append(("page", f"must be an integer, got {page!r}"))
    elif page < 1:
        problems.append(("page", f"{page} is not a page: pages are numbered from 1"))
    test_id = entry.get("id")
    if not isinstance(test_id, str) or not test_id.strip():
        problems.append(("id", "missing or empty; give every test a unique string id"))
    test_type = entry.get("type")
    if test_type not in registered_types():
        shown = "missing" if test_type is None else f"unknown test type {test_type!r}"
        problems.append(("type", f"{shown}; use one of {', '.join(registered_types())}"))
    return problems


def _check_pdfs(folder: Path, refs: list[TestRef]) -> tuple[set[tuple[str, int]], list[BenchProblem]]:
    """Open every PDF the tests name once; return the (pdf, page) pairs that cannot be rendered.

    One problem per missing/unreadable PDF and per out-of-range page, located at the first test
    that names it, with the number of tests affected.
    """
    first_ref: dict[str, TestRef] = {}
    tests_per_pdf: Counter = Counter()
    first_page_ref: dict[tuple[str, int], TestRef] = {}
    tests_per_page: Counter = Counter()
    for ref in refs:
        first_ref.setdefault(ref.pdf, ref)
        tests_per_pdf[ref.pdf] += 1
        first_page_ref.setdefault((ref.pdf, ref.page), ref)
        tests_per_page[(ref.pdf, ref.page)] += 1

    bad: set[tuple[str, int]] = set()
    problems: list[BenchProblem] = []
    page_counts: dict[str, int] = {}
    for pdf, ref in first_ref.items():
        pdf_path = folder / "pdfs" / pdf
        affected = f"{tests_per_pdf[pdf]} test(s) name it"
        try:
            page_counts[pdf] = pdf_page_count(pdf_path)
        except RenderError as exc:
            if exc.reason == "missing":
                problems.append(
                    BenchProblem(
                        ref.jsonl_file,
                        ref.line,
                        "pdf",
                        f"PDF not found: {pdf_path} ({affected}); add the file or remove its tests",
                    )
                )
            else:
                problems.append(BenchProblem(str(pdf_path), None, None, f"{exc.detail} ({affected})"))
    for (pdf, page), ref in first_page_ref.items():
        if pdf not in page_counts:
            bad.add((pdf, page))
        elif page > page_counts[pdf]:
            bad.add((pdf, page))
            problems.append(
                BenchProblem(
                    ref.jsonl_file,
                    ref.line,
                    "page",
                    f"page {page} is out of range: pdfs/{pdf} has {page_counts[pdf]} page(s) "
                    f"({tests_per_page[(pdf, page)]} test(s) on this page); pages are numbered from 1",
                )
            )
    return bad, problems


def _types_key(test_types) -> tuple[str, ...] | None:
    """A --bench_type_filter value (None, a name, names) as the tuple a BenchScan records and filters by."""
    if test_types is None:
        return None
    return (test_types,) if isinstance(test_types, str) else tuple(test_types)


def validate_test_types(test_types: list[str] | tuple[str, ...] | None) -> list[BenchProblem]:
    """Problems with a --bench_type_filter list (unknown names, empty list); a single name counts as one."""
    test_types = _types_key(test_types)
    if test_types is None:
        return []
    if len(test_types) == 0:
        return [BenchProblem("--bench_type_filter", None, None,
                             f"empty list; give one or more of {', '.join(registered_types())}")]
    unknown = [name for name in test_types if name not in registered_types()]
    if unknown:
        return [
            BenchProblem(
                "--bench_type_filter",
                None,
                None,
                f"unknown test type(s) {', '.join(map(repr, unknown))}; use one of {', '.join(registered_types())}",
            )
        ]
    return []


def scan_bench_folder(
    folder: str | os.PathLike,
    jsonl_filter: str | None = None,
    test_types: list[str] | tuple[str, ...] | None = None,
    *,
    check_pdfs: bool = True,
) -> BenchScan:
    """Read a bench folder into pages sorted by (pdf, page), collecting every problem (never raises).

    `jsonl_filter`: regex searched (case-insensitively) in JSONL file names. `test_types`: keep
    only tests of these types; pages left with none are dropped and counted. Duplicate test ids
    (within or across files) are problems. With `check_pdfs`, each named PDF is opened once:
    missing, encrypted or corrupt PDFs and out-of-range pages are problems and their pages are
    left out of `pages`. Validation and the dataset share one scan (`BenchScan.made_with`).
    """
    folder_path = Path(folder)
    types = _types_key(test_types)
    problems: list[BenchProblem] = []
    if not folder_path.is_dir():
        problems.append(
            BenchProblem(str(folder), None, None, "bench folder not found; pass the folder that holds *.jsonl and pdfs/")
        )
        return BenchScan(str(folder), [], [], problems, 0, [], Counter(), 0, jsonl_filter, types)
    if not (folder_path / "pdfs").is_dir():
        problems.append(
            BenchProblem(str(folder_path / "pdfs"), None, None, "pdfs/ folder not found; put the test PDFs in <folder>/pdfs/")
        )
    problems.extend(validate_test_types(types))
    jsonl_files, file_problems = list_jsonl_files(folder_path, jsonl_filter)
    problems.extend(file_problems)
    refs = _read_unique_refs(jsonl_files, problems)

    wanted = set(types) if types is not None and not validate_test_types(types) else None  # a name: itself, not its letters
    kept = [ref for ref in refs if wanted is None or ref.type in wanted]
    dropped_by_type = Counter(ref.type for ref in refs if wanted is not None and ref.type not in wanted)
    dropped_pages = len({(ref.pdf, ref.page) for ref in refs} - {(ref.pdf, ref.page) for ref in kept})
    if wanted is not None and refs and not kept:
        problems.append(
            BenchProblem(
                "--bench_type_filter",
                None,
                None,
                f"no test has type {', '.join(sorted(wanted))} in the JSONL files read; "
                f"they hold {', '.join(sorted({ref.type for ref in refs}))}",
            )
        )

    unrenderable: set[tuple[str, int]] = set()
    if check_pdfs and (folder_path / "pdfs").is_dir():
        unrenderable, pdf_problems = _check_pdfs(folder_path, kept)
        problems.extend(pdf_problems)
    return BenchScan(
        str(folder), [str(path) for path in jsonl_files], _group_pages(str(folder), kept, unrenderable), problems,
        len(refs), kept, dropped_by_type, dropped_pages, jsonl_filter, types,
    )


def _read_unique_refs(jsonl_files: list[Path], problems: list[BenchProblem]) -> list[TestRef]:
    """The well-formed tests of the files in order; bad lines and repeated ids (anywhere) added to `problems`."""
    refs: list[TestRef] = []
    first_seen: dict[str, TestRef] = {}
    for jsonl_path in jsonl_files:
        file_refs, line_problems = read_test_refs(jsonl_path)
        problems.extend(line_problems)
        for ref in file_refs:
            earlier = first_seen.get(ref.id)
            if earlier is not None:
                problems.append(
                    BenchProblem(
                        ref.jsonl_file,
                        ref.line,
                        "id",
                        f"duplicate test id {ref.id!r} (first at {earlier.jsonl_file}:{earlier.line}); "
                        "ids must be unique across all JSONL files",
                    )
                )
                continue
            first_seen[ref.id] = ref
            refs.append(ref)
    return refs


def _group_pages(folder: str, kept: list[TestRef], unrenderable: set[tuple[str, int]]) -> list[BenchPage]:
    """One BenchPage per renderable (pdf, page) of `kept`, sorted, its tests in file then line order."""
    grouped: dict[tuple[str, int], BenchPage] = {}
    for ref in kept:
        key = (ref.pdf, ref.page)
        if key in unrenderable:
            continue
        if key not in grouped:
            grouped[key] = BenchPage(ref.pdf, ref.page, os.path.join(folder, "pdfs", ref.pdf), [])
        grouped[key].tests.append(ref)
    return [grouped[key] for key in sorted(grouped)]
