"""validate_bench_folder / python -m olmocr_rl.validate_bench: broken bench folders and their errors.

Each case copies bench_data_sample/ into a tmp dir, breaks it one way, and checks that the report
names the file, line and field with a clear message; the dataset refuses the same folders.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from olmocr_rl.data import BenchDataError, OlmOCRBenchDataset
from olmocr_rl.validate_bench import main, validate_bench_folder

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "bench_data_sample"
SHARED_SAMPLE = Path(__file__).parents[2].parent / "shared" / "olmocr-bench-sample"


def _encrypted_pdf() -> bytes:
    """A one-page PDF under the standard security handler whose password is not empty.

    The /O and /U entries are arbitrary, so the empty user password fails: readers ask for one.
    """
    objects = [
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[3 0 R]/Count 1>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>",
        b"<</Filter/Standard/V 1/R 2/O<" + b"11" * 32 + b">/U<" + b"22" * 32 + b">/P -4>>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<</Size %d/Root 1 0 R/Encrypt 4 0 R/ID[<%s><%s>]>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        b"33" * 16,
        b"33" * 16,
        xref,
    )
    return bytes(out)


@pytest.fixture()
def bench(tmp_path) -> Path:
    folder = tmp_path / "bench"
    shutil.copytree(SAMPLE, folder)
    return folder


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def _set_line(path: Path, number: int, text: str) -> None:
    lines = _lines(path)
    lines[number - 1] = text
    path.write_text("\n".join(lines), encoding="utf-8")


def _edit_test(path: Path, number: int, **changes) -> None:
    entry = json.loads(_lines(path)[number - 1])
    for key, value in changes.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    _set_line(path, number, json.dumps(entry))


def _problems(folder: Path, **kwargs) -> list[str]:
    report = validate_bench_folder(folder, **kwargs)
    assert not report.ok
    return [str(problem) for problem in report.problems]


def test_sample_folder_is_valid(capsys):
    report = validate_bench_folder(SAMPLE)
    assert report.ok, [str(problem) for problem in report.problems]
    assert main([str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "pages        10  (10 with a claude_original reference)" in out
    assert out.strip().splitlines()[-1].startswith(f"OK: {SAMPLE}: 10 pages, 48 tests in 3 JSONL file(s)")


def test_real_bench_sample_is_valid():
    if not SHARED_SAMPLE.is_dir():
        pytest.skip(f"real olmOCR-bench sample absent: {SHARED_SAMPLE} (it lives beside the repo in ../shared)")
    report = validate_bench_folder(SHARED_SAMPLE)
    assert report.ok, [str(problem) for problem in report.problems]
    assert report.summary.pages == 23 and report.summary.tests == 100


# ---- one broken folder per case ---------------------------------------------------------------


def test_malformed_json_line(bench):
    _set_line(bench / "basic.jsonl", 3, '{"pdf": "simple_lines.pdf", "page": 1,')
    assert any(p.startswith(f"{bench / 'basic.jsonl'}:3: not valid JSON") for p in _problems(bench))


def test_unknown_test_type(bench):
    _edit_test(bench / "basic.jsonl", 2, type="presence")
    assert any(
        p.startswith(f"{bench / 'basic.jsonl'}:2: field 'type': unknown test type 'presence'; use one of present")
        for p in _problems(bench)
    )


def test_bad_fields_for_the_type(bench):
    _edit_test(bench / "basic.jsonl", 1, text=None)  # a present test without its text
    _edit_test(bench / "tables_math.jsonl", 1, max_diffs=-1)
    problems = _problems(bench)
    assert any(p.startswith(f"{bench / 'basic.jsonl'}:1: field 'text': ") for p in problems), problems
    assert any(p.startswith(f"{bench / 'tables_math.jsonl'}:1: field 'max_diffs': ") for p in problems), problems


def test_bad_pdf_page_and_id_fields(bench):
    _edit_test(bench / "basic.jsonl", 1, page="1")
    _edit_test(bench / "basic.jsonl", 2, page=0)
    _edit_test(bench / "basic.jsonl", 3, pdf="../outside.pdf")
    _edit_test(bench / "basic.jsonl", 4, id="")
    problems = _problems(bench)
    jsonl = bench / "basic.jsonl"
    assert f"{jsonl}:1: field 'page': must be an integer, got '1'" in problems
    assert f"{jsonl}:2: field 'page': 0 is not a page: pages are numbered from 1" in problems
    assert any(p.startswith(f"{jsonl}:3: field 'pdf': '../outside.pdf' must be a path inside pdfs/") for p in problems)
    assert any(p.startswith(f"{jsonl}:4: field 'id': missing or empty") for p in problems)


def test_duplicate_id_within_a_file(bench):
    first = json.loads(_lines(bench / "basic.jsonl")[0])["id"]
    _edit_test(bench / "basic.jsonl", 5, id=first)
    assert any(
        p.startswith(f"{bench / 'basic.jsonl'}:5: field 'id': duplicate test id '{first}' (first at {bench / 'basic.jsonl'}:1)")
        for p in _problems(bench)
    )


def test_duplicate_id_across_files(bench):
    first = json.loads(_lines(bench / "basic.jsonl")[0])["id"]
    _edit_test(bench / "layout.jsonl", 2, id=first)
    problems = _problems(bench)
    assert any(
        p.startswith(f"{bench / 'layout.jsonl'}:2: field 'id': duplicate test id '{first}'") and "across all JSONL files" in p
        for p in problems
    )


def test_missing_pdf(bench):
    (bench / "pdfs" / "table.pdf").unlink()
    problems = _problems(bench)
    missing = [p for p in problems if "PDF not found" in p]
    assert len(missing) == 1  # one problem per PDF, not one per test
    assert missing[0].startswith(f"{bench / 'basic.jsonl'}:") and "field 'pdf'" in missing[0]
    assert "table.pdf (6 test(s) name it); add the file or remove its tests" in missing[0]


def test_page_out_of_range(bench):
    _edit_test(bench / "basic.jsonl", 1, page=5)
    assert _problems(bench) == [
        f"{bench / 'basic.jsonl'}:1: field 'page': page 5 is out of range: pdfs/simple_lines.pdf has 1 page(s) "
        "(1 test(s) on this page); pages are numbered from 1"
    ]


def test_encrypted_pdf(bench):
    (bench / "pdfs" / "blank.pdf").write_bytes(_encrypted_pdf())
    problems = _problems(bench)
    assert any(p.startswith(f"{bench / 'pdfs' / 'blank.pdf'}: PDF is encrypted with a password") for p in problems), problems


def test_corrupt_pdf(bench):
    (bench / "pdfs" / "counting.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 50)
    problems = _problems(bench)
    assert any(
        p.startswith(f"{bench / 'pdfs' / 'counting.pdf'}: PDF cannot be read (not a valid PDF)") and "(8 test(s) name it)" in p
        for p in problems
    ), problems


def test_invalid_jsonl_filter_regex(bench):
    problems = _problems(bench, jsonl_filter="basic(")
    assert len(problems) == 1 and problems[0].startswith("--jsonl_filter: invalid regular expression 'basic('")


def test_jsonl_filter_matching_nothing(bench):
    problems = _problems(bench, jsonl_filter="^arxiv")
    assert problems == [
        f"--jsonl_filter: '^arxiv' matches none of the JSONL files in {bench} "
        "(basic.jsonl, layout.jsonl, tables_math.jsonl); it is searched in each file name"
    ]


def test_unknown_or_absent_type_filter(bench):
    assert any("unknown test type(s) 'maths'" in p for p in _problems(bench, test_types=["maths"]))
    assert any("no test has type math" in p for p in _problems(bench, jsonl_filter="layout", test_types=["math"]))


def test_a_single_type_name_filters_like_a_list_of_one(bench):
    """test_types="math" is the type math (validated, recorded and filtered alike), not the letters m, a, t, h."""
    from olmocr_rl.data.scan import scan_bench_folder

    one, listed = scan_bench_folder(bench, None, "math"), scan_bench_folder(bench, None, ["math"])
    assert one.test_types == listed.test_types == ("math",)
    assert [ref.id for ref in one.kept_tests] == [ref.id for ref in listed.kept_tests]
    assert one.kept_tests and all(ref.type == "math" for ref in one.kept_tests)
    assert one.made_with(bench, None, ["math"])


def test_empty_folder(tmp_path):
    (tmp_path / "pdfs").mkdir()
    assert _problems(tmp_path) == [f"{tmp_path}: no *.jsonl test files in the folder; a bench folder holds *.jsonl and pdfs/"]


def test_missing_folder_and_missing_pdfs_folder(tmp_path, bench):
    assert _problems(tmp_path / "nowhere")[0].startswith(f"{tmp_path / 'nowhere'}: bench folder not found")
    shutil.rmtree(bench / "pdfs")
    assert _problems(bench) == [f"{bench / 'pdfs'}: pdfs/ folder not found; put the test PDFs in <folder>/pdfs/"]


def test_invalid_reference_front_matter(bench):
    reference = bench / "claude_original" / "counting_page2_pg1_repeat1.md"
    reference.write_text(reference.read_text(encoding="utf-8").replace("rotation_correction: 0", "rotation_correction: 45"))
    problems = _problems(bench)
    assert problems == [
        f"{reference}: invalid reference: front matter: rotation_correction must be one of 0, 90, 180, 270, got 45; "
        "fix the front matter or delete the file"
    ]


def test_every_problem_reported_at_once_and_dataset_refuses(bench):
    _set_line(bench / "basic.jsonl", 3, "not json")
    _edit_test(bench / "layout.jsonl", 1, type="bogus")
    (bench / "pdfs" / "table.pdf").unlink()
    report = validate_bench_folder(bench)
    assert len(report.problems) == 3
    assert report.summary_line().startswith(f"FAILED: {bench}: 3 problem(s); first: {bench / 'basic.jsonl'}:3: not valid JSON")
    with pytest.raises(BenchDataError) as info:
        OlmOCRBenchDataset(bench)
    message = str(info.value)
    assert "has 3 problem(s)" in message and "basic.jsonl:3: not valid JSON" in message and "PDF not found" in message


def test_dataset_refuses_an_invalid_reference(bench):
    reference = bench / "claude_original" / "synth" / "doc0042_page3_pg1_repeat1.md"
    reference.write_text("no front matter at all\n", encoding="utf-8")
    with pytest.raises(BenchDataError, match=r"doc0042_page3_pg1_repeat1\.md: invalid reference: no front matter"):
        OlmOCRBenchDataset(bench)


def test_cli_exit_code_and_no_traceback(bench):
    _edit_test(bench / "basic.jsonl", 1, page=9)
    result = subprocess.run(
        [sys.executable, "-m", "olmocr_rl.validate_bench", str(bench)], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"FAILED: {bench}: 1 problem(s); first: {bench / 'basic.jsonl'}:1: field 'page': page 9 is out of range")
