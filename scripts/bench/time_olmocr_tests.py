"""Time olmOCR-bench's own tests (the public ``olmocr`` package) on bench_tests.py's workload.

Run with a Python that has ``olmocr`` (not olmocr_rl's environment), for the speed comparison::

    /tmp/olmocr-ref/bin/python scripts/bench/time_olmocr_tests.py --out olmocr_times.json
    .venv/bin/python scripts/bench/bench_tests.py --olmocr-times olmocr_times.json

Same completions as bench_tests.py (the sample's real transcriptions plus ``perturb.py`` copies,
same seed), same tests (every JSONL test plus a default baseline per PDF), one CPU. Math renders
go through olmOCR's KaTeX/Chromium pipeline (``--chromium``); the timed pass runs after a warm-up
pass, so its render cache is warm, as in the issue's reference numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perturb import perturbed_copies  # noqa: E402

DEFAULT_BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "olmocr-bench-sample"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--skip-math", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import playwright.sync_api as sync_api

    original = sync_api.BrowserType.launch

    def launch(self, *a, **k):
        k.setdefault("executable_path", args.chromium)
        k.setdefault("args", ["--no-sandbox"])
        return original(self, *a, **k)

    sync_api.BrowserType.launch = launch
    from olmocr.bench.tests import BaselineTest, load_tests

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    tests = [t for jsonl in sorted(args.bench.glob("*.jsonl")) for t in load_tests(str(jsonl))]
    pdfs = {t.pdf for t in tests} | {p.relative_to(args.bench / "pdfs").as_posix() for p in (args.bench / "pdfs").rglob("*.pdf")}
    with_baseline = {t.pdf for t in tests if t.type == "baseline"}
    tests += [BaselineTest(id=f"{pdf}_baseline", pdf=pdf, page=1, type="baseline") for pdf in sorted(pdfs - with_baseline)]
    if args.skip_math:
        tests = [t for t in tests if t.type != "math"]
    by_page = defaultdict(list)
    for t in tests:
        by_page[(t.pdf, t.page)].append(t)
    workload = []
    for (pdf, page), page_tests in sorted(by_page.items()):
        stem = os.path.splitext(pdf)[0]
        files = sorted((args.bench / "olmocr_pipeline").glob(f"{stem}_pg{page}_repeat*.md"))
        if files:
            real = files[0].read_text(encoding="utf-8")
            workload.append((page_tests, [real] + perturbed_copies(real, args.copies, args.seed)))

    def one_pass() -> dict[str, list[float]]:
        times: dict[str, list[float]] = defaultdict(list)
        for page_tests, texts in workload:
            for text in texts:
                for t in page_tests:
                    start = time.perf_counter()
                    try:
                        t.run(text)
                    except Exception:  # noqa: BLE001 - count it as a (timed) failure, as the scorer does
                        pass
                    times[t.type].append(time.perf_counter() - start)
        return times

    one_pass()  # warm-up: fills olmOCR's KaTeX render cache
    times = one_pass()
    result = {kind: sum(v) / len(v) * 1e6 for kind, v in times.items()}
    args.out.write_text(json.dumps({"us_per_test": result, "evaluations": {k: len(v) for k, v in times.items()}}, indent=1))
    for kind, us in sorted(result.items()):
        print(f"{kind:9s} {us:10.1f} µs/test over {len(times[kind])} evaluations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
