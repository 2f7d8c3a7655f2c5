"""Plots and a Markdown summary of one or more training runs' logged history.

    python -m olmocr_rl.report out/tiny-grpo                         # -> out/tiny-grpo/report/
    python -m olmocr_rl.report out/tiny-grpo out/tiny-olmorl         # -> out/report_compare/
    python -m olmocr_rl.report out/tiny-grpo --out /tmp/report
    python -m olmocr_rl.report outputs/eval/base__bench outputs/eval/run__bench   # evaluations: before/after per type

Evaluation folders (``python -m olmocr_rl.evaluate``) and ``compare.json`` files are plotted by
:mod:`olmocr_rl.evaluation.plots`: per JSONL file and per test type, with 95 % intervals.

History source, per run: ``OUTPUT_DIR/metrics.jsonl`` (one JSON object per Trainer log event, with a
``step``; olmocr_rl's training CLI writes it), else the ``log_history`` of the most advanced
``trainer_state.json`` (``OUTPUT_DIR/`` itself or ``OUTPUT_DIR/checkpoint-*/``).

Output: one PNG per panel (``reward.png``, ``pass_rate_by_type.png``, ...), ``overview.png`` with all
panels, and ``report.md`` linking them. A panel whose metrics were never logged (e.g. ``kl`` when β = 0)
is skipped and named as skipped in the summary. With several runs, each run's panels go in a
sub-folder named after the run and ``compare.png`` puts one line per run on each shared metric.

Metric names are TRL 1.16's GRPOTrainer keys (``reward``, ``reward_std``, ``frac_reward_zero_std``,
``rewards/<func>/mean``, ``completions/*``, ``clip_ratio/*``, ``kl``, ``entropy``), the Trainer's
(``loss``, ``learning_rate``) and olmocr_rl's telemetry (``bench_reward/<type>/pass_rate``,
``bench_reward/jsonl_<name>/pass_rate``, ``bench_reward/frac_zero_signal_groups``,
``olmorl/frac_groups_dropped``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

#: Rewards and pass rates are summarised over this many logged steps at each end of the run.
WINDOW = 10

METRICS_FILE = "metrics.jsonl"


class ReportError(ValueError):
    """A run folder whose history cannot be read; the message names the folder/file/line and the fix."""


# ----------------------------------------------------------------------------------------- history


@dataclass
class RunHistory:
    """One run's log records (dicts with a ``step``, in logged order) and where they came from."""

    run_dir: Path
    label: str
    source: Path
    records: list[dict]


def _read_metrics_jsonl(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    records = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if lineno == len(lines):
                # A run that is still writing (or was killed mid-write) leaves a partial last line.
                print(f"report: warning: {path}:{lineno}: ignoring incomplete last line ({err})", file=sys.stderr)
                continue
            raise ReportError(f"{path}:{lineno}: not valid JSON ({err}); fix or delete that line") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), (int, float)):
            raise ReportError(f"{path}:{lineno}: a log record must be a JSON object with a numeric 'step' field")
        records.append(record)
    return records


def _read_trainer_state(path: Path) -> tuple[int, list[dict]]:
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ReportError(f"{path}: not valid JSON ({err})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ReportError(f"{path}: has no 'log_history' list; is it a transformers trainer_state.json?")
    for i, record in enumerate(history):
        if not isinstance(record, dict) or not isinstance(record.get("step"), (int, float)):
            raise ReportError(f"{path}: log_history[{i}] has no numeric 'step' field")
    return int(state.get("global_step") or 0), history


def _checkpoint_number(path: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", path.parent.name)
    return int(match.group(1)) if match else -1


def load_history(run_dir: Path | str, label: str | None = None) -> RunHistory:
    """Read a run's log records: ``metrics.jsonl`` if it has any, else the newest trainer_state.json.

    "Newest" is the largest ``global_step`` (ties: the highest checkpoint number, then ``run_dir``'s own
    file, written at the end of training). Raises ``ReportError`` when neither source holds records.
    """
    run_dir = Path(run_dir)
    label = label or run_dir.resolve().name
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such directory")
    metrics = run_dir / METRICS_FILE
    if metrics.is_file():
        records = _read_metrics_jsonl(metrics)
        if records:
            return RunHistory(run_dir, label, metrics, records)
    candidates = sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=_checkpoint_number)
    if (run_dir / "trainer_state.json").is_file():
        candidates.append(run_dir / "trainer_state.json")
    best: tuple[int, Path, list[dict]] | None = None
    for path in candidates:
        global_step, history = _read_trainer_state(path)
        if history and (best is None or global_step >= best[0]):
            best = (global_step, path, history)
    if best is None:
        raise ReportError(
            f"{run_dir}: no training history: expected {METRICS_FILE} (written by olmocr_rl's training CLI) "
            "or trainer_state.json / checkpoint-*/trainer_state.json with a non-empty log_history; "
            "pass the run's output_dir"
        )
    return RunHistory(run_dir, label, best[1], best[2])


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def series(records: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key`` over the records that logged it as a finite number, sorted by step.

    ``None``/NaN (TRL logs None when a metric had no valid value) and non-numbers are left out.
    """
    points = [(r["step"], r[key]) for r in records if _is_number(r.get(key))]
    points.sort(key=lambda p: p[0])  # stable: same-step records keep their logged order
    return [p[0] for p in points], [float(p[1]) for p in points]


def logged_keys(records: Sequence[dict]) -> set[str]:
    """Every key that holds a finite number in at least one record."""
    return {k for r in records for k, v in r.items() if _is_number(v)}


@dataclass(frozen=True)
class Window:
    """Mean of a metric over its first and last ``WINDOW`` logged values, and the steps they cover."""

    first_mean: float
    first_steps: tuple[float, float]
    last_mean: float
    last_steps: tuple[float, float]
    count: int  # how many values were logged in all

    @property
    def change(self) -> float:
        return self.last_mean - self.first_mean

    @property
    def overlapping(self) -> bool:
        return self.count < 2 * WINDOW


def window_means(steps: Sequence[float], values: Sequence[float], n: int = WINDOW) -> Window | None:
    """First-n and last-n means of a step-sorted series (they overlap when fewer than 2n); None if empty."""
    if not values:
        return None
    first, last = list(values[:n]), list(values[-n:])
    return Window(
        first_mean=sum(first) / len(first),
        first_steps=(steps[0], steps[len(first) - 1]),
        last_mean=sum(last) / len(last),
        last_steps=(steps[-len(last)], steps[-1]),
        count=len(values),
    )


# ----------------------------------------------------------------------------------------- panels


def _keys(*names: str) -> Callable[[set[str]], list[str]]:
    return lambda logged: [n for n in names if n in logged]


def _pattern(regex: str) -> Callable[[set[str]], list[str]]:
    compiled = re.compile(regex)
    return lambda logged: sorted(k for k in logged if compiled.fullmatch(k))


PASS_RATE_BY_TYPE = r"bench_reward/(?!jsonl_)([^/]+)/pass_rate"
PASS_RATE_BY_JSONL = r"bench_reward/jsonl_(.+)/pass_rate"


@dataclass(frozen=True)
class Panel:
    """One chart: which logged keys it draws, and how."""

    name: str  # file stem of its PNG
    title: str
    ylabel: str
    select: Callable[[set[str]], list[str]] = field(compare=False)
    #: line key -> key of a std drawn as a ±band around it
    bands: dict[str, str] = field(default_factory=dict, compare=False)
    #: regex whose first group is the legend label (default: the key)
    label_regex: str | None = None
    #: fixed 0..1 y axis, for pass rates and fractions, so flat lines at 0.2 do not look like noise
    unit_interval: bool = False
    #: the metric keys it needs, as the summary names them when the panel is skipped
    needs: str = ""


PANELS: tuple[Panel, ...] = (
    Panel("reward", "Mean reward (band: ± reward_std)", "reward", _keys("reward", "eval_reward"),
          bands={"reward": "reward_std"}, needs="`reward`"),
    Panel("reward_std", "Reward std (TRL reward_std)", "std", _keys("reward_std"), needs="`reward_std`"),
    Panel("rewards_by_function", "Reward per reward function", "mean reward", _pattern(r"rewards/(.+)/mean"),
          label_regex=r"rewards/(.+)/mean", needs="`rewards/<func>/mean`"),
    Panel("pass_rate_by_type", "Bench pass rate per test type", "pass rate", _pattern(PASS_RATE_BY_TYPE),
          label_regex=PASS_RATE_BY_TYPE, unit_interval=True, needs="`bench_reward/<type>/pass_rate`"),
    Panel("pass_rate_by_jsonl", "Bench pass rate per JSONL file", "pass rate", _pattern(PASS_RATE_BY_JSONL),
          label_regex=PASS_RATE_BY_JSONL, unit_interval=True, needs="`bench_reward/jsonl_<name>/pass_rate`"),
    Panel("zero_signal", "Fraction of zero-signal groups", "fraction",
          _keys("frac_reward_zero_std", "bench_reward/frac_zero_signal_groups", "olmorl/frac_groups_dropped"),
          unit_interval=True, needs="`frac_reward_zero_std`"),
    Panel("completion_length", "Completion length (tokens)", "tokens",
          _keys("completions/mean_length", "completions/min_length", "completions/max_length",
                "completions/mean_terminated_length"),
          label_regex=r"completions/(.+)", needs="`completions/mean_length`"),
    Panel("clipped_ratio", "Completions cut at max length", "fraction", _keys("completions/clipped_ratio"),
          needs="`completions/clipped_ratio`"),
    Panel("policy_clip", "PPO ratio clipping (fraction of tokens)", "fraction",
          _keys("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"),
          label_regex=r"clip_ratio/(.+)", needs="`clip_ratio/*_mean`"),
    Panel("kl", "KL to the reference model (β > 0)", "KL", _keys("kl"), needs="`kl`, logged only when β > 0"),
    Panel("entropy", "Token entropy", "nats", _keys("entropy"), needs="`entropy`"),
    Panel("loss", "Training loss", "loss", _keys("loss"), needs="`loss`"),
    Panel("grad_norm", "Gradient norm (before clipping)", "norm", _keys("grad_norm"), needs="`grad_norm`"),
    Panel("learning_rate", "Learning rate", "lr", _keys("learning_rate"), needs="`learning_rate`"),
)


def plan_panels(records: Sequence[dict]) -> tuple[list[tuple[Panel, list[str]]], list[Panel]]:
    """Split ``PANELS`` into (panel, keys to draw) for the metrics this run logged, and the skipped rest."""
    logged = logged_keys(records)
    drawn, skipped = [], []
    for panel in PANELS:
        keys = panel.select(logged)
        (drawn.append((panel, keys)) if keys else skipped.append(panel))
    return drawn, skipped


def _legend_label(panel: Panel, key: str) -> str:
    if panel.label_regex:
        match = re.fullmatch(panel.label_regex, key)
        if match:
            return match.group(1)
    return key


def _new_figure(width: float = 6.4, height: float = 4.0, grid: bool = True):
    # Figure without pyplot: no global state and no GUI backend (renders with Agg). Constrained layout
    # doubles the drawing time, so single charts use fixed margins instead.
    from matplotlib.figure import Figure

    if grid:
        return Figure(figsize=(width, height), layout="constrained")
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.14, right=0.97, top=0.86, bottom=0.13)
    return fig


def _step_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # optimizer steps: no 2.5


def draw_panel(ax, panel: Panel, keys: Sequence[str], records: Sequence[dict]) -> None:
    """Draw one run's ``keys`` on ``ax`` (a line per key, a ±std band where the panel has one)."""
    for key in keys:
        steps, values = series(records, key)
        (line,) = ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=_legend_label(panel, key))
        band_key = panel.bands.get(key)
        if band_key:
            by_step = dict(zip(*series(records, band_key)))
            pairs = [(s, v, by_step[s]) for s, v in zip(steps, values) if s in by_step]
            if pairs:
                ax.fill_between([p[0] for p in pairs], [p[1] - p[2] for p in pairs], [p[1] + p[2] for p in pairs],
                                color=line.get_color(), alpha=0.2, label=f"± {band_key}")
    ax.set_title(panel.title)
    _step_axis(ax)
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    if panel.unit_interval:
        ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small")  # even for one line: it names the key drawn


def panel_figures(history: RunHistory) -> tuple[dict[str, object], list[Panel]]:
    """One matplotlib Figure per drawable panel (keyed by panel name), and the skipped panels."""
    drawn, skipped = plan_panels(history.records)
    figures = {}
    for panel, keys in drawn:
        fig = _new_figure(grid=False)
        draw_panel(fig.add_subplot(), panel, keys, history.records)
        fig.suptitle(history.label, fontsize="small")
        figures[panel.name] = fig
    return figures, skipped


def overview_figure(history: RunHistory):
    """All drawable panels of one run on one grid (the README picture); None if nothing is drawable."""
    drawn, _ = plan_panels(history.records)
    if not drawn:
        return None
    cols = min(3, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig = _new_figure(5.0 * cols, 3.4 * rows)
    for i, (panel, keys) in enumerate(drawn):
        draw_panel(fig.add_subplot(rows, cols, i + 1), panel, keys, history.records)
    fig.suptitle(f"{history.label}: training history")
    return fig


#: Single metrics compared across runs, in this order (then every per-type pass rate any run logged).
COMPARE_KEYS = (
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "olmorl/frac_groups_dropped",
    "completions/mean_length",
    "completions/clipped_ratio",
    "kl",
    "entropy",
    "learning_rate",
)


UNIT_INTERVAL_KEYS = {"frac_reward_zero_std", "olmorl/frac_groups_dropped"}


def comparison_keys(histories: Sequence[RunHistory]) -> list[str]:
    """The metrics the comparison chart draws: ``COMPARE_KEYS`` then per-type pass rates, if any run has them."""
    logged = set().union(*(logged_keys(h.records) for h in histories))
    keys = [k for k in COMPARE_KEYS if k in logged]
    return keys + sorted(k for k in logged if re.fullmatch(PASS_RATE_BY_TYPE, k))


def comparison_figure(histories: Sequence[RunHistory]):
    """One figure, a subplot per shared metric, one line per run labelled with the run's name."""
    keys = comparison_keys(histories)
    if not keys:
        return None
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig = _new_figure(5.0 * cols, 3.4 * rows)
    for i, key in enumerate(keys):
        ax = fig.add_subplot(rows, cols, i + 1)
        for run_index, history in enumerate(histories):
            steps, values = series(history.records, key)
            if steps:
                # A run keeps its colour in every subplot, whichever runs logged the metric.
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=history.label,
                        color=f"C{run_index % 10}")
        if re.fullmatch(PASS_RATE_BY_TYPE, key) or key in UNIT_INTERVAL_KEYS:
            ax.set_ylim(-0.02, 1.02)
        ax.set_title(key)
        _step_axis(ax)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("Runs compared: " + ", ".join(h.label for h in histories))
    return fig


# ----------------------------------------------------------------------------------------- summary


def _fmt_steps(steps: tuple[float, float]) -> str:
    a, b = (int(s) if float(s).is_integer() else s for s in steps)
    return f"{a}" if a == b else f"{a}–{b}"


def _window_table(rows: list[tuple[str, Window]], first_col: str) -> list[str]:
    lines = [
        f"| {first_col} | first {WINDOW} logged steps | last {WINDOW} logged steps | change |",
        "| --- | --- | --- | --- |",
    ]
    for name, w in rows:
        lines.append(
            f"| {name} | {w.first_mean:.3f} (steps {_fmt_steps(w.first_steps)}) | "
            f"{w.last_mean:.3f} (steps {_fmt_steps(w.last_steps)}) | {w.change:+.3f} |"
        )
    return lines


def run_summary(history: RunHistory, heading: str = "##") -> list[str]:
    """Markdown lines for one run: reward first vs last window, pass rates per test type and per file."""
    lines = []
    reward = window_means(*series(history.records, "reward"))
    lines += [f"{heading} Reward", ""]
    if reward is None:
        lines.append("No `reward` was logged.")
    else:
        lines += _window_table([("mean reward", reward)], "metric")
        if reward.overlapping:
            lines.append(f"\nOnly {reward.count} steps logged `reward`: the two windows overlap.")
    for title, regex in (("Pass rate per test type", PASS_RATE_BY_TYPE),
                         ("Pass rate per JSONL file", PASS_RATE_BY_JSONL)):
        rows = []
        for key in sorted(k for k in logged_keys(history.records) if re.fullmatch(regex, k)):
            w = window_means(*series(history.records, key))
            rows.append((re.fullmatch(regex, key).group(1), w))
        if rows:
            lines += ["", f"{heading} {title}", ""]
            lines += _window_table(rows, "type" if "type" in title else "file")
    return lines


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


@dataclass
class ReportResult:
    """What ``write_report`` wrote: the summary, every PNG, and per run the drawn and skipped panels."""

    out_dir: Path
    summary: Path
    images: list[Path]
    drawn: dict[str, list[str]]  # run label -> panel names drawn
    skipped: dict[str, list[str]]  # run label -> panel names skipped (metrics never logged)
    comparison: Path | None = None


def _unique_labels(run_dirs: Sequence[Path]) -> list[str]:
    names = [d.resolve().name for d in run_dirs]
    labels = []
    for i, d in enumerate(run_dirs):
        label = names[i]
        if names.count(label) > 1:
            label = f"{d.resolve().parent.name}_{label}"
        if label in labels:
            label = f"{label}_{i + 1}"
        labels.append(label)
    return labels


def default_out_dir(run_dirs: Sequence[Path]) -> Path:
    """``RUN/report`` for one run; ``<common parent>/report_compare`` for several."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0]) / "report"
    parent = Path(os.path.commonpath([str(Path(d).resolve().parent) for d in run_dirs]))
    return parent / "report_compare"


def write_report(run_dirs: Sequence[Path | str], out_dir: Path | str | None = None) -> ReportResult:
    """Read every run's history, write the PNGs and ``report.md``; see the module docstring for layout."""
    run_dirs = [Path(d) for d in run_dirs]
    if not run_dirs:
        raise ReportError("give at least one run output dir")
    histories = [load_history(d, label) for d, label in zip(run_dirs, _unique_labels(run_dirs))]
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    out_dir.mkdir(parents=True, exist_ok=True)
    several = len(histories) > 1

    images: list[Path] = []
    drawn: dict[str, list[str]] = {}
    skipped: dict[str, list[str]] = {}
    lines = ["# Training report", ""]
    lines += ["| run | history | log records | steps |", "| --- | --- | --- | --- |"]
    for h in histories:
        steps = [r["step"] for r in h.records]
        lines.append(f"| {h.label} | `{h.source}` | {len(h.records)} | {_fmt_steps((min(steps), max(steps)))} |")

    comparison = None
    if several:
        fig = comparison_figure(histories)
        if fig is not None:
            comparison = out_dir / "compare.png"
            fig.savefig(comparison, dpi=100)
            images.append(comparison)
            lines += ["", "## Runs compared", "", "![runs compared](compare.png)"]

    for h in histories:
        run_out = out_dir / h.label if several else out_dir
        run_out.mkdir(parents=True, exist_ok=True)
        figures, skipped_panels = panel_figures(h)
        overview = overview_figure(h)
        run_images = []
        if overview is not None:
            overview.savefig(run_out / "overview.png", dpi=90)
            run_images.append(("overview", run_out / "overview.png"))
        for name, fig in figures.items():
            fig.savefig(run_out / f"{name}.png", dpi=100)
            run_images.append((name, run_out / f"{name}.png"))
        images += [p for _, p in run_images]
        drawn[h.label] = list(figures)
        skipped[h.label] = [p.name for p in skipped_panels]

        heading = "###" if several else "##"
        lines += [""]
        if several:
            lines += [f"## Run `{h.label}` ({h.run_dir})", ""]
        lines += run_summary(h, heading)
        lines += ["", f"{heading} Plots", ""]
        lines += [f"- [{name}]({_relative(path, out_dir)})" for name, path in run_images]
        if overview is not None:
            lines += ["", f"![{h.label} overview]({_relative(run_out / 'overview.png', out_dir)})"]
        if skipped_panels:
            lines += ["", "Skipped panels (metrics never logged): " + "; ".join(
                f"{p.name} ({p.needs})" for p in skipped_panels) + "."]
    summary = out_dir / "report.md"
    summary.write_text("\n".join(lines) + "\n")
    return ReportResult(out_dir, summary, images, drawn, skipped, comparison)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.report",
        description=(
            "Plot a GRPO/OlmoRL run's logged history (reward and its std, bench pass rate per test type and "
            "per JSONL file, zero-signal groups, completion length and clipped ratio, KL when β > 0, "
            "learning rate, ...) as PNGs, with a Markdown summary (report.md) comparing the mean reward "
            f"and pass rates of the first and last {WINDOW} logged steps. Several dirs: also compare.png, "
            "one line per run."
        ),
        epilog=f"History: OUTPUT_DIR/{METRICS_FILE}, else the newest checkpoint-*/trainer_state.json log_history.",
    )
    parser.add_argument("run_dirs", nargs="+", metavar="OUTPUT_DIR", help="training output dir(s); or evaluation "
                        "folders (one, or two: before and after) or a compare.json of python -m olmocr_rl.evaluate")
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where to write (default: OUTPUT_DIR/report for one run, <common parent>/report_compare for several)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from olmocr_rl.evaluation.plots import is_evaluation, write_evaluation_report

    evaluations = [is_evaluation(path) for path in args.run_dirs]
    if any(evaluations):
        if not all(evaluations):
            parser.exit(2, "report: error: give training runs or evaluations (folders of python -m olmocr_rl.evaluate, "
                           "a compare.json), not both\n")
        out = Path(args.out) if args.out else default_out_dir([Path(p) for p in args.run_dirs])
        try:
            written = write_evaluation_report(args.run_dirs, out)
        except ValueError as err:
            parser.exit(2, f"report: error: {err}\n")
        print(f"report: wrote {', '.join(str(p) for p in written)}")
        return 0
    try:
        result = write_report(args.run_dirs, args.out)
    except ReportError as err:
        parser.exit(2, f"report: error: {err}\n")
    print(f"report: wrote {result.summary} and {len(result.images)} PNG(s) in {result.out_dir}")
    for label, names in result.skipped.items():
        if names:
            print(f"report: {label}: skipped (not logged): {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
