"""On the real sample (../shared/olmocr-bench-sample): verdicts equal olmOCR-bench's, test by test,
and the scorer CLI reports what olmOCR-bench's scorer reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from olmocr_rl.bench.score import output_files, score_bench

SAMPLE = Path(__file__).parents[2].parent / "shared" / "olmocr-bench-sample"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "bench" / "olmocr_bench_verdicts.json"

pytestmark = pytest.mark.shared


@pytest.fixture(scope="module")
def sample() -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} absent (the shared olmOCR-bench sample lives beside the repository)")
    return SAMPLE


@pytest.fixture(scope="module")
def scored(sample):
    return score_bench(sample, sample / "olmocr_pipeline")


def test_every_verdict_matches_olmocr_bench(scored):
    reference = json.loads(FIXTURE.read_text(encoding="utf-8"))["verdicts"]
    ours = {score.test.id: score.passed for score in scored.tests}
    assert set(ours) == set(reference)
    mismatches = {test_id: (ours[test_id], reference[test_id]) for test_id in ours if ours[test_id] != reference[test_id]}
    assert mismatches == {}
    # The sample exercises every type it has, with passes and failures on real outputs.
    by_type = scored.by_type()
    assert set(by_type) == {"present", "absent", "order", "table", "math", "baseline"}
    assert all(0 < passed < total for passed, total in by_type.values() if total > 1)


def test_doubled_pg_names_follow_the_rule(sample):
    outputs = sample / "olmocr_pipeline"
    # blank_book_pg1.pdf page 1 -> blank_book_pg1_pg1_repeat1.md; sub-folders are kept.
    assert [p.name for p in output_files(outputs, "blank_book_pg1.pdf", 1)] == ["blank_book_pg1_pg1_repeat1.md"]
    found = output_files(outputs, "headers_footers/ff0f0b22c55d8b90dd77d153f48e144fc9db_pg2.pdf", 1)
    assert [p.relative_to(outputs).as_posix() for p in found] == ["headers_footers/ff0f0b22c55d8b90dd77d153f48e144fc9db_pg2_pg1_repeat1.md"]
    # Page 2 of that PDF has no output, even though "_pg2_" occurs in the page-1 file name.
    assert output_files(outputs, "headers_footers/ff0f0b22c55d8b90dd77d153f48e144fc9db_pg2.pdf", 2) == []


def test_cli_reports_olmocr_bench_numbers(sample):
    result = subprocess.run(
        [sys.executable, "-m", "olmocr_rl.bench.score", "--bench", str(sample), "--outputs", str(sample / "olmocr_pipeline"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(result.stdout)
    reference = json.loads(FIXTURE.read_text(encoding="utf-8"))["verdicts"]
    # Recompute olmOCR-bench's headline from its own verdicts, grouped by JSONL as the CLI groups.
    groups: dict[str, list[bool]] = {}
    for test_id, entry in report["tests"].items():
        groups.setdefault(entry["group"], []).append(reference[test_id])
    expected = sum(sum(v) / len(v) for v in groups.values()) / len(groups)
    assert report["overall_pass_rate"] == pytest.approx(expected)
    assert {g: e["total"] for g, e in report["per_jsonl"].items()} == {g: len(v) for g, v in groups.items()}
    assert report["missing_outputs"] == []


def test_missing_outputs_fail_and_are_listed(sample, tmp_path):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "earnings_pg1_repeat1.md").write_text((sample / "olmocr_pipeline" / "earnings_pg1_repeat1.md").read_text())
    result = score_bench(sample, outputs, skip_baseline=True)
    assert "earnings_pg1_repeat*.md" not in result.missing
    assert "lincoln_letter_pg1_repeat*.md" in result.missing
    assert all(not s.passed for s in result.tests if s.test.pdf == "lincoln_letter.pdf")
    assert any(s.passed for s in result.tests if s.test.pdf == "earnings.pdf")
    assert all(s.test.type != "baseline" or s.group != "baseline" for s in result.tests)
