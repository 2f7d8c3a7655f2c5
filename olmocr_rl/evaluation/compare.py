"""``python -m olmocr_rl.evaluate --compare EVAL_A EVAL_B``: two evaluations of the same tests side by side.

Two scores, each per JSONL file, per test type and overall (olmOCR-bench's headline, with and without Headers &
Footers): the **model-only** score (what the model wrote; a text-layer fallback of olmOCR's pipeline read as the
model's last usable answer, or empty) and the score **as written** (under ``--protocol olmocr-pipeline`` the
pipeline's, fallbacks included, as olmOCR publishes; under ``single`` the same as the model-only one). For each: A,
B, B − A and a paired bootstrap 95 % interval of B − A over pages (:mod:`olmocr_rl.evaluation.leaderboard`). The
headline names each side's fallbacks, failed requests and missing outputs, and says so in one line where the sides
differ in them. A PNG and ``compare.json`` (the result) go beside each other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from olmocr_rl.evaluation.charts import compare_png
from olmocr_rl.evaluation.common import EvaluateError
from olmocr_rl.evaluation.folder import read_evaluation, write_json
from olmocr_rl.evaluation.leaderboard import DEFAULT_RESAMPLES, OVERALLS, paired_rows, plus_minus

#: Each test's keys in scores.json, and their types.
TEST_KEYS = {"group": str, "type": str, "passed": bool, "repeats": int, "repeat_passes": int, "page": str}


def check_scores(scores, where: str) -> None:
    """ValueError (one line naming the file and the first problem) for a scores file of the wrong shape."""
    if not isinstance(scores, dict) or not isinstance(scores.get("tests"), dict) or not isinstance(
            scores.get("scoring"), str):
        raise ValueError(f"{where}: malformed (expected an object with 'scoring' and a 'tests' object of test id -> "
                         "result); write it again with python -m olmocr_rl.evaluate")
    for test_id, test in scores["tests"].items():
        for key, kind in TEST_KEYS.items():
            if not isinstance(test, dict) or not isinstance(test.get(key), kind):
                raise ValueError(f"{where}: malformed: test {test_id!r} has no {kind.__name__} {key!r}; write it again "
                                 "with python -m olmocr_rl.evaluate")


def load_side(folder: str, flag: str) -> dict:
    """One evaluation: its summary, its scores as written, and its model-only scores (None where not recorded)."""
    try:
        summary, scores, model_scores = read_evaluation(folder, flag)
        check_scores(scores, f"{flag} {Path(folder) / 'scores.json'}")
        if model_scores is not None:
            check_scores(model_scores, f"{flag} {Path(folder) / 'scores_model_only.json'}")
    except ValueError as exc:
        raise EvaluateError(str(exc)) from None
    if not isinstance(summary, dict):
        raise EvaluateError(f"{flag} {Path(folder) / 'evaluation.json'}: malformed (expected an object)")
    if model_scores is None and summary.get("protocol", "single") == "single":
        model_scores = scores  # one pass: what was written is the model's
    return {"summary": summary, "scores": scores, "model_scores": model_scores}


def load_pair(folders: Sequence[str]) -> list[dict]:
    """Both sides; EvaluateError (one line) when one is not an evaluation folder or the two did not score the same
    tests under the same rule."""
    sides = [load_side(folder, flag) for folder, flag in zip(folders, ("--compare EVAL_A", "--compare EVAL_B"))]
    a, b = (set(side["scores"]["tests"]) for side in sides)
    if a != b:
        only_a, only_b = sorted(a - b), sorted(b - a)
        raise EvaluateError(
            f"--compare {folders[0]} {folders[1]}: different test sets ({len(a)} tests of "
            f"{sides[0]['summary'].get('bench')} vs {len(b)} of {sides[1]['summary'].get('bench')}; e.g. only in A: "
            f"{only_a[:1] or '-'}, only in B: {only_b[:1] or '-'}); compare evaluations of the same bench with the "
            "same page selection")
    rules = [side["scores"]["scoring"] for side in sides]
    if rules[0] != rules[1]:
        raise EvaluateError(f"--compare: A was scored under {rules[0]}, B under {rules[1]}; evaluate both with the "
                            "same --scoring")
    return sides


def side_counts(side: dict) -> dict:
    """What a side's headline names: protocol, fallbacks, failed requests (of requests), missing outputs."""
    summary = side["summary"]
    return {"protocol": summary.get("protocol", "single"), "model": summary.get("model"),
            "fallbacks": summary.get("fallbacks", (summary.get("pipeline") or {}).get("fallbacks", 0)),
            "failed_requests": summary.get("failed_requests", 0), "requests": summary.get("requests"),
            "missing_outputs": len(side["scores"].get("missing_outputs") or []),
            "model_only_recorded": side["model_scores"] is not None}


def difference_notes(counts: Sequence[dict]) -> list[str]:
    """One line per count the two sides differ in (what the scores as written then credit or charge)."""
    a, b = counts
    notes = []
    if a["fallbacks"] != b["fallbacks"]:
        notes.append(f"the sides differ in text-layer fallbacks (A {a['fallbacks']}, B {b['fallbacks']}): the "
                     "scores as written read those pages from the PDF's own text layer, not from the model; compare "
                     "the models by the model-only score")
    if a["failed_requests"] != b["failed_requests"]:
        notes.append(f"the sides differ in failed requests (A {a['failed_requests']}, B {b['failed_requests']}): a "
                     "failed request's tests fail (or, under the pipeline, it is a failed attempt), which is the "
                     "backend's doing, not the model's")
    if a["missing_outputs"] != b["missing_outputs"]:
        notes.append(f"the sides differ in pages without an output (A {a['missing_outputs']}, B "
                     f"{b['missing_outputs']}): every test of such a page fails")
    for name, side in zip("AB", counts):
        if not side["model_only_recorded"]:
            notes.append(f"{name} has no model-only score (an olmocr-pipeline evaluation of an earlier version): only "
                         "the scores as written are compared")
    return notes


def compare(folders: Sequence[str], *, png: str | None = None, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    """Compare two evaluation folders (module docstring); writes the PNG and compare.json; returns the result."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 10:
        raise EvaluateError(f"--bootstrap must be an integer >= 10, got {resamples!r}")
    sides = load_pair(folders)
    rows = paired_rows([side["scores"] for side in sides], resamples, seed)
    model_only = None
    if all(side["model_scores"] is not None for side in sides):
        same = all(side["model_scores"] is side["scores"] for side in sides)
        model_only = {"rows": rows if same else paired_rows([side["model_scores"] for side in sides], resamples, seed),
                      "same_as_rows": same}
    counts = [side_counts(side) for side in sides]
    labels = [f"{s['summary'].get('model')} ({s['summary'].get('backend')}, {s['summary'].get('protocol')}, "
              f"{Path(f).name})" for s, f in zip(sides, folders)]
    png_path = Path(png) if png else Path(folders[1]) / "compare.png"
    png_path.parent.mkdir(parents=True, exist_ok=True)
    tests = sides[0]["scores"]["tests"]
    result = {"a": str(folders[0]), "b": str(folders[1]), "labels": labels, "tests": len(tests),
              "pages": len({t["page"] for t in tests.values()}), "resamples": resamples, "seed": seed,
              "rows": rows, "model_only": model_only, "sides": counts, "notes": difference_notes(counts),
              "png": str(png_path), "json": str(png_path.with_suffix(".json"))}
    compare_png(png_path, labels, (model_only or {}).get("rows") or rows,
                "model only" if model_only else "as written")
    write_json(png_path.with_suffix(".json"), result)
    return result


def _table(rows: dict) -> list[str]:
    width = max(len(name.split(":", 1)[1]) for name in rows if ":" in name) + 2
    lines = []
    for section, prefix in (("JSONL", "jsonl:"), ("type", "type:")):
        lines.append(f"{section:<{width}} {'A':>7} {'B':>7} {'B - A':>7}   95% interval of B - A")
        for name, row in rows.items():
            if name.startswith(prefix):
                lines.append(f"{name[len(prefix):]:<{width}} {100 * row['a']:6.1f}% {100 * row['b']:6.1f}% "
                             f"{100 * row['diff']:+7.1f}   [{100 * row['diff_ci'][0]:+.1f}, "
                             f"{100 * row['diff_ci'][1]:+.1f}]")
        lines.append("")
    for name, title in zip(OVERALLS, ("overall (mean of per-JSONL pass rates)", "overall without Headers & Footers")):
        row = rows[name]
        lines.append(f"{title}: A {plus_minus(row['a'], row['a_ci'])}, B {plus_minus(row['b'], row['b_ci'])}, "
                     f"B - A {100 * row['diff']:+.1f} [{100 * row['diff_ci'][0]:+.1f}, {100 * row['diff_ci'][1]:+.1f}]")
    return lines


def format_compare(result: dict) -> str:
    """The human report: who A and B are, each side's fallbacks, failures and missing outputs, the notes, then the
    model-only table and the one as written (one table where they are the same)."""
    lines = [f"A = {result['labels'][0]}", f"B = {result['labels'][1]}"]
    for name, side in zip("AB", result.get("sides") or []):
        requests = f" of {side['requests']}" if side.get("requests") is not None else ""
        lines.append(f"{name}: --protocol {side['protocol']}; text-layer fallbacks {side['fallbacks']}, failed "
                     f"requests {side['failed_requests']}{requests}, pages without output {side['missing_outputs']}")
    lines += [f"note: {line}" for line in result.get("notes") or []]
    lines.append(f"{result['tests']} tests on {result['pages']} pages; 95% intervals from {result['resamples']} paired "
                 "bootstrap resamples of pages")
    model_only = result.get("model_only")
    if model_only and model_only["same_as_rows"]:
        lines += ["", "== model only (= as written: neither side used olmOCR's pipeline)", *_table(result["rows"])]
        return "\n".join(lines)
    if model_only:
        lines += ["", "== model only (the model's answers; a fallback page read as its last usable answer, or empty)",
                  *_table(model_only["rows"])]
    lines += ["", "== as written (olmOCR's pipeline score where a side used it: text-layer fallbacks included)",
              *_table(result["rows"])]
    return "\n".join(lines)


def compare_json(path: str | Path) -> dict:
    """A compare.json (or ``--compare --json`` output saved to a file); ValueError when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict) or "labels" not in data:
        raise ValueError(f"{path}: not the output of python -m olmocr_rl.evaluate --compare (no 'rows' and 'labels')")
    return data
