"""Tests for olmocr_rl.report: history loading, window maths, panels drawn/skipped, files and summary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from PIL import Image

from olmocr_rl.report import (
    ReportError,
    comparison_figure,
    load_history,
    main,
    panel_figures,
    plan_panels,
    series,
    window_means,
    write_report,
)


def _record(step: int) -> dict:
    """A GRPO log event as TRL 1.16 + olmocr_rl telemetry write it (β = 0, so no ``kl``)."""
    return {
        "step": step,
        "epoch": step / 25,
        "loss": 0.01,
        "grad_norm": 0.7,
        "learning_rate": 1e-5 * (1 - step / 26),
        "reward": step / 100,
        "reward_std": 0.1,
        "frac_reward_zero_std": 0.5,
        "rewards/bench_reward/mean": step / 100,
        "rewards/bench_reward/std": 0.1,
        "completions/mean_length": 40.0 + step,
        "completions/max_length": 64.0,
        "completions/clipped_ratio": 0.25,
        "entropy": 1.5,
        "bench_reward/present/pass_rate": 0.5,
        "bench_reward/table/pass_rate": 0.2 if step <= 12 else 0.6,
        "bench_reward/jsonl_tables/pass_rate": 0.3,
        "bench_reward/frac_zero_signal_groups": 0.5,
        # TRL logs None when a metric had no valid value in the logging window
        "clip_ratio/region_mean": None,
    }


def write_metrics(run: Path, records: list[dict], tail: str = "") -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return run


def write_trainer_state(ckpt: Path, records: list[dict]) -> None:
    ckpt.mkdir(parents=True)
    state = {"global_step": max(r["step"] for r in records), "log_history": records}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))


# --------------------------------------------------------------------------------------------- pure parts


def test_window_means_hand_worked():
    steps = list(range(1, 26))
    values = [s / 100 for s in steps]
    w = window_means(steps, values)
    assert math.isclose(w.first_mean, 0.055) and w.first_steps == (1, 10)
    assert math.isclose(w.last_mean, 0.205) and w.last_steps == (16, 25)
    assert math.isclose(w.change, 0.15) and not w.overlapping

    short = window_means([2, 4, 6], [1.0, 2.0, 6.0])
    assert short.first_mean == short.last_mean == 3.0 and short.overlapping
    assert short.first_steps == short.last_steps == (2, 6)
    assert window_means([], []) is None


def test_series_sorts_by_step_and_drops_missing_none_nan_bool():
    records = [
        {"step": 3, "x": 0.3},
        {"step": 1, "x": 0.1},
        {"step": 2, "x": None},
        {"step": 4, "x": float("nan")},
        {"step": 5},
        {"step": 6, "x": True},
        {"step": 7, "x": 7},
    ]
    assert series(records, "x") == ([1, 3, 7], [0.1, 0.3, 7.0])


def test_plan_panels_draws_logged_metrics_and_skips_the_rest():
    drawn, skipped = plan_panels([_record(1), _record(2)])
    by_name = {panel.name: keys for panel, keys in drawn}
    assert list(by_name) == ["reward", "reward_std", "rewards_by_function", "pass_rate_by_type",
                             "pass_rate_by_jsonl", "zero_signal", "completion_length", "clipped_ratio",
                             "entropy", "loss", "grad_norm", "learning_rate"]
    assert by_name["pass_rate_by_type"] == ["bench_reward/present/pass_rate", "bench_reward/table/pass_rate"]
    assert by_name["pass_rate_by_jsonl"] == ["bench_reward/jsonl_tables/pass_rate"]
    assert by_name["zero_signal"] == ["frac_reward_zero_std", "bench_reward/frac_zero_signal_groups"]
    # kl is absent (β = 0) and clip_ratio only ever None: both skipped, not drawn empty.
    assert [p.name for p in skipped] == ["policy_clip", "kl"]

    drawn, _ = plan_panels([{**_record(1), "kl": 0.01, "olmorl/frac_groups_dropped": 0.25}])
    by_name = {panel.name: keys for panel, keys in drawn}
    assert by_name["kl"] == ["kl"]
    assert by_name["zero_signal"][-1] == "olmorl/frac_groups_dropped"


def test_panel_figures_have_titles_and_labelled_lines(tmp_path):
    history = load_history(write_metrics(tmp_path / "run", [_record(s) for s in range(1, 26)]))
    figures, skipped = panel_figures(history)
    assert [p.name for p in skipped] == ["policy_clip", "kl"]
    ax = figures["pass_rate_by_type"].axes[0]
    assert ax.get_title() == "Bench pass rate per test type"
    assert [line.get_label() for line in ax.get_lines()] == ["present", "table"]
    assert list(ax.get_lines()[1].get_ydata()) == [0.2] * 12 + [0.6] * 13
    assert ax.get_ylim() == (-0.02, 1.02)
    reward_ax = figures["reward"].axes[0]
    assert reward_ax.get_title() == "Mean reward (band: ± reward_std)"
    assert [line.get_label() for line in reward_ax.get_lines()] == ["reward"]
    assert len(reward_ax.collections) == 1  # the ± reward_std band
    assert [line.get_label() for line in figures["completion_length"].axes[0].get_lines()] == [
        "mean_length", "max_length"]
    assert figures["learning_rate"].axes[0].get_title() == "Learning rate"


# --------------------------------------------------------------------------------------------- history


def test_metrics_jsonl_errors_name_file_and_line(tmp_path, capsys):
    run = write_metrics(tmp_path / "run", [_record(1)], tail='{"step": 2, "reward": oops}\n{"step": 3}\n')
    with pytest.raises(ReportError, match=r"metrics.jsonl:2: not valid JSON"):
        load_history(run)

    write_metrics(run, [_record(1)], tail='{"reward": 0.5}\n')
    with pytest.raises(ReportError, match=r"metrics.jsonl:2: a log record must be a JSON object with a numeric 'step'"):
        load_history(run)

    # A run still writing leaves a partial last line: read the rest, warn.
    write_metrics(run, [_record(1), _record(2)], tail='{"step": 3, "rew')
    assert [r["step"] for r in load_history(run).records] == [1, 2]
    assert "metrics.jsonl:3: ignoring incomplete last line" in capsys.readouterr().err


def test_trainer_state_fallback_picks_the_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    records = [{"step": s, "reward": s / 10, "learning_rate": 1e-5} for s in range(1, 11)]
    write_trainer_state(run / "checkpoint-9", records[:9])
    write_trainer_state(run / "checkpoint-10", records)  # sorts before checkpoint-9 as text
    (run / "metrics.jsonl").write_text("\n")  # present but empty: fall back
    history = load_history(run)
    assert history.source == run / "checkpoint-10" / "trainer_state.json"
    assert len(history.records) == 10


def test_no_history_is_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as exc:
        main([str(empty)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"report: error: {empty}: no training history: expected metrics.jsonl")
    assert err.count("\n") == 1

    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing")])
    assert f"{tmp_path / 'missing'}: no such directory" in capsys.readouterr().err

    bad = tmp_path / "bad" / "checkpoint-1"
    bad.mkdir(parents=True)
    (bad / "trainer_state.json").write_text('{"global_step": 1}')
    with pytest.raises(ReportError, match="has no 'log_history' list"):
        load_history(tmp_path / "bad")


# --------------------------------------------------------------------------------------------- reports


def _png_ok(path: Path) -> tuple[int, int]:
    assert path.is_file() and path.stat().st_size > 5_000, path
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


@pytest.mark.slow  # draws every chart of a run with matplotlib: about 4 s
def test_single_run_report_files_and_summary(tmp_path, capsys):
    run = write_metrics(tmp_path / "grpo", [_record(s) for s in range(1, 26)])
    assert main([str(run)]) == 0
    out = run / "report"
    assert "skipped (not logged): policy_clip, kl" in capsys.readouterr().out
    for name in ("overview", "reward", "reward_std", "rewards_by_function", "pass_rate_by_type",
                 "pass_rate_by_jsonl", "zero_signal", "completion_length", "clipped_ratio", "entropy", "loss",
                 "grad_norm", "learning_rate"):
        _png_ok(out / f"{name}.png")
    assert not (out / "kl.png").exists() and not (out / "compare.png").exists()
    overview_w, overview_h = _png_ok(out / "overview.png")
    assert overview_w > 1000 and overview_h > 1000  # a 3-column grid, not one small chart

    summary = (out / "report.md").read_text()
    assert f"| grpo | `{run / 'metrics.jsonl'}` | 25 | 1–25 |" in summary
    assert "| mean reward | 0.055 (steps 1–10) | 0.205 (steps 16–25) | +0.150 |" in summary
    assert "| present | 0.500 (steps 1–10) | 0.500 (steps 16–25) | +0.000 |" in summary
    assert "| table | 0.200 (steps 1–10) | 0.600 (steps 16–25) | +0.400 |" in summary
    assert "| tables | 0.300 (steps 1–10) | 0.300 (steps 16–25) | +0.000 |" in summary
    assert "Skipped panels (metrics never logged): policy_clip (`clip_ratio/*_mean`); kl (`kl`, logged only when β > 0)." in summary
    links = [line.split("](")[1].rstrip(")") for line in summary.splitlines() if line.startswith(("- [", "!["))]
    assert "reward.png" in links and "overview.png" in links
    assert all((out / link).is_file() for link in links)


@pytest.mark.slow  # draws the charts of two runs: about 3 s
def test_several_runs_compared_on_one_chart(tmp_path):
    full = write_metrics(tmp_path / "full" / "grpo", [_record(s) for s in range(1, 26)])
    olmorl = tmp_path / "runs" / "olmorl"
    # A run with only checkpoints (no metrics.jsonl), with β > 0 and OlmoRL's dropped-group fraction.
    write_trainer_state(olmorl / "checkpoint-20", [
        {"step": s, "reward": 0.2 + s / 50, "kl": 0.001 * s, "olmorl/frac_groups_dropped": 0.25,
         "learning_rate": 1e-5} for s in range(1, 21)])

    histories = [load_history(full), load_history(olmorl)]
    fig = comparison_figure(histories)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["reward", "reward_std", "frac_reward_zero_std", "olmorl/frac_groups_dropped",
                      "completions/mean_length", "completions/clipped_ratio", "kl", "entropy", "learning_rate",
                      "bench_reward/present/pass_rate", "bench_reward/table/pass_rate"]
    reward_ax = fig.axes[0]
    assert [line.get_label() for line in reward_ax.get_lines()] == ["grpo", "olmorl"]
    kl_ax = fig.axes[titles.index("kl")]
    assert [(line.get_label(), line.get_color()) for line in kl_ax.get_lines()] == [("olmorl", "C1")]

    # The report of two runs; the GRPO run with three of its metrics (all of them are drawn in the single-run test).
    grpo = write_metrics(tmp_path / "runs" / "grpo", [{key: _record(s)[key] for key in ("step", "reward", "loss")}
                                                      for s in range(1, 26)])
    result = write_report([grpo, olmorl])
    out = tmp_path / "runs" / "report_compare"
    assert result.out_dir == out and result.comparison == out / "compare.png"
    _png_ok(out / "compare.png")
    _png_ok(out / "grpo" / "reward.png")
    _png_ok(out / "olmorl" / "kl.png")
    assert result.skipped["olmorl"] == ["reward_std", "rewards_by_function", "pass_rate_by_type",
                                        "pass_rate_by_jsonl", "completion_length", "clipped_ratio", "policy_clip",
                                        "entropy", "loss", "grad_norm"]
    assert result.drawn["olmorl"] == ["reward", "zero_signal", "kl", "learning_rate"]
    summary = result.summary.read_text()
    assert "![runs compared](compare.png)" in summary
    assert "## Run `grpo`" in summary and "## Run `olmorl`" in summary
    assert f"`{olmorl / 'checkpoint-20' / 'trainer_state.json'}` | 20 | 1–20 |" in summary
    # olmorl: reward 0.2 + s/50 -> first 10 mean 0.31, last 10 mean 0.51
    assert "| mean reward | 0.310 (steps 1–10) | 0.510 (steps 11–20) | +0.200 |" in summary
    assert "(olmorl/kl.png)" in summary


def test_same_named_runs_get_distinct_labels(tmp_path):
    a = write_metrics(tmp_path / "a" / "run", [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}])
    b = write_metrics(tmp_path / "b" / "run", [{"step": 1, "reward": 0.3}, {"step": 2, "reward": 0.4}])
    result = write_report([a, b], tmp_path / "cmp")
    assert sorted(result.drawn) == ["a_run", "b_run"]
    assert (tmp_path / "cmp" / "a_run" / "reward.png").is_file()
    assert (tmp_path / "cmp" / "b_run" / "reward.png").is_file()
    assert "Only 2 steps logged `reward`: the two windows overlap." in result.summary.read_text()
