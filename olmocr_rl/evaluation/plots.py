"""Plots of evaluations: ``--compare``'s PNG, and ``python -m olmocr_rl.report`` on evaluation folders or on a
``compare.json`` (per JSONL file and per test type, before and after, each with its 95 % interval).

    python -m olmocr_rl.report outputs/eval/base__bench outputs/eval/run__bench   # before/after, paired bootstrap
    python -m olmocr_rl.report outputs/eval/run__bench/compare.json                # what --compare wrote
    python -m olmocr_rl.report outputs/eval/run__bench                             # one evaluation's rows
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from olmocr_rl.evaluation.charts import compare_png, evaluation_png
from olmocr_rl.evaluation.leaderboard import COLUMNS, plus_minus


def is_evaluation(path: str | Path) -> bool:
    """An evaluation folder (evaluation.json) or a compare.json / saved ``--compare --json`` output."""
    path = Path(path)
    return (path / "evaluation.json").is_file() or (path.is_file() and path.suffix == ".json")


def _boards(summary: dict) -> dict[str, dict]:
    model_only = summary.get("model_only") or {}
    boards = {"model only": model_only.get("leaderboard") or summary.get("leaderboard")}
    if summary.get("protocol") == "olmocr-pipeline" and summary.get("leaderboard"):
        boards["pipeline"] = summary["leaderboard"]
    if not boards["model only"]:
        raise ValueError(f"{summary.get('outputs')}: evaluation.json has no leaderboard rows (written by an earlier "
                         "version); run the evaluation again")
    return boards


def write_evaluation_report(paths: Sequence[str | Path], out_dir: Path) -> list[Path]:
    """PNGs and report.md for one evaluation folder, two (before and after: a paired comparison) or a compare.json.
    Returns the files written; ValueError (one line) for inputs it cannot read."""
    from olmocr_rl.evaluation.compare import compare, compare_json, format_compare
    from olmocr_rl.evaluation.common import EvaluateError

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [Path(p) for p in paths]
    written, lines = [], ["# Evaluation report", ""]
    if len(paths) == 1 and (paths[0] / "evaluation.json").is_file():
        summary = json.loads((paths[0] / "evaluation.json").read_text(encoding="utf-8"))
        boards = _boards(summary)
        evaluation_png(out_dir / "evaluation.png", boards)
        written.append(out_dir / "evaluation.png")
        lines += [f"`{paths[0]}`: {summary.get('model')} on {len(summary.get('pages', []))} pages, --protocol "
                  f"{summary.get('protocol')}", "", "| row | " + " | ".join(boards) + " |",
                  "|---|" + "---|" * len(boards)]
        first = next(iter(boards.values()))
        for name in first["per_jsonl"]:
            lines.append(f"| {COLUMNS.get(name, name)} | " + " | ".join(
                plus_minus(b["per_jsonl"][name]["pass_rate"], b["per_jsonl"][name]["ci"]) for b in boards.values()) + " |")
        for name, title in (("overall", "overall"), ("overall_without_headers_footers", "overall w/o H&F")):
            lines.append(f"| {title} | " + " | ".join(plus_minus(b[name]["pass_rate"], b[name]["ci"])
                                                     for b in boards.values()) + " |")
        lines += ["", "![per JSONL and per type](evaluation.png)"]
    else:
        if len(paths) == 1:
            result = compare_json(paths[0])
        elif len(paths) == 2 and all((p / "evaluation.json").is_file() for p in paths):
            try:
                result = compare([str(p) for p in paths], png=str(out_dir / "compare.png"))
            except EvaluateError as exc:
                raise ValueError(str(exc)) from None
        else:
            raise ValueError("give one evaluation folder, two (before and after), or one compare.json")
        rows = (result.get("model_only") or {}).get("rows") or result["rows"]
        compare_png(out_dir / "per_type.png", result["labels"], rows,
                    "model only" if result.get("model_only") else "as written")
        written.append(out_dir / "per_type.png")
        lines += ["```", format_compare(result), "```", "", "![before and after, per type](per_type.png)"]
    (out_dir / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [out_dir / "report.md", *written]
