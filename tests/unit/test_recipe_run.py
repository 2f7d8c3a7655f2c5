"""The recipe's one command (olmocr_rl.recipe.run) and its report, on stand-in stages: stages run in order, a
finished stage is kept on a second run, a failed stage stops the run with one line and runs again next time, the
GRPO bench holds no clean transcription, and the report's gains, intervals and soup rows are the compare files'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from olmocr_rl.recipe import report, run


def _stand_ins(out: Path, fail_at: str | None) -> list[run.Stage]:
    """Three stages, each a Python process that writes its output file (or, at ``fail_at``, exits 3)."""
    touch = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('x')"
    return [run.Stage(name, [out / name], [sys.executable, "-c", "import sys; sys.exit(3)" if name == fail_at
                                           else touch, str(out / name)])
            for name in ("pages-train", "sft", "grpo-plain-s0")]


def test_stages_run_once_a_failure_stops_with_one_line_and_the_next_run_goes_on(tmp_path, monkeypatch):
    plan = run.Plan(out=str(tmp_path))
    monkeypatch.setattr(run, "stages", lambda p: _stand_ins(tmp_path, "sft"))
    said = []
    assert run.run(plan, log=said.append) == 3
    assert said[-1] == ("error: the recipe's stage sft failed (exit status 3); fix what it printed above and run the "
                        "same command again: finished stages are kept")
    state = json.loads((tmp_path / run.STATE).read_text())
    assert [name for name, info in state["stages"].items() if info["done"]] == ["pages-train"]
    assert state["stages"]["sft"]["settings"] is not None and state["plan"]["seeds"] == [0, 1, 2]

    monkeypatch.setattr(run, "stages", lambda p: _stand_ins(tmp_path, None))
    said.clear()
    assert run.run(plan, log=said.append) == 0
    # the stand-in's failing command was replaced by a working one: its settings changed, which the run says
    assert said.pop(0) == "[recipe] sft ran before with other settings: it and every later stage start over"
    assert said[0].startswith("[recipe] 1/3 pages-train: done before") and said[0].endswith("kept")
    assert said[1].startswith("[recipe] 2/3 sft (") and said[-1].startswith(f"[recipe] finished: {tmp_path}")
    assert all((tmp_path / name).read_text() == "x" for name in ("pages-train", "sft", "grpo-plain-s0"))

    (tmp_path / "sft").unlink()  # an output removed by hand: the stage is not done any more
    said.clear()
    assert run.run(plan, until="sft", log=said.append) == 0
    assert [line.split(" (")[0] for line in said[:2]] == ["[recipe] 1/3 pages-train: done before", "[recipe] 2/3 sft"]
    assert not any("grpo-plain-s0" in line for line in said)
    assert run.run(plan, until="nope", log=said.append) == 2
    assert said[-1] == "error: --until nope: no such stage; the stages are pages-train, sft, grpo-plain-s0"


def test_a_stage_run_before_with_other_settings_starts_over_with_every_later_stage(tmp_path, monkeypatch):
    plan = run.Plan(out=str(tmp_path))
    monkeypatch.setattr(run, "stages", lambda p: _stand_ins(tmp_path, None))
    assert run.run(plan, log=lambda line: None) == 0
    (tmp_path / "pages-train").write_text("kept")  # marks what a second run leaves alone
    (tmp_path / "sft").write_text("stale")
    (tmp_path / "grpo-plain-s0").write_text("stale")

    def changed_sft(p):  # e.g. --page_steps given another value: the sft stage's command differs
        stages = _stand_ins(tmp_path, None)
        stages[1].env = {"OMP_NUM_THREADS": "2"}
        for stage in stages[2:]:
            stage.fresh = False  # a stage that would continue from what it left (GRPO) must not, after such a change
        return stages

    monkeypatch.setattr(run, "stages", changed_sft)
    said = []
    assert run.run(plan, log=said.append) == 0
    assert said[0] == "[recipe] sft ran before with other settings: it and every later stage start over"
    assert said[1].endswith("kept") and said[2].startswith("[recipe] 2/3 sft (")
    assert [(tmp_path / n).read_text() for n in ("pages-train", "sft", "grpo-plain-s0")] == ["kept", "x", "x"]
    said.clear()
    assert run.run(plan, log=said.append) == 0  # the same settings again: everything kept
    assert all(line.endswith("kept") for line in said[:3])

    # a run stopped inside a stage whose settings then change: what it left is removed, not continued
    state = json.loads((tmp_path / run.STATE).read_text())
    state["stages"]["grpo-plain-s0"] = {"done": False, "settings": [["other"], {}]}
    (tmp_path / run.STATE).write_text(json.dumps(state))
    (tmp_path / "grpo-plain-s0").write_text("half of another run")
    said.clear()
    assert run.run(plan, log=said.append) == 0
    assert said[0] == "[recipe] grpo-plain-s0 ran before with other settings: it and every later stage start over"
    assert (tmp_path / "grpo-plain-s0").read_text() == "x"


def test_the_default_plan_has_every_arm_and_the_grpo_runs_train_on_the_tests_only_bench(tmp_path):
    names = [stage.name for stage in run.stages(run.Plan(out=str(tmp_path)))]
    assert names[:8] == ["pages-train", "pages-heldout", "synth-train", "synth-heldout", "teacher", "grpo-bench",
                         "model", "sft"]
    for arm in ("plain-s0", "plain-s1", "plain-s2", "olmorl-s0", "olmorl-s1", "olmorl-s2", "flipped-s0"):
        assert [f"grpo-{arm}", f"eval-{arm}", f"compare-{arm}"] == names[names.index(f"grpo-{arm}"):][:3]
    assert names[-1] == "report" and "soup-plain" in names and "soup-olmorl" in names
    grpo = {s.name: s.command for s in run.stages(run.Plan(out=str(tmp_path)))}
    from olmocr_rl.recipe.sft import Schedule

    warm = grpo["sft"]  # the warm start runs with the sft command's own defaults
    assert [warm[warm.index(f"--{k}") + 1] for k in ("line_steps", "page_steps", "image_dim")] == [
        str(Schedule.line_steps), str(Schedule.page_steps), str(Schedule.image_dim)]
    assert "--olmorl" in grpo["grpo-olmorl-s1"] and grpo["grpo-flipped-s0"][-2:] == ["--reward_bench", "-1"]
    assert grpo["grpo-plain-s2"][grpo["grpo-plain-s2"].index("--train_bench_data_folder") + 1] == str(
        tmp_path / "bench" / "train-rl")


def test_the_warm_start_runs_on_every_core_and_the_other_stages_inherit_the_environment(tmp_path, monkeypatch):
    by_name = {s.name: s for s in run.stages(run.Plan(out=str(tmp_path)))}
    assert by_name["sft"].env == {"OMP_NUM_THREADS": str(run.cores())}
    assert all(not s.env for name, s in by_name.items() if name != "sft")
    assert {s.name: s for s in run.stages(run.Plan(out=str(tmp_path), sft_threads=1))}["sft"].env == {
        "OMP_NUM_THREADS": "1"}
    # what a stage's process sees: its own variables over the recipe's environment
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OLMOCR_RL_RECIPE_TEST_MARK", "kept")
    seen = tmp_path / "seen"
    show = ("import os, sys; open(sys.argv[1], 'w').write(os.environ['OMP_NUM_THREADS'] + ' ' + "
            "os.environ['OLMOCR_RL_RECIPE_TEST_MARK'])")
    stage = run.Stage("sft", [seen], [sys.executable, "-c", show, str(seen)], env={"OMP_NUM_THREADS": "7"})
    assert run._execute(stage) == 0 and seen.read_text() == "7 kept"
    assert run._execute(run.Stage("eval-sft", [seen], [sys.executable, "-c", show, str(seen)])) == 0
    assert seen.read_text() == "1 kept"


def test_the_grpo_bench_keeps_tests_and_pdfs_and_cuts_references_to_their_front_matter(tmp_path):
    bench = tmp_path / "bench"
    (bench / "pdfs").mkdir(parents=True)
    (bench / "pdfs" / "a.pdf").write_bytes(b"%PDF-1.4 stand-in")
    (bench / "synth_report.jsonl").write_text('{"id": "a_1", "pdf": "a.pdf", "page": 1, "type": "baseline"}\n')
    (bench / "claude_original").mkdir()
    (bench / "claude_original" / "a_pg1_repeat1.md").write_text(
        "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
        "is_diagram: False\n---\nThe clean transcription the GRPO runs must never see.\n")
    run.tests_only_bench(bench, tmp_path / "rl")
    assert (tmp_path / "rl" / "synth_report.jsonl").read_text() == (bench / "synth_report.jsonl").read_text()
    assert (tmp_path / "rl" / "pdfs" / "a.pdf").read_bytes() == b"%PDF-1.4 stand-in"
    cut = (tmp_path / "rl" / "claude_original" / "a_pg1_repeat1.md").read_text()
    assert "clean transcription" not in cut and "is_table: False" in cut and cut.startswith("---\n")


def _compare(a: float, b: float, low: float, high: float) -> dict:
    row = {"a": a, "b": b, "diff": b - a, "diff_ci": [low, high]}
    return {"model_only": {"rows": {"overall": row, "type:absent": {**row, "diff": 0.2, "diff_ci": [0.1, 0.3]}}}}


def test_the_report_gives_each_runs_gain_with_its_interval_and_checks_the_soup(tmp_path):
    plan = run.Plan(out=str(tmp_path), seeds=(0, 1), algorithms=("plain",))
    (tmp_path / "compare").mkdir()
    for name, (b, low, high) in {"plain-s0": (0.50, 0.02, 0.14), "plain-s1": (0.44, -0.01, 0.09),
                                 "flipped-s0": (0.30, -0.19, -0.03), "soup-plain": (0.49, 0.03, 0.15)}.items():
        (tmp_path / "compare" / f"{name}.json").write_text(json.dumps(_compare(0.40, b, low, high)))
    path = report.write_report(plan)
    text = path.read_text()
    assert "| plain-s0 | 40.0 | 50.0 | +10.0 [+2.0, +14.0] | above 0 |" in text
    assert "| plain-s1 | 40.0 | 44.0 | +4.0 [-1.0, +9.0] | spans 0 |" in text
    assert "| flipped-s0 | 40.0 | 30.0 | -10.0 [-19.0, -3.0] | below 0 |" in text
    assert "| plain | 49.0 | 47.0 | yes |" in text  # the soup against the mean of its seeds
    assert "| plain-s0 | +20.0 [+10.0, +30.0] |" in text
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["soups"] == [{"algorithm": "plain", "soup": 0.49, "seeds_mean": pytest.approx(0.47), "holds": True}]
    assert [row["name"] for row in saved["arms"]] == ["plain-s0", "plain-s1", "flipped-s0", "soup-plain"]


def test_the_command_lists_its_stages_and_refuses_a_missing_config(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the repository's root, as scripts/recipe_cpu.sh runs it
    assert run.main(["--out", str(tmp_path), "--list", "--seeds", "0", "--algorithms", "plain"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.strip() for line in listed[:2]] == ["pages-train", "pages-heldout"]
    assert [line.strip() for line in listed[-4:]] == ["grpo-flipped-s0", "eval-flipped-s0", "compare-flipped-s0",
                                                     "report"]  # one seed: no soup
    with pytest.raises(SystemExit):
        run.main(["--out", str(tmp_path), "--grpo_config", "nope.yaml"])
    assert "--grpo_config nope.yaml does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run.main(["--out", str(tmp_path), "--sft_threads", "-1"])
    assert "--sft_threads -1: give a number of threads, or 0 for one a core" in capsys.readouterr().err


def test_every_grpo_arm_passes_the_trainers_flag_checks_with_the_recipes_config(tmp_path, monkeypatch):
    """The arms' flags on top of configs/recipe-cpu.yaml, checked as python -m olmocr_rl.grpo_train checks them
    before anything loads (--olmorl refuses the config's KL term unless the arm sets it back to 0)."""
    from olmocr_rl.config import parse_args, validate

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    (tmp_path / "bench" / "train-rl").mkdir(parents=True)  # the folders the earlier stages make
    (tmp_path / "models" / "sft").mkdir(parents=True)
    for stage in run.stages(run.Plan(out=str(tmp_path))):
        if stage.name.startswith("grpo-") and stage.name != "grpo-bench":
            argv = stage.command[stage.command.index("olmocr_rl.grpo_train") + 1:]
            cfg = validate(parse_args(argv))
            assert cfg.seed == int(stage.name.rsplit("-s", 1)[1])
            assert cfg.beta == (0.0 if "olmorl" in stage.name else 0.04)
            assert cfg.target_longest_image_dim == 448
