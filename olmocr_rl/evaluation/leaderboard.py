"""Bootstrap intervals over pages for one evaluation (its leaderboard rows) or two (``--compare``'s B − A).

Rows, for each score: ``overall`` (the mean of the per-JSONL pass rates, olmOCR-bench's headline),
``overall_without_headers_footers`` (the same mean without ``headers_footers.jsonl``: many published overalls leave
that category out), one per JSONL file (``jsonl:<name>``) and one per test type (``type:<name>``). Each resample draws
the pages with replacement (every test of a drawn page comes with it; for two evaluations the same pages on both
sides) and recomputes each row; a JSONL none of whose pages was drawn does not count in that resample's overall.
Where pages have several repeats, each resample also redraws each test's repeats from its passing share and applies
the majority rule again (tests of one page are redrawn independently: the scorer keeps counts, not which repeat
passed). Intervals are the 2.5 and 97.5 percentiles.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_RESAMPLES = 1000
HEADERS_FOOTERS = "headers_footers.jsonl"
#: olmOCR-bench's JSONL files and the leaderboard's column names for them (others keep their file name).
COLUMNS = {"arxiv_math.jsonl": "ArXiv", "old_scans_math.jsonl": "Old Scans Math", "table_tests.jsonl": "Tables",
           "old_scans.jsonl": "Old Scans", HEADERS_FOOTERS: "Headers & Footers", "multi_column.jsonl": "Multi Column",
           "long_tiny_text.jsonl": "Long Tiny Text", "baseline": "Base"}
OVERALLS = ("overall", "overall_without_headers_footers")


def _draws(scores: Sequence[dict], resamples: int, seed: int):
    """``(row names, point value per side and row, draws per side and row)`` (draws: arrays of ``resamples``)."""
    import numpy as np

    ids = sorted(scores[0]["tests"])
    tests = [[score["tests"][i] for i in ids] for score in scores]
    pages = sorted({t["page"] for t in tests[0]})
    index = {page: n for n, page in enumerate(pages)}
    page_of = np.array([index[t["page"]] for t in tests[0]], dtype=int)
    groups = sorted({t["group"] for t in tests[0]})
    kinds = sorted({t["type"] for t in tests[0]})
    group_hot = np.array([[t["group"] == g for g in groups] for t in tests[0]], dtype=float).reshape(len(ids), -1)
    kind_hot = np.array([[t["type"] == k for k in kinds] for t in tests[0]], dtype=float).reshape(len(ids), -1)
    keep = np.array([g != HEADERS_FOOTERS for g in groups], dtype=float)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(len(pages), [1 / len(pages)] * len(pages), size=resamples)[:, page_of] if pages else \
        np.zeros((resamples, 0))

    def rows(passed, w):
        by_group = (w * passed) @ group_hot / np.maximum(w @ group_hot, 1e-12)
        present = (w @ group_hot) > 0  # a group none of whose pages was drawn does not count in the mean
        overall = (by_group * present).sum(axis=-1) / np.maximum(present.sum(axis=-1), 1)
        kept = present * keep
        without = (by_group * kept).sum(axis=-1) / np.maximum(kept.sum(axis=-1), 1)
        by_kind = (w * passed) @ kind_hot / np.maximum(w @ kind_hot, 1e-12)
        return [overall, without] + [by_group[..., j] for j in range(len(groups))] + \
            [by_kind[..., j] for j in range(len(kinds))]

    points, draws = [], []
    for side in tests:
        passed = np.array([t["passed"] for t in side], dtype=float)
        repeats = np.array([max(t["repeats"], 1) for t in side])
        share = np.array([t["repeat_passes"] for t in side]) / repeats
        points.append([float(v) for v in rows(passed, np.ones(len(side)))])
        if len(side) and repeats.max() > 1:  # redraw each test's repeats, majority rule again
            again = rng.binomial(np.broadcast_to(repeats, (resamples, len(side))), share)
            passed = (again > repeats / 2).astype(float)
        draws.append(rows(passed, weights))
    names = list(OVERALLS) + [f"jsonl:{g}" for g in groups] + [f"type:{k}" for k in kinds]
    return names, points, draws


def _ci(values) -> list[float]:
    import numpy as np

    return [float(v) for v in np.percentile(values, [2.5, 97.5])]


def paired_rows(scores: Sequence[dict], resamples: int, seed: int) -> dict:
    """Two evaluations of the same tests: per row A's and B's values and intervals, and B − A with its interval
    (``a``, ``b``, ``a_ci``, ``b_ci``, ``diff``, ``diff_ci``)."""
    names, points, draws = _draws(scores, resamples, seed)
    return {name: {"a": points[0][n], "b": points[1][n], "a_ci": _ci(draws[0][n]), "b_ci": _ci(draws[1][n]),
                   "diff": points[1][n] - points[0][n], "diff_ci": _ci(draws[1][n] - draws[0][n])}
            for n, name in enumerate(names)}


def leaderboard(score: dict, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    """One evaluation's rows with their intervals: ``overall`` and ``overall_without_headers_footers`` (``pass_rate``,
    ``ci``), ``per_jsonl`` and ``per_type`` (``pass_rate``, ``ci``, ``passed``, ``total``; a JSONL's ``column`` is its
    olmOCR-bench leaderboard name)."""
    names, points, draws = _draws([score], resamples, seed)
    rows = {name: {"pass_rate": points[0][n], "ci": _ci(draws[0][n])} for n, name in enumerate(names)}
    out = {"resamples": resamples, "seed": seed, "unit": "pages",
           **{name: rows[name] for name in OVERALLS}, "per_jsonl": {}, "per_type": {}}
    out["overall_without_headers_footers"]["headers_footers_tests"] = score.get("per_jsonl", {}).get(
        HEADERS_FOOTERS, {}).get("total", 0)
    for prefix, key in (("jsonl:", "per_jsonl"), ("type:", "per_type")):
        for name, row in rows.items():
            if name.startswith(prefix):
                label = name[len(prefix):]
                counts = score.get(key, {}).get(label, {})
                out[key][label] = {**row, "passed": counts.get("passed"), "total": counts.get("total")}
                if key == "per_jsonl":
                    out[key][label]["column"] = COLUMNS.get(label, label)
    return out


def plus_minus(value: float, ci: Sequence[float]) -> str:
    """olmOCR-bench's form: mean ± half the 95 % interval, in percent."""
    return f"{100 * value:.1f} ± {100 * (ci[1] - ci[0]) / 2:.1f}"


def format_leaderboard(boards: dict[str, dict]) -> list[str]:
    """The leaderboard rows of one evaluation, one column per score (``{"model only": board, "pipeline": board}``)."""
    first = next(iter(boards.values()))
    labels = [(f"{row['column']}", "per_jsonl", name) for name, row in first["per_jsonl"].items()]
    labels += [("overall", None, "overall"), ("overall without Headers & Footers", None,
                                              "overall_without_headers_footers")]
    width = max(len(label) for label, _, _ in labels) + 2
    lines = [f"leaderboard rows (pass rate ± half the 95% interval, {first['resamples']} bootstrap resamples of pages)",
             f"{'':<{width}}" + "".join(f"{title:>16}" for title in boards)]
    for label, section, name in labels:
        cells = []
        for board in boards.values():
            row = board[section][name] if section else board[name]
            cells.append(f"{plus_minus(row['pass_rate'], row['ci']):>16}")
        lines.append(f"{label:<{width}}" + "".join(cells))
    if not first["overall_without_headers_footers"]["headers_footers_tests"]:
        lines.append(f"(no {HEADERS_FOOTERS} tests here: both overalls are the same)")
    return lines
