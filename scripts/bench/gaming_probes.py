"""Gaming probes: what adversarial completions earn from the bench rewards, binary and continuous, on real pages.

    .venv/bin/python scripts/bench/gaming_probes.py                  # both folders below, markdown table
    .venv/bin/python scripts/bench/gaming_probes.py --json

For every page of a bench folder the honest transcription is scored together with six adversarial completions
built from it (:func:`probes`): empty; one character; the page text twice; the page plus unrelated text; only
the markdown structure (every letter and digit removed); a runaway repetition to the length cap (the first
third of the page, then its last line repeated until ``--max_chars``, about ``--max_completion_length`` 8000
tokens). Rewards are the real reward functions (``olmocr_bench_reward``, ``olmocr_bench_continuous_reward``),
one worker. Printed: each probe's mean reward over the pages, and on how many pages it scores above the honest
transcription (tests/unit/test_gaming_probes.py asserts that no probe ever does).

Honest transcriptions: the repo's ``bench_data_sample`` uses its ``claude_original`` references; the shared
``../shared/olmocr-bench-sample`` its real olmOCR pipeline outputs (a real model's transcriptions, which fail
some tests: the bar the probes must not clear is what a real model earns, not 1.0). Importable: :func:`pages`,
:func:`probes`, :func:`probe_rewards`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from olmocr_rl.data.references import find_reference  # noqa: E402
from olmocr_rl.rewards import build_reward_functions  # noqa: E402

REPO_SAMPLE = REPO_ROOT / "bench_data_sample"
SHARED_SAMPLE = REPO_ROOT.parent / "shared" / "olmocr-bench-sample"
#: About --max_completion_length's default (8000 tokens) at ~4 characters a token.
MAX_CHARS = 32_000
UNRELATED = ("Meanwhile, the committee reviewed the quarterly budget and approved three new hires for the "
             "marketing department, pending a final vote next Tuesday.")
PROBES = ("honest", "empty", "one character", "page twice", "page + unrelated text", "markdown structure only",
          "runaway repetition")


def pages(folder: Path) -> list[dict]:
    """One entry per (pdf, page) of ``folder``'s JSONL files: name, jsonl_files, test_ids, honest text."""
    found: dict[tuple[str, int], dict] = {}
    for jsonl in sorted(folder.glob("*.jsonl")):
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                page = found.setdefault((entry["pdf"], int(entry.get("page", 1))), {"jsonl_files": [], "test_ids": []})
                if str(jsonl) not in page["jsonl_files"]:
                    page["jsonl_files"].append(str(jsonl))
                page["test_ids"].append(entry["id"])
    out = []
    for (pdf, number), page in sorted(found.items()):
        pipeline = folder / "olmocr_pipeline" / f"{Path(pdf).with_suffix('')}_pg{number}_repeat1.md"
        if pipeline.is_file():
            text = pipeline.read_text(encoding="utf-8")
        else:
            text = find_reference(folder, pdf, number)
        if text is not None:
            out.append({"name": f"{pdf}:{number}", "text": text, **page})
    return out


def probes(honest: str, max_chars: int = MAX_CHARS) -> dict[str, str]:
    """The honest transcription and the six adversarial completions built from it (see the module docstring)."""
    lines = [line for line in honest.splitlines() if line.strip()] or ["the end"]
    head = honest[: len(honest) // 3]
    loop = head + "\n"
    while len(loop) < max_chars:
        loop += lines[-1] + " "
    return {
        "honest": honest,
        "empty": "",
        "one character": "a",
        "page twice": honest + "\n\n" + honest,
        "page + unrelated text": honest + "\n\n" + UNRELATED,
        "markdown structure only": re.sub(r"[^\W_]", "", honest),
        "runaway repetition": loop[:max_chars],
    }


def probe_rewards(folder: Path, max_chars: int = MAX_CHARS) -> dict[str, dict[str, list[float]]]:
    """``{reward name: {probe: [reward per page]}}`` for the binary and continuous bench rewards."""
    funcs, _weights, names = build_reward_functions({"bench": 1.0, "bench_continuous": 1.0}, workers=1)
    out: dict[str, dict[str, list[float]]] = {name: {probe: [] for probe in PROBES} for name in names}
    try:
        for page in pages(folder):
            texts = probes(page["text"], max_chars)
            n = len(PROBES)
            columns = dict(pdf_path=[page["name"]] * n, jsonl_files=[page["jsonl_files"]] * n,
                           test_ids=[page["test_ids"]] * n)
            for func, name in zip(funcs, names):
                for probe, value in zip(PROBES, func([None] * n, [texts[p] for p in PROBES], **columns)):
                    out[name][probe].append(value)
    finally:
        funcs[0].scorer.close()
    return out


def table(results: dict[str, dict[str, list[float]]]) -> list[str]:
    """Markdown rows: probe, then per reward the mean and the pages scoring above the honest transcription."""
    names = list(results)
    header = "| completion | " + " | ".join(f"{name} (mean) | above honest" for name in names) + " |"
    rows = [header, "|---|" + "---|---|" * len(names)]
    for probe in PROBES:
        cells = []
        for name in names:
            values, honest = results[name][probe], results[name]["honest"]
            above = sum(v > h + 1e-12 for v, h in zip(values, honest))
            cells.append(f"{sum(values) / len(values):.3f} | {above}/{len(values)}")
        rows.append(f"| {probe} | " + " | ".join(cells) + " |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, nargs="*", default=[REPO_SAMPLE, SHARED_SAMPLE])
    parser.add_argument("--max_chars", type=int, default=MAX_CHARS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = {}
    for folder in args.bench:
        if not folder.is_dir():
            print(f"skipping {folder}: not found", file=sys.stderr)
            continue
        report[str(folder)] = probe_rewards(folder, args.max_chars)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for folder, results in report.items():
        count = len(next(iter(results.values()))["honest"])
        print(f"\n{folder}: {count} pages\n")
        print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
