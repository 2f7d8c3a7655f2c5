"""``python -m olmocr_rl.evaluate`` end to end on the tiny model: output layout, page filters, scores equal to
the bench scorer's, the report, one-line errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from olmocr_rl import evaluate as evaluate_module
from olmocr_rl.evaluation import backends as backends_module
from olmocr_rl.evaluate import main
import warm_python

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "bench_data_sample"
FRONT_MATTER = "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\nis_diagram: False\n---\n"


def _lines(path: Path, ids: set[str]) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True) if json.loads(line)["id"] in ids)


@pytest.fixture(scope="module")
def mini_bench(tmp_path_factory) -> Path:
    """Two pages of bench_data_sample in two JSONL files.

    a.jsonl: the 5 tests of synth/doc0042_page3.pdf page 1 (a PDF in a sub-folder, with a baseline).
    b.jsonl: 3 tests of counting.pdf page 1, without its baseline test, so the scorer adds one
    (group ``baseline``): 9 tests in all.
    """
    bench = tmp_path_factory.mktemp("mini_bench")
    (bench / "pdfs" / "synth").mkdir(parents=True)
    shutil.copy(SAMPLE / "pdfs" / "synth" / "doc0042_page3.pdf", bench / "pdfs" / "synth")
    shutil.copy(SAMPLE / "pdfs" / "counting.pdf", bench / "pdfs")
    synth_ids = {f"doc0042_page3_p1_{name}" for name in ("present_00", "present_01", "order_02", "absent_03", "baseline_04")}
    counting_ids = {"counting_p1_present_00", "counting_p1_absent_01", "counting_p1_present_02"}
    (bench / "a.jsonl").write_text(_lines(SAMPLE / "basic.jsonl", synth_ids))
    (bench / "b.jsonl").write_text(_lines(SAMPLE / "basic.jsonl", counting_ids))
    return bench


def run_cli(*argv) -> subprocess.CompletedProcess:
    return warm_python.run([sys.executable, "-m", *map(str, argv)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)


def run_main(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_writes_layout_and_matches_bench_scorer(tiny_model_dir, mini_bench, tmp_path):
    """K=2 real run; its score equals `python -m olmocr_rl.bench.score` on the same folder."""
    outputs = tmp_path / "out"
    # A leftover third repeat from an earlier run must not be scored with this run's two: the folder is refused
    # (before the model loads), and --overwrite deletes it.
    (outputs / "synth").mkdir(parents=True)
    (outputs / "synth" / "doc0042_page3_pg1_repeat3.md").write_text("milk bread eggs apples")
    argv = ["olmocr_rl.evaluate", "--model", tiny_model_dir, "--bench", mini_bench, "--outputs", outputs,
            "--num_samples", "2", "--max_new_tokens", "8", "--batch_size", "2", "--json"]
    refused = run_cli(*argv)
    _one_line_error(refused.returncode, refused.stdout, refused.stderr, "holds evaluation files without a run.json",
                    "--overwrite")
    run = run_cli(*argv, "--overwrite")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)

    files = sorted(path.relative_to(outputs).as_posix() for path in outputs.rglob("*.md"))
    assert files == ["counting_pg1_repeat1.md", "counting_pg1_repeat2.md",
                     "synth/doc0042_page3_pg1_repeat1.md", "synth/doc0042_page3_pg1_repeat2.md"]
    # the progress bar: pages done, pages/s, each page's tokens per repeat
    assert re.search(r"\| 1/2 pages, [\d.]+ pages/s.*  counting\.pdf:1: \d+\+\d+ tokens", run.stderr), run.stderr
    assert re.search(r"\| 2/2 pages, [\d.]+ pages/s  synth/doc0042_page3\.pdf:1: ", run.stderr), run.stderr
    # the evaluation folder: scores.json and evaluation.json beside the transcriptions, no staging folder left
    summary = json.loads((outputs / "evaluation.json").read_text())
    assert (summary["backend"], summary["protocol"], summary["seed"], summary["model"]) == (
        "hf", "single", 0, str(tiny_model_dir))
    assert summary["versions"]["torch"] and summary["versions"]["transformers"] and summary["pages_per_s"] > 0
    assert json.loads((outputs / "scores.json").read_text())["tests"] == result["tests"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert sorted(p.name for p in outputs.iterdir() if p.is_file()) == [
        "counting_pg1_repeat1.md", "counting_pg1_repeat2.md", "evaluation.json", "pages.jsonl", "run.json", "scores.json"]

    assert result["pages"] == ["counting.pdf:1", "synth/doc0042_page3.pdf:1"]
    assert result["sampling"]["num_samples"] == 2 and result["sampling"]["do_sample"] is True
    assert set(result["per_jsonl"]) == {"a.jsonl", "b.jsonl", "baseline"}
    assert len(result["tests"]) == 9 and all(test["repeats"] == 2 for test in result["tests"].values())
    assert result["missing_outputs"] == []

    scored = run_cli("olmocr_rl.bench.score", "--bench", mini_bench, "--outputs", outputs, "--json")
    assert scored.returncode == 0, scored.stderr
    reference = json.loads(scored.stdout)
    assert result["overall_pass_rate"] == reference["overall_pass_rate"]
    assert result["per_jsonl"] == reference["per_jsonl"]
    assert {test_id: {k: v for k, v in test.items() if k != "page"} for test_id, test in result["tests"].items()} \
        == reference["tests"]
    assert result["tests"]["counting_p1_present_00"]["page"] == "counting.pdf:1"
    # Garbage from a random model still passes the absent tests: the number is not a trivial 0.
    assert 0 < result["overall_pass_rate"] < 1


@pytest.mark.parametrize(
    "flag, pattern, pages, groups",
    [
        ("--exclude_pages", "^synth/", ["counting.pdf:1"], {"b.jsonl", "baseline"}),
        ("--pages", "synth", ["synth/doc0042_page3.pdf:1"], {"a.jsonl"}),
    ],
)
def test_page_filters_transcribe_and_score_only_those_pages(tiny_model_dir, mini_bench, tmp_path, capsys,
                                                           flag, pattern, pages, groups):
    outputs = tmp_path / "out"
    code, out, err = run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--outputs", outputs,
                              "--max_new_tokens", "4", flag, pattern, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["pages"] == pages
    assert set(result["per_jsonl"]) == groups
    assert result["missing_outputs"] == []
    stem, page = pages[0].rsplit(".pdf:", 1)
    assert sorted(p.relative_to(outputs).as_posix() for p in outputs.rglob("*.md")) == [f"{stem}_pg{page}_repeat1.md"]
    expected_tests = 4 if pages == ["counting.pdf:1"] else 5  # 3 + the added baseline, or the 5 of a.jsonl
    assert len(result["tests"]) == expected_tests


def test_front_matter_removed_and_perfect_transcriptions_score_one(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Transcriptions replaced by the reference markdown (front matter included) pass every test.

    With K=2 and an empty second transcription, a test passes only when both repeats pass it
    (more than half): on counting.pdf:1 and the synth page only the two absent tests do, 2/9.
    """
    def references(model, processor, items, config, seed):
        k = config.num_return_sequences
        return [[(item["claude_original"], 1, False)] + [("", 0, False)] * (k - 1) for item in items]

    monkeypatch.setattr(backends_module, "transcribe_batch", references)
    pages = r"^(counting\.pdf:1|synth/.*)$"
    outputs = tmp_path / "one"
    code, out, err = run_main(capsys, "--model", tiny_model_dir, "--bench", SAMPLE, "--outputs", outputs,
                              "--pages", pages, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["pages"] == ["counting.pdf:1", "synth/doc0042_page3.pdf:1"]
    assert result["overall_pass_rate"] == 1.0 and result["per_jsonl"]["basic.jsonl"]["total"] == 9
    reference = (SAMPLE / "claude_original" / "counting_page1_pg1_repeat1.md").read_text()
    assert reference.startswith("---\n")
    written = (outputs / "counting_pg1_repeat1.md").read_text()
    assert not written.startswith("---") and "primary_language" not in written
    assert written == reference.split("\n---", 1)[1].strip()

    outputs = tmp_path / "two"
    code, out, err = run_main(capsys, "--model", tiny_model_dir, "--bench", SAMPLE, "--outputs", outputs,
                              "--pages", pages, "--num_samples", "2", "--temperature", "1", "--json")
    assert code == 0, err
    result = json.loads(out)
    passed = sorted(test_id for test_id, test in result["tests"].items() if test["passed"])
    assert passed == ["counting_p1_absent_01", "doc0042_page3_p1_absent_03"]
    assert result["per_jsonl"]["basic.jsonl"] == {"passed": 2, "total": 9, "pass_rate": 2 / 9}
    assert (outputs / "counting_pg1_repeat2.md").read_text() == ""


def test_human_report(tiny_model_dir, mini_bench, tmp_path, capsys):
    code, out, err = run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--outputs", tmp_path,
                              "--max_new_tokens", "2", "--pages", "counting")
    assert code == 0, err
    assert re.search(r"^b\.jsonl\s+\d+\.\d%\s+\d/3$", out, re.M), out
    assert re.search(r"^baseline\s+\d+\.\d%\s+\d/1$", out, re.M), out
    assert re.search(r"^overall pass rate \(mean of per-JSONL pass rates\): \d+\.\d% \(\d/4 tests\)$", out, re.M), out
    assert "stopped at --max_new_tokens 2" in out  # a random model never stops within 2 tokens


def _one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m olmocr_rl.evaluate: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_error_missing_model_dir_is_one_line_without_traceback(mini_bench, tmp_path):
    run = run_cli("olmocr_rl.evaluate", "--model", tmp_path / "no_such_model", "--bench", mini_bench)
    _one_line_error(run.returncode, run.stdout, run.stderr, "no_such_model", "no such model folder")


def test_error_cases(tiny_model_dir, mini_bench, tmp_path, capsys):
    empty_model = tmp_path / "empty_model"
    empty_model.mkdir()
    _one_line_error(*run_main(capsys, "--model", empty_model, "--bench", mini_bench), "no config.json")

    bad_bench = tmp_path / "bad_bench"
    shutil.copytree(mini_bench, bad_bench)
    with (bad_bench / "b.jsonl").open("a") as f:
        f.write('{"pdf": "counting.pdf", "page": 9, "id": "x", "type": "present", "text": "a"}\n')
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", bad_bench), "b.jsonl:4", "validate_bench")

    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", tmp_path / "nowhere"), "no such folder")
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--pages", "nothing"),
                    "--pages 'nothing' selects no page", "its 2 pages are named <pdf under pdfs/>:<page>: counting.pdf:1",
                    "--list_pages")
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--jsonl_filter", "^a",
                              "--exclude_pages", "synth"), "--jsonl_filter '^a' --exclude_pages 'synth' selects no page",
                    "its 1 page is named <pdf under pdfs/>:<page>: synth/doc0042_page3.pdf:1",
                    "--list_pages --jsonl_filter '^a'` lists them")
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--exclude_pages", "["),
                    "--exclude_pages '['")
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--num_samples", "2",
                              "--temperature", "0"), "identical greedy")
    # Nothing was transcribed anywhere by the failed runs.
    assert not list(tmp_path.rglob("*.md"))


def test_a_sigkill_at_page_k_resumes_to_the_uninterrupted_result(tiny_model_dir, mini_bench, tmp_path):
    """Sampled (K=2) on the random tiny model, batches of 2 pages: killed after its first page is written, the same
    command finishes the rest, and the folder then holds what an uninterrupted run writes, scores included. The
    bench here has 4 pages (the mini bench's two, twice over under other names)."""
    import signal

    bench = tmp_path / "bench"
    shutil.copytree(mini_bench, bench)
    for name in ("counting_copy.pdf", "more_counting.pdf"):
        shutil.copy(bench / "pdfs" / "counting.pdf", bench / "pdfs" / name)
        stem = name[:-4]
        (bench / f"{stem}.jsonl").write_text(
            (bench / "b.jsonl").read_text().replace('"counting.pdf"', f'"{name}"').replace("counting_p1", stem))
    argv = ["olmocr_rl.evaluate", "--model", tiny_model_dir, "--bench", bench, "--num_samples", "2",
            "--max_new_tokens", "40", "--batch_size", "2", "--json"]
    whole = run_cli(*argv, "--outputs", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "out"
    process = warm_python.popen([sys.executable, "-m", *map(str, argv), "--outputs", str(out)], cwd=REPO_ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if " 1/4 pages" in line:
            process.send_signal(signal.SIGKILL)
            break
    process.communicate(timeout=60)
    assert process.returncode == -9
    done = len((out / "pages.jsonl").read_text().splitlines())
    assert 1 <= done < 4 and not (out / "scores.json").exists()
    resumed = run_cli(*argv, "--outputs", out)
    assert resumed.returncode == 0, resumed.stderr
    assert f"continuing {out}: {done} of 4 pages done by an earlier run" in resumed.stderr
    first, second = json.loads(whole.stdout), json.loads(resumed.stdout)
    assert second["resumed_pages"] == done and second["tests"] == first["tests"]
    texts = {p.relative_to(out): p.read_text() for p in out.rglob("*.md")}
    assert texts == {p.relative_to(tmp_path / "whole"): p.read_text() for p in (tmp_path / "whole").rglob("*.md")}
