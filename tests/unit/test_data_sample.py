"""bench_data_sample/: reproducible from its script, small, and its references pass their own tests."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from olmocr_rl.data.front_matter import split_front_matter
from olmocr_rl.data.references import reference_path
from olmocr_rl.data.scan import scan_bench_folder

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "bench_data_sample"


def _load_script():
    spec = importlib.util.spec_from_file_location("make_bench_sample", REPO_ROOT / "scripts" / "make_bench_sample.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _tree(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_script_is_deterministic_and_matches_the_committed_folder(tmp_path):
    script = _load_script()
    script.write_sample(tmp_path / "a")
    script.write_sample(tmp_path / "b")
    first, second = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert first == second  # byte-identical reruns (fixed PDF dates and IDs)
    assert first == _tree(SAMPLE), "bench_data_sample/ is stale: rerun python scripts/make_bench_sample.py"


def test_sample_is_small_and_covers_every_test_type():
    files = _tree(SAMPLE)
    assert sum(len(data) for data in files.values()) < 500 * 1024
    scan = scan_bench_folder(SAMPLE)
    assert scan.problems == []
    assert 6 <= len(scan.pages) <= 10
    types = Counter(test.type for page in scan.pages for test in page.tests)
    assert set(types) == {"present", "absent", "order", "table", "math", "baseline", "format", "footnote"}
    assert any(len(page.jsonl_files) >= 2 for page in scan.pages)  # a page whose tests sit in two files
    blank = [t for page in scan.pages for t in page.tests if t.type == "baseline" and t.entry.get("max_length") is not None]
    assert blank, "a blank-page baseline test with max_length"


@pytest.fixture(scope="module")
def pages_and_tests():
    from olmocr_rl.bench import load_tests

    scan = scan_bench_folder(SAMPLE)
    tests = {test.id: test for jsonl in scan.jsonl_files for test in load_tests(jsonl)}
    return scan.pages, tests


def test_every_reference_passes_all_its_tests(pages_and_tests):
    pages, tests = pages_and_tests
    failures = []
    for page in pages:
        front, body = split_front_matter(reference_path(SAMPLE, page.pdf, page.page).read_text(encoding="utf-8"))
        assert front is not None
        for test_id in page.test_ids:
            passed, explanation = tests[test_id].run(body)
            if not passed:
                failures.append(f"{page.pdf} p{page.page} {test_id}: {explanation}")
    assert failures == []


def test_the_tests_can_fail(pages_and_tests):
    # An empty transcription, or another page's text, must fail some test of every page with text.
    pages, tests = pages_and_tests
    bodies = {
        (page.pdf, page.page): split_front_matter(reference_path(SAMPLE, page.pdf, page.page).read_text(encoding="utf-8"))[1]
        for page in pages
    }
    for index, page in enumerate(pages):
        if not bodies[(page.pdf, page.page)]:
            continue  # the blank page: an empty transcription is right
        other = pages[(index + 1) % len(pages)]
        for wrong in ("", bodies[(other.pdf, other.page)]):
            assert not all(tests[test_id].run(wrong)[0] for test_id in page.test_ids), (page.pdf, page.page, wrong[:40])
