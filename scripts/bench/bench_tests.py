"""Benchmark olmocr_rl.bench: test evaluations per second and µs per test, by type, single core.

    .venv/bin/python scripts/bench/bench_tests.py [--bench ../shared/olmocr-bench-sample] [--copies 20]
        [--olmocr-times olmocr_times.json] [--json results.json]

Completions: each page's real transcription from ``<bench>/olmocr_pipeline`` plus ``--copies``
perturbed copies (``perturb.py``, fixed seed), so tests meet both good and broken text. Tests: every
JSONL test of the bench plus the default baseline test per PDF (as the scorer adds them).

Two measurements per test type:

- ``run``: ``test.run(text)`` for every (test, completion) — each call prepares the completion from
  scratch, exactly the work olmOCR-bench's ``test.run`` does per call;
- ``page``: per completion and type, all tests of that type through one ``PreparedText``
  (normalisation, table parsing and equation layout shared by the tests of that type);

and a whole-page figure: all non-math tests of a page through one ``PreparedText`` (how the reward
evaluates a page), against olmOCR-bench's cost for the same tests.

The equation-layout cache is cleared before each completion (cold: completions in RL are new text;
only the tests' own reference layouts, computed at load, are kept), and the process is pinned to
one CPU (``BENCH_CPU`` picks which). The ratio column compares with olmOCR-bench's per-test cost on
these machines (``--olmocr-times``: a JSON of µs per type from ``time_olmocr_tests.py``; default the
numbers measured for the issue: present 194, absent 239, order 1130, table 3150, baseline 265,
math 91000 µs).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perturb import perturbed_copies  # noqa: E402

from olmocr_rl.bench import PreparedText, latex  # noqa: E402
from olmocr_rl.bench.score import load_bench_tests, output_files  # noqa: E402

OLMOCR_US = {"present": 194.0, "absent": 239.0, "order": 1130.0, "table": 3150.0, "baseline": 265.0, "math": 91000.0}
TARGET = {"math": 100.0}  # everything else: 20x
DEFAULT_BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "olmocr-bench-sample"


def pin_to_one_cpu() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = int(os.environ.get("BENCH_CPU", min(os.sched_getaffinity(0))))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def build_workload(bench: Path, copies: int, seed: int):
    """[(tests of one page, [completions])] with the real transcription first."""
    tests = [test for test, _ in load_bench_tests(bench)]
    by_page = defaultdict(list)
    for test in tests:
        by_page[(test.pdf, test.page)].append(test)
    workload = []
    for (pdf, page), page_tests in sorted(by_page.items()):
        files = output_files(bench / "olmocr_pipeline", pdf, page)
        if not files:
            continue
        real = files[0].read_text(encoding="utf-8")
        workload.append((page_tests, [real] + perturbed_copies(real, copies, seed)))
    return workload


def measure_run(workload) -> dict[str, list[float]]:
    times: dict[str, list[float]] = defaultdict(list)
    clock = time.perf_counter
    for page_tests, texts in workload:
        for text in texts:
            latex.layout.cache_clear()  # a new completion: its equations are laid out afresh
            for test in page_tests:
                start = clock()
                test.run(text)
                times[test.type].append(clock() - start)
    return times


def measure_page(workload) -> tuple[dict[str, list[float]], dict[str, int], float, int]:
    """Per type: time of all its tests on one shared PreparedText, and the number of tests; plus the
    time of whole-page evaluation (all types sharing one PreparedText)."""
    times: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    clock = time.perf_counter
    page_total = 0.0
    page_evaluations = 0
    for page_tests, texts in workload:
        by_type = defaultdict(list)
        for test in page_tests:
            by_type[test.type].append(test)
        for text in texts:
            for kind, kind_tests in by_type.items():
                latex.layout.cache_clear()
                start = clock()
                prepared = PreparedText(text)
                for test in kind_tests:
                    test.run_prepared(prepared)
                times[kind].append(clock() - start)
                counts[kind] += len(kind_tests)
            latex.layout.cache_clear()
            start = clock()
            prepared = PreparedText(text)
            for test in page_tests:
                if test.type != "math":
                    test.run_prepared(prepared)
            page_total += clock() - start
            page_evaluations += sum(1 for test in page_tests if test.type != "math")
    return times, counts, page_total, page_evaluations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--copies", type=int, default=20, help="perturbed copies per real transcription")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passes", type=int, default=3, help="timing passes; the fastest is reported")
    parser.add_argument("--olmocr-times", type=Path, help="JSON {type: µs per test} measured for olmOCR-bench")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    pinned = pin_to_one_cpu()
    reference = dict(OLMOCR_US)
    reference_source = "issue 3 (measured on these machines)"
    if args.olmocr_times:
        reference.update(json.loads(args.olmocr_times.read_text())["us_per_test"])
        reference_source = str(args.olmocr_times)
    workload = build_workload(args.bench, args.copies, args.seed)
    completions = sum(len(texts) for _, texts in workload)
    print(f"{len(workload)} pages, {completions} completions ({args.copies} perturbed copies each), {pinned}")

    gc.disable()  # keep collector pauses out of per-call timings
    best_run: dict[str, float] = {}
    best_page: dict[str, float] = {}
    evaluations: dict[str, int] = {}
    best_page_total = float("inf")
    page_evaluations = 0
    for _ in range(args.passes):
        latex.layout.cache_clear()
        run_times = measure_run(workload)
        for kind, values in run_times.items():
            evaluations[kind] = len(values)
            best_run[kind] = min(best_run.get(kind, float("inf")), sum(values) / len(values))
        latex.layout.cache_clear()
        page_times, counts, page_total, page_evaluations = measure_page(workload)
        for kind, values in page_times.items():
            best_page[kind] = min(best_page.get(kind, float("inf")), sum(values) / counts[kind])
        best_page_total = min(best_page_total, page_total)
    gc.enable()

    header = f"{'type':9s} {'evals':>6s} {'run µs':>9s} {'page µs':>9s} {'evals/s (page)':>15s} {'olmOCR µs':>10s} {'x (run)':>9s} {'x (page)':>9s} {'target':>7s}"
    print(header)
    print("-" * len(header))
    results = {}
    for kind in sorted(best_run):
        run_us, page_us = best_run[kind] * 1e6, best_page[kind] * 1e6
        olmocr = reference.get(kind)
        target = TARGET.get(kind, 20.0)
        ratio_run = olmocr / run_us if olmocr else None
        ratio_page = olmocr / page_us if olmocr else None
        results[kind] = {
            "evaluations": evaluations[kind],
            "us_per_test_run": run_us,
            "us_per_test_page": page_us,
            "evaluations_per_second_page": 1e6 / page_us,
            "olmocr_us_per_test": olmocr,
            "speedup_run": ratio_run,
            "speedup_page": ratio_page,
            "target_speedup": target,
        }
        fmt = lambda v: f"{v:9.1f}" if v is not None else f"{'-':>9s}"  # noqa: E731
        print(
            f"{kind:9s} {evaluations[kind]:6d} {run_us:9.1f} {page_us:9.1f} {1e6 / page_us:15.0f} "
            f"{(olmocr or 0):10.0f} {fmt(ratio_run)} {fmt(ratio_page)} {target:6.0f}x"
        )
    page_us = best_page_total / page_evaluations * 1e6
    non_math = [kind for kind in results if kind != "math" and reference.get(kind)]
    olmocr_non_math = sum(reference[k] * evaluations[k] for k in non_math) / sum(evaluations[k] for k in non_math)
    print(
        f"\nwhole-page evaluation of the non-math tests (all on one PreparedText): {page_us:.1f} µs/test, "
        f"{1e6 / page_us:.0f} tests/s; olmOCR-bench on the same tests {olmocr_non_math:.1f} µs/test: "
        f"{olmocr_non_math / page_us:.1f}x"
    )
    print(f"olmOCR-bench reference: {reference_source}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"by_type": results, "non_math_page_us_per_test": page_us, "olmocr_non_math_us_per_test": olmocr_non_math, "pinned": pinned, "completions": completions},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
