"""The charts of evaluations: bars per JSONL file and per test type with their 95 % intervals (``--compare``'s PNG,
and ``python -m olmocr_rl.report`` on evaluations, :mod:`olmocr_rl.evaluation.plots`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from olmocr_rl.evaluation.leaderboard import COLUMNS


def _bars(ax, names: Sequence[str], sides: Sequence[tuple[str, list[float], list[list[float]]]]) -> None:
    """Grouped bars (one group per name, one bar per side) with asymmetric interval whiskers."""
    width = 0.8 / len(sides)
    for n, (label, values, cis) in enumerate(sides):
        offset = (n - (len(sides) - 1) / 2) * width
        # with repeats redrawn the point can lie outside its percentile interval: no whisker below zero
        low = [100 * max(0.0, v - ci[0]) for v, ci in zip(values, cis)]
        high = [100 * max(0.0, ci[1] - v) for v, ci in zip(values, cis)]
        ax.bar([i + offset for i in range(len(names))], [100 * v for v in values], width=width, yerr=[low, high],
               capsize=3, label=label)
    ax.set_xticks(range(len(names)), names, rotation=25, ha="right")
    ax.set_ylabel("pass rate (%)")
    ax.legend(fontsize=7)


def _figure(panels: int, width: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(width, 3.8), squeeze=False)
    return plt, fig, list(axes[0])


def _label(name: str) -> str:
    """A row's label: a JSONL by its leaderboard column name, a type by its name."""
    if name == "overall_without_headers_footers":
        return "overall w/o H&F"
    kind, _, short = name.partition(":")
    return COLUMNS.get(short, short) if kind == "jsonl" else (short or kind)


def compare_png(path: Path, labels: Sequence[str], rows: dict, title: str) -> None:
    """Three panels: A and B per JSONL file and overall, A and B per test type (intervals), B − A per type."""
    groups = [n for n in rows if n.startswith("jsonl:")] + ["overall", "overall_without_headers_footers"]
    kinds = [n for n in rows if n.startswith("type:")]
    plt, fig, (left, middle, right) = _figure(3, max(11.0, 0.9 * (len(groups) + 2 * len(kinds))))
    for ax, names in ((left, groups), (middle, kinds)):
        _bars(ax, [_label(n) for n in names],
              [(labels[0], [rows[n]["a"] for n in names], [rows[n]["a_ci"] for n in names]),
               (labels[1], [rows[n]["b"] for n in names], [rows[n]["b_ci"] for n in names])])
    diffs = [100 * rows[n]["diff"] for n in kinds]
    errors = [[max(0.0, d - 100 * rows[n]["diff_ci"][0]) for d, n in zip(diffs, kinds)],
              [max(0.0, 100 * rows[n]["diff_ci"][1] - d) for d, n in zip(diffs, kinds)]]
    right.errorbar(range(len(kinds)), diffs, yerr=errors, fmt="o", capsize=3)
    right.axhline(0, color="grey", linewidth=0.8)
    right.set_xticks(range(len(kinds)), [_label(n) for n in kinds], rotation=25, ha="right")
    right.set_ylabel("B - A (points, 95% interval)")
    left.set_title(f"{title}: per JSONL", fontsize=9)
    middle.set_title(f"{title}: per test type", fontsize=9)
    right.set_title("B - A per test type", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def evaluation_png(path: Path, boards: dict[str, dict]) -> None:
    """One evaluation: per JSONL file and overall, and per test type, one bar per score (model only, pipeline)."""
    first = next(iter(boards.values()))
    groups, kinds = list(first["per_jsonl"]), list(first["per_type"])
    plt, fig, (left, right) = _figure(2, max(9.0, 0.8 * (len(groups) + len(kinds) + 2)))
    overall = ("overall", "overall_without_headers_footers")
    _bars(left, [COLUMNS.get(g, g) for g in groups] + ["overall", "overall w/o H&F"],
          [(title, [b["per_jsonl"][g]["pass_rate"] for g in groups] + [b[o]["pass_rate"] for o in overall],
            [b["per_jsonl"][g]["ci"] for g in groups] + [b[o]["ci"] for o in overall]) for title, b in boards.items()])
    _bars(right, kinds, [(title, [b["per_type"][k]["pass_rate"] for k in kinds], [b["per_type"][k]["ci"] for k in kinds])
                         for title, b in boards.items()])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
