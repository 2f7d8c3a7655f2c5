"""``python -m olmocr_rl.evaluate --compare EVAL_A EVAL_B`` on evaluation folders written here: the table, the
paired bootstrap intervals (over pages, and repeats), the PNG, and the one-line refusals."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from olmocr_rl.evaluate import main
from olmocr_rl.evaluation.compare import compare
from olmocr_rl.evaluation.leaderboard import plus_minus as headline


def write_eval(folder: Path, passes: dict[str, tuple[int, int]], *, scoring="olmocr-rl", model="m") -> Path:
    """An evaluation folder whose test ``<page>_t<j>`` passed ``repeat_passes`` of ``repeats``; pages p0..p9 in
    a.jsonl, p10.. in b.jsonl; tests t0 are ``present``, t1 ``absent``."""
    folder.mkdir(parents=True)
    tests = {}
    for test_id, (repeat_passes, repeats) in passes.items():
        page = test_id.split("_")[0]
        tests[test_id] = {"group": "a.jsonl" if int(page[1:]) < 10 else "b.jsonl",
                          "type": "present" if test_id.endswith("t0") else "absent", "passed": repeat_passes > repeats / 2,
                          "repeats": repeats, "repeat_passes": repeat_passes, "explanation": "", "page": f"{page}.pdf:1"}
    scores = {"scoring": scoring, "tests": tests}
    (folder / "scores.json").write_text(json.dumps(scores))
    (folder / "evaluation.json").write_text(json.dumps({"model": model, "bench": "bench", "backend": "hf",
                                                        "protocol": "single"}))
    return folder


def outcomes(rate: float, seed: int, repeats: int = 1) -> dict:
    rng = random.Random(seed)
    return {f"p{p}_t{t}": (sum(rng.random() < rate for _ in range(repeats)), repeats) for p in range(20) for t in range(2)}


def test_identical_evaluations_differ_by_zero(tmp_path):
    a = write_eval(tmp_path / "a", outcomes(0.5, 0))
    b = write_eval(tmp_path / "b", outcomes(0.5, 0))
    result = compare([str(a), str(b)], resamples=200)
    overall = result["rows"]["overall"]
    assert overall["diff"] == 0 and overall["diff_ci"] == [0.0, 0.0]
    assert overall["a_ci"][0] < overall["a"] < overall["a_ci"][1]  # the interval of one evaluation has width
    assert Path(result["png"]).stat().st_size > 1000


def test_a_clear_gain_has_an_interval_above_zero_and_noise_does_not(tmp_path):
    low = write_eval(tmp_path / "low", outcomes(0.2, 1))
    high = write_eval(tmp_path / "high", outcomes(0.9, 2))
    noise = write_eval(tmp_path / "noise", outcomes(0.2, 3))
    gain = compare([str(low), str(high)], resamples=500)["rows"]
    assert gain["overall"]["diff_ci"][0] > 0 and gain["jsonl:a.jsonl"]["diff"] > 0.4
    same = compare([str(low), str(noise)], resamples=500)["rows"]["overall"]
    assert same["diff_ci"][0] < 0 < same["diff_ci"][1]


def test_repeats_widen_the_interval(tmp_path):
    """Three repeats at 50 % per test: redrawing the repeats adds noise a single pass cannot show."""
    fixed = write_eval(tmp_path / "one", {k: (1, 1) for k in outcomes(0, 0)})
    split = write_eval(tmp_path / "three", {k: (2, 3) for k in outcomes(0, 0)})  # passes, by 2 of 3
    rows = compare([str(fixed), str(split)], resamples=300)["rows"]["overall"]
    assert rows["diff"] == 0 and rows["a_ci"] == [1.0, 1.0] and rows["b_ci"][0] < 0.9


def test_cli_prints_the_table_and_refuses_different_test_sets(tmp_path, capsys):
    a = write_eval(tmp_path / "a", outcomes(0.3, 4), model="before")
    b = write_eval(tmp_path / "b", outcomes(0.6, 5), model="after")
    assert main(["--compare", str(a), str(b), "--bootstrap", "200", "--compare_png", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "A = before (hf, single, a)" in out and "B = after (hf, single, b)" in out
    assert "40 tests on 20 pages; 95% intervals from 200 paired bootstrap resamples of pages" in out
    assert "a.jsonl" in out and "absent" in out and "overall (mean of per-JSONL pass rates): A " in out
    assert (tmp_path / "c.png").is_file()

    other = dict(outcomes(0.3, 4))
    other.pop("p3_t1")
    c = write_eval(tmp_path / "c", other)
    for argv, expected in (([a, c], "different test sets (40 tests of bench vs 39 of bench; e.g. only in A: "
                                    "['p3_t1']"),
                           ([a, tmp_path], "--compare EVAL_B " + str(tmp_path) + ": no evaluation.json there"),
                           ([a, write_eval(tmp_path / "d", outcomes(0.3, 4), scoring="olmocr-bench")],
                            "A was scored under olmocr-rl, B under olmocr-bench")):
        assert main(["--compare", *map(str, argv)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err


@pytest.mark.parametrize("value, ci, text", [(0.267, (0.2, 0.3), "26.7 ± 5.0")])
def test_headline_is_mean_plus_minus_half_the_interval(value, ci, text):
    assert headline(value, ci) == text


def test_a_malformed_or_unfinished_evaluation_is_one_line(tmp_path, capsys):
    a = write_eval(tmp_path / "a", outcomes(0.3, 4))
    cases = {"list": ("scores.json", "[]", "malformed (expected an object with 'scoring' and a 'tests' object"),
             "tests": ("scores.json", '{"scoring": "olmocr-rl", "tests": [1]}', "malformed (expected an object"),
             "field": ("scores.json", json.dumps({"scoring": "olmocr-rl", "tests": {"t": {"group": "a.jsonl"}}}),
                       "malformed: test 't' has no str 'type'"),
             "json": ("scores.json", "{not json", "unreadable (Expecting property name"),
             "summary": ("evaluation.json", "[1, 2]", "evaluation.json: malformed (expected an object)")}
    for name, (file, text, expected) in cases.items():
        b = write_eval(tmp_path / name, outcomes(0.3, 4))
        (b / file).write_text(text)
        assert main(["--compare", str(a), str(b)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], (name, err)
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run.json").write_text("{}")
    assert main(["--compare", str(a), str(unfinished)]) == 2
    assert "an evaluation that has not finished (run.json but no evaluation.json); run its command again" in \
        capsys.readouterr().err


def test_leaderboard_rows_leave_out_headers_and_footers_and_name_the_columns():
    from olmocr_rl.evaluation.leaderboard import leaderboard

    tests = {}
    for page in range(8):
        group = "headers_footers.jsonl" if page < 4 else "table_tests.jsonl"
        for t in range(3):
            tests[f"p{page}_t{t}"] = {"group": group, "type": "absent" if page < 4 else "table", "passed": page < 4,
                                      "repeats": 1, "repeat_passes": int(page < 4), "page": f"p{page}.pdf:1"}
    scores = {"tests": tests, "per_jsonl": {"headers_footers.jsonl": {"passed": 12, "total": 12},
                                            "table_tests.jsonl": {"passed": 0, "total": 12}}, "per_type": {}}
    board = leaderboard(scores, resamples=200)
    assert board["overall"]["pass_rate"] == 0.5 and board["overall_without_headers_footers"]["pass_rate"] == 0.0
    assert board["overall_without_headers_footers"]["headers_footers_tests"] == 12
    assert board["overall"]["ci"][0] <= 0.5 <= board["overall"]["ci"][1]
    assert board["per_jsonl"]["table_tests.jsonl"]["column"] == "Tables"
    assert board["per_jsonl"]["headers_footers.jsonl"] == {"pass_rate": 1.0, "ci": [1.0, 1.0], "passed": 12,
                                                           "total": 12, "column": "Headers & Footers"}
    assert board["per_type"]["table"]["pass_rate"] == 0.0


@pytest.mark.slow  # three charts of matplotlib
def test_report_plots_evaluations_before_and_after_per_type_with_intervals(tmp_path, capsys):
    from olmocr_rl.evaluation.leaderboard import leaderboard
    from olmocr_rl.report import main as report_main

    a = write_eval(tmp_path / "a", outcomes(0.3, 4), model="before")
    b = write_eval(tmp_path / "b", outcomes(0.7, 5), model="after")
    assert report_main([str(a), str(b), "--out", str(tmp_path / "pair")]) == 0
    md = (tmp_path / "pair" / "report.md").read_text()
    assert "== model only (= as written: neither side used olmOCR's pipeline)" in md and "![before and after" in md
    assert (tmp_path / "pair" / "per_type.png").stat().st_size > 10_000
    assert main(["--compare", str(a), str(b), "--bootstrap", "100"]) == 0
    capsys.readouterr()
    assert report_main([str(b / "compare.json"), "--out", str(tmp_path / "from_json")]) == 0
    assert (tmp_path / "from_json" / "per_type.png").is_file()
    # one evaluation: its leaderboard rows (model only, and the pipeline's when it ran olmOCR's pipeline)
    scores = json.loads((b / "scores.json").read_text())
    scores.update(per_jsonl={"a.jsonl": {"passed": 1, "total": 2}, "b.jsonl": {"passed": 1, "total": 2}}, per_type={})
    board = leaderboard(scores, 100)
    summary = json.loads((b / "evaluation.json").read_text())
    summary.update(leaderboard=board, model_only={"leaderboard": board}, protocol="olmocr-pipeline")
    (b / "evaluation.json").write_text(json.dumps(summary))
    assert report_main([str(b), "--out", str(tmp_path / "one")]) == 0
    md = (tmp_path / "one" / "report.md").read_text()
    assert "| row | model only | pipeline |" in md and "| overall w/o H&F |" in md
    # what it cannot read: one line each
    for argv, expected in (([str(a)], "evaluation.json has no leaderboard rows (written by an earlier version)"),
                           ([str(a), str(tmp_path)], "give training runs or evaluations")):
        with pytest.raises(SystemExit) as exit_:
            report_main([*argv, "--out", str(tmp_path / "x")])
        assert exit_.value.code == 2 and expected in capsys.readouterr().err
