"""Reward throughput: score 28 completions of every page of an olmOCR-bench folder, with 1 and 2 workers.

    .venv/bin/python scripts/bench/bench_rewards.py                       # ../shared/olmocr-bench-sample
    .venv/bin/python scripts/bench/bench_rewards.py --workers 1 2 4 --threads
    .venv/bin/python scripts/bench/bench_rewards.py --workers 1 --reward binary continuous --rounds 3

The completions of a page are its real olmOCR pipeline output (``olmocr_pipeline/<stem>_pg<page>_repeat1.md``)
with front matter on top, plus seeded perturbations of it (lines dropped, paragraphs shuffled, typos,
truncation, a repetition loop, tables or math removed, an empty page), so that tests pass and fail as
they would during training. Pages without a pipeline output get perturbations of an empty page.

Reported per worker count: the first ("cold") call of a new scorer, which starts the pool and builds every
page's tests (in one GRPO epoch each page is new, so this is the per-step cost of test construction),
then the median of warm calls (pool up, tests cached). ``--threads`` adds the in-process thread-pool
measurement that motivates the process pool. ``--reward binary continuous`` (the default) times the binary bench
reward and the continuous one (``--reward_bench_continuous``, partial credit per test) on the same batch in the
same run, alternating ``--rounds`` times so that load on a shared machine hits both alike. Importable:
:func:`make_batch`, :func:`time_scoring`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SAMPLE = REPO_ROOT.parent / "shared" / "olmocr-bench-sample"
FRONT_MATTER = (
    "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
    "is_table: False\nis_diagram: False\n---\n"
)


def read_pages(bench_folder: Path) -> list[dict]:
    """One entry per (pdf, page) of the folder's JSONL files: pdf_path, jsonl_files, test_ids, pipeline text."""
    pages: dict[tuple[str, int], dict] = {}
    for jsonl in sorted(bench_folder.glob("*.jsonl")):
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            key = (entry["pdf"], int(entry.get("page", 1)))
            page = pages.setdefault(
                key, {"pdf_path": str(bench_folder / "pdfs" / entry["pdf"]), "jsonl_files": [], "test_ids": []}
            )
            if str(jsonl) not in page["jsonl_files"]:
                page["jsonl_files"].append(str(jsonl))
            page["test_ids"].append(entry["id"])
    for (pdf, number), page in pages.items():
        markdown = bench_folder / "olmocr_pipeline" / f"{Path(pdf).with_suffix('')}_pg{number}_repeat1.md"
        page["text"] = markdown.read_text(encoding="utf-8") if markdown.is_file() else ""
    return [pages[key] for key in sorted(pages)]


def perturb(text: str, rng: random.Random) -> str:
    """One seeded corruption of a transcription (kinds chosen to flip different test types)."""
    lines = text.splitlines()
    kind = rng.randrange(9)
    if kind == 0 and lines:  # drop some lines
        return "\n".join(line for line in lines if rng.random() > 0.25)
    if kind == 1:  # shuffle paragraphs (order tests)
        paragraphs = text.split("\n\n")
        rng.shuffle(paragraphs)
        return "\n\n".join(paragraphs)
    if kind == 2 and text:  # character typos (present / table / math cells)
        chars = list(text)
        for _ in range(max(1, len(chars) // 50)):
            chars[rng.randrange(len(chars))] = rng.choice("abcdefgh ")
        return "".join(chars)
    if kind == 3:  # truncated generation
        return text[: rng.randrange(len(text) + 1)]
    if kind == 4:  # a repetition loop at the end (baseline)
        return text + "\n" + "the end " * 60
    if kind == 5:  # tables removed
        out, skipping = [], False
        for line in lines:
            skipping = skipping or "<table" in line
            if not skipping:
                out.append(line)
            skipping = skipping and "</table>" not in line
        return "\n".join(out)
    if kind == 6:  # math delimiters changed
        return text.replace("\\(", "$").replace("\\)", "$").replace("\\[", "$$").replace("\\]", "$$")
    if kind == 7:  # a header line added (absent tests)
        return "Downloaded from http://example.org/ on 1 January 2025\n\n" + text
    return ""  # an empty page


def make_batch(bench_folder: Path = DEFAULT_SAMPLE, generations: int = 28, seed: int = 0) -> tuple[list, dict]:
    """``(completions, columns)`` as TRL would pass them: ``generations`` consecutive completions per page."""
    rng = random.Random(seed)
    completions: list = []
    columns: dict[str, list] = defaultdict(list)
    for page in read_pages(bench_folder):
        for k in range(generations):
            body = page["text"] if k == 0 else perturb(page["text"], rng)
            completions.append([{"role": "assistant", "content": FRONT_MATTER + body}])
            for name in ("pdf_path", "jsonl_files", "test_ids"):
                columns[name].append(page[name])
            columns["jsonl_file"].append(page["jsonl_files"][0])
    return completions, dict(columns)


def _cpu_seconds(scorer) -> tuple[float, list[float]]:
    """(CPU seconds of this process, CPU seconds of each worker process) so far (no workers without psutil)."""
    workers: list[float] = []
    pool = scorer.evaluator._pool
    if pool is not None:
        try:
            import psutil
        except ImportError:
            psutil = None
        for pid in sorted(pool._processes) if psutil else []:
            try:
                times = psutil.Process(pid).cpu_times()
                workers.append(times.user + times.system)
            except psutil.Error:
                workers.append(0.0)
    return time.process_time(), workers


def time_scoring(completions: list, columns: dict, workers: int, warm_repeats: int = 7, continuous: bool = False) -> dict:
    """Timings of a fresh scorer with ``workers`` workers: the cold first call, then the fastest / median warm
    call (the fastest is the least disturbed by other load on a shared machine).

    CPU accounting of the fastest warm call makes the result readable on a loaded machine: ``warm_cpu_s``
    (trainer process + workers), ``warm_cpu_per_wall`` (above 1 = several cores at once), and
    ``idle_machine_s`` = the trainer process's CPU + the busiest worker's CPU, the wall time the call would take
    with a free core per worker (the work is split by page chunks; this shows how evenly). ``continuous`` times
    the continuous bench reward (partial credit) instead of the binary one."""
    from olmocr_rl.rewards import BenchRewardScorer

    scorer = BenchRewardScorer(workers=workers, with_credit=continuous)
    try:
        start = time.perf_counter()
        rewards = scorer.rewards(completions, continuous=continuous, **columns)
        cold = time.perf_counter() - start
        warm = []
        for repeat in range(warm_repeats):
            # A fresh list each time so the micro/macro memo cannot answer; texts are unchanged (tests cached).
            batch = [list(c) for c in completions]
            batch[0] = [{"role": "assistant", "content": batch[0][0]["content"] + " " * (repeat + 1)}]
            parent_before, workers_before = _cpu_seconds(scorer)
            start = time.perf_counter()
            scorer.rewards(batch, continuous=continuous, **columns)
            wall = time.perf_counter() - start
            parent_after, workers_after = _cpu_seconds(scorer)
            per_worker = [a - b for a, b in zip(workers_after, workers_before)]
            warm.append((wall, parent_after - parent_before, per_worker))
    finally:
        scorer.close()
    scored = [r for r in rewards if r is not None]
    best_wall, parent_cpu, per_worker = min(warm, key=lambda w: w[0])
    cpu = parent_cpu + sum(per_worker)
    return {
        "workers": workers,
        "completions": len(completions),
        "cold_s": cold,
        "warm_s": best_wall,
        "warm_median_s": statistics.median(w[0] for w in warm),
        "warm_cpu_s": cpu,
        "warm_cpu_per_wall": cpu / best_wall,
        "worker_cpu_s": per_worker,
        "idle_machine_s": parent_cpu + max(per_worker, default=0.0),
        "warm_completions_per_s": len(completions) / best_wall,
        "cold_completions_per_s": len(completions) / cold,
        "mean_reward": sum(scored) / len(scored),
    }


def time_threads(completions: list, columns: dict, threads: int, repeats: int = 5) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of the fastest of ``repeats`` scorings of the batch with ``threads`` threads
    in-process, tests pre-built. cpu / wall stays at or below 1 when the work holds the GIL."""
    from olmocr_rl.rewards.completions import completion_text, page_body
    from olmocr_rl.rewards.page_score import score_page
    from olmocr_rl.rewards.page_tests import PageKey, PageTestCache

    cache = PageTestCache()
    tasks = []
    for i, completion in enumerate(completions):
        page = cache.get(PageKey.build(columns["jsonl_files"][i], columns["test_ids"][i]))
        tasks.append((page.tests, page_body(completion_text(completion), False)))
    timings = []
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            list(pool.map(lambda task: score_page(*task), tasks))
            timings.append((time.perf_counter() - start, time.process_time() - cpu_start))
    return min(timings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench_folder", type=Path, default=DEFAULT_SAMPLE)
    parser.add_argument("--generations", type=int, default=28)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", action="store_true", help="also time 1 and 2 threads in-process")
    parser.add_argument("--reward", nargs="+", choices=("binary", "continuous"), default=["binary", "continuous"],
                        help="which bench reward(s) to time (default both, alternating)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate the rewards this many times (default 1)")
    args = parser.parse_args(argv)
    if not args.bench_folder.is_dir():
        print(f"bench folder not found: {args.bench_folder}", file=sys.stderr)
        return 2
    completions, columns = make_batch(args.bench_folder, args.generations)
    pages = len(completions) // args.generations
    print(f"{len(completions)} completions = {pages} pages x {args.generations}, "
          f"{sum(len(ids) for ids in columns['test_ids'])} test runs")
    for workers, _round, reward in [(w, k, r) for w in args.workers for k in range(args.rounds) for r in args.reward]:
        r = time_scoring(completions, columns, workers, continuous=reward == "continuous")
        split = ", ".join(f"{c:.2f}" for c in r["worker_cpu_s"]) or "-"
        print(f"{reward:>10} workers={workers}: cold {r['cold_s']:.2f}s ({r['cold_completions_per_s']:.0f} completions/s), "
              f"warm best {r['warm_s']:.2f}s ({r['warm_completions_per_s']:.0f} completions/s, "
              f"median {r['warm_median_s']:.2f}s), mean reward {r['mean_reward']:.3f}")
        print(f"  cpu {r['warm_cpu_s']:.2f}s (cpu/wall {r['warm_cpu_per_wall']:.2f}; workers {split}); "
              f"with a free core per worker: {r['idle_machine_s']:.2f}s "
              f"({len(completions) / r['idle_machine_s']:.0f} completions/s); "
              f"{1000 * r['warm_cpu_s'] / len(completions):.2f} ms CPU per completion")
    if args.threads:
        for threads in (1, 2):
            wall, cpu = time_threads(completions, columns, threads)
            print(f"threads={threads} (in-process, tests pre-built, best): {wall:.2f}s "
                  f"({len(completions) / wall:.0f} completions/s, cpu/wall {cpu / wall:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
