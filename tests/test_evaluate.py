"""Tests for olmocr_rl.evaluate: file layout, front matter, real bench scoring, page filters, errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from olmocr_rl import evaluate as evaluate_module
from olmocr_rl.evaluate import (
    DEFAULT_SAMPLING_TEMPERATURE,
    EvaluateError,
    compile_page_regex,
    generation_config,
    main,
    output_path,
    page_key,
    resolve_sampling,
    select_pages,
    strip_front_matter,
    transcribe_batch,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
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
    return subprocess.run([sys.executable, "-m", *map(str, argv)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)


def run_main(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------------ pure pieces


def test_page_names_and_selection():
    keys = [page_key("blank.pdf", 1), page_key("counting.pdf", 1), page_key("counting.pdf", 2), page_key("synth/doc.pdf", 1)]
    assert keys == ["blank.pdf:1", "counting.pdf:1", "counting.pdf:2", "synth/doc.pdf:1"]
    regex = lambda p: compile_page_regex("--pages", p)  # noqa: E731
    assert select_pages(keys, None, None) == [0, 1, 2, 3]
    assert select_pages(keys, regex("counting"), None) == [1, 2]
    assert select_pages(keys, regex(r"^counting\.pdf:2$"), None) == [2]
    assert select_pages(keys, None, regex("counting")) == [0, 3]
    assert select_pages(keys, regex("counting|synth/"), regex(":2$")) == [1, 3]
    assert select_pages(keys, regex("nothing"), None) == []
    with pytest.raises(EvaluateError, match=r"--pages '\(' is not a valid regular expression"):
        compile_page_regex("--pages", "(")


def test_output_path_follows_bench_layout(tmp_path):
    assert output_path(tmp_path, "counting.pdf", 2, 1) == tmp_path / "counting_pg2_repeat1.md"
    assert output_path(tmp_path, "synth/doc0042_page3.pdf", 1, 3) == tmp_path / "synth" / "doc0042_page3_pg1_repeat3.md"
    # olmOCR-bench's rule is applied literally: a PDF named *_pg1 keeps its own suffix.
    assert output_path(tmp_path, "blank_book_pg1.pdf", 1, 1) == tmp_path / "blank_book_pg1_pg1_repeat1.md"
    with pytest.raises(ValueError):
        output_path(tmp_path, "a.pdf", 1, 0)


def test_resolve_sampling():
    greedy = resolve_sampling(1, None)
    assert (greedy.do_sample, greedy.temperature) == (False, 0.0)
    assert resolve_sampling(1, 0.0).do_sample is False
    several = resolve_sampling(3, None)
    assert (several.num_samples, several.do_sample, several.temperature) == (3, True, DEFAULT_SAMPLING_TEMPERATURE)
    one_sampled = resolve_sampling(1, 0.5)
    assert (one_sampled.do_sample, one_sampled.temperature) == (True, 0.5)
    for k, t, message in [(2, 0.0, "identical greedy"), (0, None, "--num_samples"), (1, -0.1, "--temperature"),
                          (1, float("nan"), "--temperature")]:
        with pytest.raises(EvaluateError, match=message):
            resolve_sampling(k, t)


def test_strip_front_matter():
    assert strip_front_matter(FRONT_MATTER + "Hello\n\nworld\n") == "Hello\n\nworld"
    assert strip_front_matter("no front matter here\n") == "no front matter here"
    # An unparseable block stays, as page text (olmOCR treats it so).
    assert strip_front_matter("---\n: [\n---\nText") == "---\n: [\n---\nText"


# ------------------------------------------------------------------------------- generation


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from olmocr_rl.models import load_model_and_processor

    model, processor = load_model_and_processor(str(tiny_model_dir))
    assert processor.tokenizer.padding_side == "right"  # transcribe_batch must pad left by itself
    return model, processor


def _items():
    from olmocr_rl.data.dataset import OlmOCRBenchDataset

    dataset = OlmOCRBenchDataset(SAMPLE, jsonl_filter="basic")
    short, long = dataset[0], dataset[1]
    # A longer prompt than its batch neighbour, so the batch needs padding.
    long["prompt"][0]["content"][0]["text"] = "Transcribe this page. " * 5 + long["prompt"][0]["content"][0]["text"]
    return short, long


def test_batched_greedy_equals_one_page_at_a_time(tiny):
    """Left padding: a padded batch transcribes each page exactly as it would alone."""
    model, processor = tiny
    config = generation_config(model, processor, resolve_sampling(1, None), 6)
    short, long = _items()
    batched = transcribe_batch(model, processor, [short, long], config, seed=0)
    alone = [transcribe_batch(model, processor, [item], config, seed=0)[0] for item in (short, long)]
    assert batched == alone
    assert [len(samples) for samples in batched] == [1, 1]
    assert all(tokens <= 6 for samples in batched for _, tokens, _ in samples)


def test_sampling_is_seeded(tiny):
    model, processor = tiny
    config = generation_config(model, processor, resolve_sampling(3, 1.0), 8)
    short, _ = _items()
    first = transcribe_batch(model, processor, [short], config, seed=1)
    assert transcribe_batch(model, processor, [short], config, seed=1) == first
    assert transcribe_batch(model, processor, [short], config, seed=2) != first
    assert len(first[0]) == 3
    # The checkpoint's own decoding defaults do not leak in: plain temperature sampling.
    assert (config.top_k, config.top_p, config.repetition_penalty, config.temperature) == (0, 1.0, 1.0, 1.0)


# ------------------------------------------------------------------------------ end to end


def test_cli_writes_layout_and_matches_bench_scorer(tiny_model_dir, mini_bench, tmp_path):
    """K=2 real run; its score equals `python -m olmocr_rl.bench.score` on the same folder."""
    outputs = tmp_path / "out"
    # A leftover third repeat from an earlier run must not be scored with this run's two.
    (outputs / "synth").mkdir(parents=True)
    (outputs / "synth" / "doc0042_page3_pg1_repeat3.md").write_text("milk bread eggs apples")
    run = run_cli("olmocr_rl.evaluate", "--model", tiny_model_dir, "--bench", mini_bench, "--outputs", outputs,
                  "--num_samples", "2", "--max_new_tokens", "8", "--batch_size", "2", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)

    files = sorted(path.relative_to(outputs).as_posix() for path in outputs.rglob("*.md"))
    assert files == ["counting_pg1_repeat1.md", "counting_pg1_repeat2.md",
                     "synth/doc0042_page3_pg1_repeat1.md", "synth/doc0042_page3_pg1_repeat2.md"]
    assert re.search(r"^\[1/2\] counting\.pdf:1: \d+\+\d+ tokens", run.stderr, re.M), run.stderr
    assert re.search(r"^\[2/2\] synth/doc0042_page3\.pdf:1: ", run.stderr, re.M), run.stderr

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
    assert result["tests"] == reference["tests"]
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

    monkeypatch.setattr(evaluate_module, "transcribe_batch", references)
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


# ------------------------------------------------------------------------------------- errors


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
                    "--pages 'nothing' selects none of the 2 pages", "'counting.pdf:1'")
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--jsonl_filter", "^a",
                              "--exclude_pages", "synth"), "--jsonl_filter '^a' --exclude_pages 'synth' selects none")
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--exclude_pages", "["),
                    "--exclude_pages '['")
    _one_line_error(*run_main(capsys, "--model", tiny_model_dir, "--bench", mini_bench, "--num_samples", "2",
                              "--temperature", "0"), "identical greedy")
    # Nothing was transcribed anywhere by the failed runs.
    assert not list(tmp_path.rglob("*.md"))
