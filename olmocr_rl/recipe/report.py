"""The recipe's ``report.md``: the warm start on the held-out pages, each GRPO run's gain over it with its 95 %
interval (paired bootstrap over pages, model-only scoring), per test type, the sign-flipped control, the soups
against their seeds' mean, and the time of every stage; with a plot of the gains.

    python -c "from olmocr_rl.recipe.report import write_report; from olmocr_rl.recipe.run import Plan; \\
        write_report(Plan(out='outputs/recipe'))"          # (the recipe's last stage does this)
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["write_report", "arm_rows", "soup_check"]

TYPES = ("present", "absent", "order", "table", "math", "footnote", "format", "baseline")


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _interval(row: dict) -> str:
    low, high = row["diff_ci"]
    return f"{100 * row['diff']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def _sampling(plan) -> str:
    if plan.eval_temperature == 0:
        return "one greedy transcription a page"
    return (f"{plan.eval_samples} transcriptions a page sampled at temperature {plan.eval_temperature}; a test passes "
            "when most of them pass it")


def _side(interval) -> str:
    low, high = interval
    return "above 0" if low > 0 else "below 0" if high < 0 else "spans 0"


def arm_rows(out: Path, names: list[str]) -> list[dict]:
    """Per compared run: its model-only overall before/after, the gain and its interval, and per-type gains."""
    rows = []
    for name in names:
        compared = _load(out / "compare" / f"{name}.json")
        if compared is None:
            continue
        table = compared["model_only"]["rows"]
        overall = table["overall"]
        rows.append({"name": name, "before": overall["a"], "after": overall["b"], "diff": overall["diff"],
                     "diff_ci": overall["diff_ci"], "interval": _side(overall["diff_ci"]),
                     "types": {t: table[f"type:{t}"] for t in TYPES if f"type:{t}" in table}})
    return rows


def soup_check(rows: list[dict], algorithm: str, seeds) -> dict | None:
    """The soup of ``algorithm``'s seeds against the mean of the seeds (olmOCR 2: the soup is at least as good)."""
    by_name = {row["name"]: row for row in rows}
    seeded = [by_name.get(f"{algorithm}-s{seed}") for seed in seeds]
    soup = by_name.get(f"soup-{algorithm}")
    if soup is None or any(row is None for row in seeded):
        return None
    mean = sum(row["after"] for row in seeded) / len(seeded)
    return {"algorithm": algorithm, "soup": soup["after"], "seeds_mean": mean, "holds": soup["after"] >= mean}


def _plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    types = [t for t in TYPES if any(t in row["types"] for row in rows)] + ["overall"]
    fig, ax = plt.subplots(figsize=(min(13.0, max(6.4, 0.4 * len(types) * max(1, len(rows)) / 3 + 3)), 4.6))
    width = 0.8 / max(1, len(rows))
    for k, row in enumerate(rows):
        values, lows, highs = [], [], []
        for t in types:
            cell = row if t == "overall" else row["types"].get(t)
            value = cell["diff"] if cell else 0.0
            low, high = cell["diff_ci"] if cell else (0.0, 0.0)
            values.append(100 * value)
            lows.append(100 * (value - low))
            highs.append(100 * (high - value))
        xs = [i + (k - (len(rows) - 1) / 2) * width for i in range(len(types))]
        ax.bar(xs, values, width, yerr=[lows, highs], capsize=2, label=row["name"])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(types)), types)
    ax.set_ylabel("held-out pass rate, after - warm start (points)")
    ax.set_title("GRPO's gain on held-out pages, model-only, 95 % interval over pages", fontsize="medium")
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(plan) -> Path:
    """Write ``<out>/report.md`` (and ``<out>/gains.png``) from what the recipe's stages left; returns its path."""
    out = Path(plan.out)
    state = _load(out / "recipe_state.json") or {"stages": {}}
    sft = _load(out / "models" / "sft" / "olmocr_rl_sft.json") or {}
    warm = _load(out / "eval" / "sft.json")
    names = [name for name, _ in plan.arms] + [f"soup-{a}" for a in plan.algorithms if len(plan.seeds) > 1]
    rows = arm_rows(out, names)
    lines = ["# The CPU recipe: GRPO on synthetic unit tests, measured on held-out pages", "",
             f"Folder `{out}`; {plan.train_pages} train pages, {plan.heldout_pages} held-out pages (disjoint words "
             f"and numbers); every number below is the **model-only** olmOCR-bench score on the held-out pages "
             f"({_sampling(plan)}), in points.", ""]
    if warm is not None:
        model_only = warm["model_only"]
        lines += ["## The warm start", "",
                  f"SFT: {sft.get('seconds', 0) / 60:.1f} min, final {sft.get('final', {})}.", "",
                  "| | overall | " + " | ".join(t for t in TYPES if t in model_only["per_type"]) + " |",
                  "|---|---|" + "---|" * sum(t in model_only["per_type"] for t in TYPES),
                  f"| held-out | {_pct(model_only['overall_pass_rate'])} | " + " | ".join(
                      _pct(model_only["per_type"][t]["pass_rate"]) for t in TYPES if t in model_only["per_type"])
                  + " |", ""]
    if rows:
        lines += ["## GRPO against its warm start", "",
                  "| run | warm start | after | gain [95 % interval] | the interval |", "|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {_pct(r['before'])} | {_pct(r['after'])} | {_interval(r)} | {r['interval']} |"
                  for r in rows]
        types = [t for t in TYPES if any(t in r["types"] for r in rows)]
        lines += ["", "Per test type (gain [95 % interval]):", "",
                  "| run | " + " | ".join(types) + " |", "|---|" + "---|" * len(types)]
        lines += [f"| {r['name']} | " + " | ".join(_interval(r["types"][t]) if t in r["types"] else "-"
                                                    for t in types) + " |" for r in rows]
        soups = [s for s in (soup_check(rows, a, plan.seeds) for a in plan.algorithms) if s]
        if soups:
            lines += ["", "Souping (olmOCR 2: the uniform soup of the seeds scores at least their mean):", "",
                      "| algorithm | soup | mean of the seeds | holds |", "|---|---|---|---|"]
            lines += [f"| {s['algorithm']} | {_pct(s['soup'])} | {_pct(s['seeds_mean'])} | "
                      f"{'yes' if s['holds'] else 'no'} |" for s in soups]
        if _plot(rows, out / "gains.png"):
            lines += ["", "![gains per test type](gains.png)"]
    times = state.get("stages", {})
    if times:
        lines += ["", "## Time per stage", "", "| stage | seconds |", "|---|---|"]
        lines += [f"| {name} | {info.get('seconds', 0):.0f} |" for name, info in times.items()]
        lines += [f"| all | {sum(i.get('seconds', 0) for i in times.values()):.0f} |"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    (out / "report.json").write_text(json.dumps({"arms": rows, "soups": [
        s for s in (soup_check(rows, a, plan.seeds) for a in plan.algorithms) if s]}, indent=2) + "\n")
    return path
