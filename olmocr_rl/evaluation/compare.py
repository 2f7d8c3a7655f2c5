"""``python -m olmocr_rl.evaluate --compare EVAL_A EVAL_B``: two evaluations of the same tests side by side.

Per JSONL file, per test type and overall (the mean of the per-JSONL pass rates, olmOCR-bench's headline): A, B,
B − A, and a paired bootstrap 95 % interval of B − A over pages (each resample draws the pages with replacement and
takes every test of a drawn page, for A and B alike); where a page has several repeats, each resample also redraws
each test's repeats (with replacement, from its passing share) and applies the majority rule again. The headline
prints as olmOCR-bench prints its own: mean ± half the 95 % interval. A PNG of the table goes beside it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from olmocr_rl.evaluation.common import EvaluateError
from olmocr_rl.evaluation.folder import read_evaluation

DEFAULT_RESAMPLES = 1000


def load_pair(folders: Sequence[str]) -> tuple[list[dict], list[dict]]:
    """The two evaluations' summaries and scores; EvaluateError (one line) when one is not an evaluation folder or
    the two did not score the same tests under the same rule."""
    summaries, scores = [], []
    for flag, folder in zip(("--compare EVAL_A", "--compare EVAL_B"), folders):
        try:
            summary, score = read_evaluation(folder, flag)
        except ValueError as exc:
            raise EvaluateError(str(exc)) from None
        summaries.append(summary)
        scores.append(score)
    a, b = (set(score["tests"]) for score in scores)
    if a != b:
        only_a, only_b = sorted(a - b), sorted(b - a)
        raise EvaluateError(
            f"--compare {folders[0]} {folders[1]}: different test sets ({len(a)} tests of {summaries[0]['bench']} "
            f"vs {len(b)} of {summaries[1]['bench']}; e.g. only in A: {only_a[:1] or '-'}, only in B: "
            f"{only_b[:1] or '-'}); compare evaluations of the same bench with the same page selection")
    if scores[0]["scoring"] != scores[1]["scoring"]:
        raise EvaluateError(f"--compare: A was scored under {scores[0]['scoring']}, B under {scores[1]['scoring']}; "
                            "evaluate both with the same --scoring")
    return summaries, scores


def bootstrap(scores: Sequence[dict], resamples: int, seed: int) -> dict:
    """Per row (``overall``, ``jsonl:<name>``, ``type:<name>``): A's and B's point values, and the 2.5/97.5
    percentiles of A, B and B − A over ``resamples`` paired resamples of pages (and repeats)."""
    import numpy as np

    ids = sorted(scores[0]["tests"])
    tests = [[score["tests"][i] for i in ids] for score in scores]
    pages = sorted({t["page"] for t in tests[0]})
    page_of = np.array([pages.index(t["page"]) for t in tests[0]])
    groups = sorted({t["group"] for t in tests[0]})
    kinds = sorted({t["type"] for t in tests[0]})
    group_hot = np.array([[t["group"] == g for g in groups] for t in tests[0]], dtype=float)  # T x G
    kind_hot = np.array([[t["type"] == k for k in kinds] for t in tests[0]], dtype=float)  # T x K
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(len(pages), [1 / len(pages)] * len(pages), size=resamples)[:, page_of]  # B x T

    def rows(passed, w):
        by_group = (w * passed) @ group_hot / np.maximum(w @ group_hot, 1e-12)
        present = (w @ group_hot) > 0  # a group none of whose pages was drawn does not count in the mean
        overall = (by_group * present).sum(axis=-1) / np.maximum(present.sum(axis=-1), 1)
        by_kind = (w * passed) @ kind_hot / np.maximum(w @ kind_hot, 1e-12)
        return overall, by_group, by_kind

    point, draws = [], []
    for side in tests:
        passed = np.array([t["passed"] for t in side], dtype=float)
        repeats = np.array([max(t["repeats"], 1) for t in side])
        share = np.array([t["repeat_passes"] for t in side]) / repeats
        point.append(rows(passed, np.ones(len(side))))
        if repeats.max() > 1:  # redraw each test's repeats, majority rule again
            again = rng.binomial(np.broadcast_to(repeats, (resamples, len(side))), share)
            passed = (again > repeats / 2).astype(float)
        draws.append(rows(passed, weights))
    names = ["overall"] + [f"jsonl:{g}" for g in groups] + [f"type:{k}" for k in kinds]

    def column(values, index):
        overall, by_group, by_kind = values
        flat = [overall] + [by_group[..., j] for j in range(len(groups))] + [by_kind[..., j] for j in range(len(kinds))]
        return flat[index]

    out = {}
    for index, name in enumerate(names):
        a_draw, b_draw = column(draws[0], index), column(draws[1], index)
        out[name] = {
            "a": float(column(point[0], index)), "b": float(column(point[1], index)),
            "a_ci": [float(v) for v in np.percentile(a_draw, [2.5, 97.5])],
            "b_ci": [float(v) for v in np.percentile(b_draw, [2.5, 97.5])],
            "diff": float(column(point[1], index) - column(point[0], index)),
            "diff_ci": [float(v) for v in np.percentile(b_draw - a_draw, [2.5, 97.5])],
        }
    return out


def headline(value: float, ci: Sequence[float]) -> str:
    """olmOCR-bench's form: mean ± half the 95 % interval, in percent."""
    return f"{100 * value:.1f} ± {100 * (ci[1] - ci[0]) / 2:.1f}"


def format_table(labels: Sequence[str], rows: dict, pages: int, tests: int, resamples: int) -> str:
    width = max(len(name.split(":", 1)[-1]) for name in rows) + 2
    lines = [f"A = {labels[0]}", f"B = {labels[1]}",
             f"{tests} tests on {pages} pages; 95% intervals from {resamples} paired bootstrap resamples of pages", ""]
    for section, prefix in (("JSONL", "jsonl:"), ("type", "type:")):
        lines.append(f"{section:<{width}} {'A':>7} {'B':>7} {'B - A':>7}   95% interval of B - A")
        for name, row in rows.items():
            if name.startswith(prefix):
                lines.append(f"{name[len(prefix):]:<{width}} {100 * row['a']:6.1f}% {100 * row['b']:6.1f}% "
                             f"{100 * row['diff']:+7.1f}   [{100 * row['diff_ci'][0]:+.1f}, {100 * row['diff_ci'][1]:+.1f}]")
        lines.append("")
    overall = rows["overall"]
    lines.append(f"overall (mean of per-JSONL pass rates): A {headline(overall['a'], overall['a_ci'])}, "
                 f"B {headline(overall['b'], overall['b_ci'])}, B - A {100 * overall['diff']:+.1f} "
                 f"[{100 * overall['diff_ci'][0]:+.1f}, {100 * overall['diff_ci'][1]:+.1f}]")
    return "\n".join(lines)


def write_png(path: Path, labels: Sequence[str], rows: dict) -> None:
    """Bars of A and B per JSONL file and overall, each with its 95 % interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in rows if n.startswith("jsonl:")] + ["overall"]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names)), 3.6))
    for offset, side, label in ((-0.2, "a", labels[0]), (0.2, "b", labels[1])):
        values = [100 * rows[n][side] for n in names]
        # with repeats redrawn the point can lie outside its percentile interval: no bar below zero
        low = [100 * max(0.0, rows[n][side] - rows[n][f"{side}_ci"][0]) for n in names]
        high = [100 * max(0.0, rows[n][f"{side}_ci"][1] - rows[n][side]) for n in names]
        ax.bar([i + offset for i in range(len(names))], values, width=0.4, yerr=[low, high], capsize=3, label=label)
    ax.set_xticks(range(len(names)), [n.split(":", 1)[-1] for n in names], rotation=20)
    ax.set_ylabel("pass rate (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare(folders: Sequence[str], *, png: str | None = None, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    """Compare two evaluation folders (module docstring); writes the PNG; returns the table as a dict."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 10:
        raise EvaluateError(f"--bootstrap must be an integer >= 10, got {resamples!r}")
    summaries, scores = load_pair(folders)
    rows = bootstrap(scores, resamples, seed)
    labels = [f"{s['model']} ({s['backend']}, {s['protocol']}, {Path(f).name})" for s, f in zip(summaries, folders)]
    png_path = Path(png) if png else Path(folders[1]) / "compare.png"
    png_path.parent.mkdir(parents=True, exist_ok=True)
    write_png(png_path, labels, rows)
    pages = len({t["page"] for t in scores[0]["tests"].values()})
    return {"a": str(folders[0]), "b": str(folders[1]), "labels": labels, "tests": len(scores[0]["tests"]),
            "pages": pages, "resamples": resamples, "seed": seed, "rows": rows, "png": str(png_path)}


def compare_main(folders: Sequence[str], *, png: str | None, resamples: int, seed: int, as_json: bool) -> int:
    result = compare(folders, png=png, resamples=resamples, seed=seed)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(format_table(result["labels"], result["rows"], result["pages"], result["tests"], resamples))
        print(f"plot: {result['png']}", file=sys.stderr)
    return 0
