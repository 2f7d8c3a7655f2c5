"""``python -m olmocr_rl.synth``: HTML pages → an olmOCR-bench folder whose every test passes on its own page.

    python -m olmocr_rl.synth --html pages/ --out bench_synth/ [--name synth] [--seed 0] [--jobs 2]
        [--cap table=8 --cap present=4] [--types present absent table] [--shard K/N] [--merge]

Exit status: 0 when the folder is written and the post-condition holds (``validate_bench`` passes on the JSONL
written and every test passes on its own reference under both scoring rules); 1 when it does not, when no page
was written (the manifest names every skip) or when a write failed (a full disk); 2 for a usage problem (a flag,
a missing browser, an output folder holding another bench or in use by another run), before any page is read;
130 when stopped by SIGINT or SIGTERM. Every failure is one ``error:`` line; the last line names the folder.
docs/synth.md has the rules, the layout, the guarantee and the bad-input list.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .derive import DEFAULT_CAPS, SYNTH_TYPES
from .output import (MANIFEST, OutputError, check_out_dir, counts_by_type, merge_shards, out_lock, parse_shard,
                     plan_pages, remove_temp_files, take_shard, verify_folder, write_outputs, write_page)
from .pipeline import PageOptions, PageResult, PageSkip
from .render import BrowserMissingError, check_setup, tool_versions
from .runner import run_pages

__all__ = ["main", "build_parser"]


def _cap(text: str) -> tuple[str, int]:
    kind, _, number = text.partition("=")
    if kind not in SYNTH_TYPES or not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give TYPE=N with TYPE one of {', '.join(SYNTH_TYPES)}")
    return kind, int(number)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.synth",
        description="Turn HTML pages into an olmOCR-bench folder (PDFs printed by headless Chromium, unit tests "
                    "derived from the HTML, references in claude_original/), every test checked on its own page. "
                    "Or, with --from_pdfs, ask a VLM server to write each page's HTML first.")
    parser.add_argument("--html", metavar="DIR", help="folder of *.html pages (one page each); sub-folders become "
                        "subsets <name>_<sub>")
    parser.add_argument("--out", metavar="BENCH_DIR", required=True, help="the bench folder to write (new, empty, "
                        "or one synth wrote)")
    parser.add_argument("--name", default="synth", help="the JSONL name and pdfs/ sub-folder (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the choices among candidate tests "
                        "(default %(default)s); the same HTML and seed give the same files")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, one browser each (default 1)")
    parser.add_argument("--cap", type=_cap, action="append", default=[], metavar="TYPE=N",
                        help="most tests of TYPE per page (repeatable; defaults: "
                        + ", ".join(f"{k}={v}" for k, v in DEFAULT_CAPS.items()) + ")")
    parser.add_argument("--types", nargs="+", choices=SYNTH_TYPES, default=list(SYNTH_TYPES), metavar="TYPE",
                        help="make only these test types (default: all: " + " ".join(SYNTH_TYPES) + ")")
    parser.add_argument("--shard", metavar="K/N", default=None, help="make only part K of N (pages split by "
                        "sorted path); N runs into one folder, then --merge")
    parser.add_argument("--merge", action="store_true", help="join the shard files in --out into one folder and "
                        "check it (no pages are made)")
    parser.add_argument("--timeout_s", type=float, default=20.0, help="browser time limit per page (default 20)")
    parser.add_argument("--max_html_mb", type=float, default=5.0, help="larger HTML files are skipped (default 5)")
    from .server import add_server_flags

    add_server_flags(parser)
    return parser


def _check_args(args: argparse.Namespace) -> tuple[int, int] | None:
    if args.merge:
        return None
    if args.from_pdfs:
        from .server import check_server_args

        check_server_args(args)
    elif not args.html:
        raise OutputError("give --html DIR (or --from_pdfs DIR with --server, or --merge)")
    elif not Path(args.html).is_dir():
        raise OutputError(f"--html {args.html} is not a folder; give the folder of *.html pages")
    if args.jobs < 1:
        raise OutputError(f"--jobs {args.jobs}: give 1 or more")
    if args.timeout_s <= 0 or args.max_html_mb <= 0:
        raise OutputError("--timeout_s and --max_html_mb must be positive")
    return parse_shard(args.shard) if args.shard else None


def _manifest(args, versions, results: list[PageResult], skips: list[PageSkip], server_skips: list) -> dict:
    tests = [t for r in results for t in r.tests]
    dropped = [{**{k: d[k] for k in ("id", "type", "reason", "detail")}, "pdf": r.job.pdf}
               for r in results for d in r.dropped]
    return {
        "tool": "python -m olmocr_rl.synth", "versions": versions, "seed": args.seed, "name": args.name,
        "caps": {**DEFAULT_CAPS, **dict(args.cap)}, "types": list(args.types), "max_html_mb": args.max_html_mb,
        "shard": args.shard,
        "pages": [{"html": r.job.rel, "pdf": r.job.pdf, "tests": len(r.tests), "by_type": counts_by_type(r.tests),
                   "scale": r.scale, "notices": r.notices} for r in results],
        "skipped_pages": [{"html": s.job.rel, "kind": s.kind, "reason": s.reason} for s in skips]
        + [{"pdf_page": s.source, "kind": s.kind, "reason": s.reason} for s in server_skips],
        "tests": len(tests), "tests_by_type": counts_by_type(tests),
        "dropped_by_reason": dict(sorted(Counter(d["reason"] for d in dropped).items())),
        "dropped_tests": dropped,
    }


def closing_table(results: list[PageResult], skips: list[PageSkip], server_skips: Sequence = ()) -> str:
    """Tests written and dropped (by reason) per type, and the pages made and skipped (the server's too)."""
    written = Counter(t["type"] for r in results for t in r.tests)
    dropped = Counter((d["type"], d["reason"]) for r in results for d in r.dropped)
    reasons = sorted({reason for _, reason in dropped})
    header = f"{'type':<10}{'written':>9}" + "".join(f"{'drop:' + r:>17}" for r in reasons)
    lines = [header]
    for kind in SYNTH_TYPES:
        if written[kind] or any(dropped[(kind, r)] for r in reasons):
            lines.append(f"{kind:<10}{written[kind]:>9}" + "".join(f"{dropped[(kind, r)]:>17}" for r in reasons))
    lines.append(f"{'all':<10}{sum(written.values()):>9}"
                 + "".join(f"{sum(v for (k, r2), v in dropped.items() if r2 == r):>17}" for r in reasons))
    every = list(skips) + list(server_skips)
    lines.append(f"pages: {len(results)} written, {len(every)} skipped"
                 + "".join(f"; {k}: {v}" for k, v in sorted(Counter(s.kind for s in every).items())))
    return "\n".join(lines)


def _progress(done: int, total: int, item: PageResult | PageSkip) -> None:
    if isinstance(item, PageSkip):
        print(f"[synth] {done}/{total} {item.job.rel}: skipped ({item.kind}): {item.reason}", file=sys.stderr)
        return
    notes = "".join(f"; {n}" for n in item.notices)
    print(f"[synth] {done}/{total} {item.job.rel}: {len(item.tests)} tests, {len(item.dropped)} dropped, "
          f"{item.seconds:.2f} s{notes}", file=sys.stderr, flush=True)


def _finish(out: Path, jsonls: list[Path]) -> int:
    problems = verify_folder(out, jsonls)
    if problems:
        for problem in problems[:20]:
            print(f"error: post-condition: {problem}", file=sys.stderr)
        print(f"error: post-condition failed in {out}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"OK: {out}: validate_bench passes; every test passes on its own reference under both scoring rules")
    return 0


class Stopped(KeyboardInterrupt):
    """SIGTERM (or SIGINT) arrived: the run ends, its temporary files removed. A KeyboardInterrupt, so that no
    per-page ``except Exception`` takes it for that page's failure, and asyncio (Playwright's event loop, where
    the signal often lands) passes it on instead of logging it and going on."""


@contextlib.contextmanager
def _signals():
    """SIGTERM and SIGINT raise Stopped in the main thread, so the run ends through its ``finally`` clauses."""
    def stop(number, frame):
        raise Stopped(signal.Signals(number).name)

    try:
        saved = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:  # not the main thread: leave the handlers alone
        yield
        return
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    try:
        with _signals():
            return _run(args, out)
    except KeyboardInterrupt as stop:  # Stopped, or a KeyboardInterrupt raised before the handlers were set
        name = str(stop) or "SIGINT"
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # Playwright's driver, stopped too, is not news
        print(f"error: stopped by {name}: the pages written so far stay in {out} (each whole); rerun the same "
              "command to make the rest", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace, out: Path) -> int:
    try:
        shard = _check_args(args)
        if args.merge and not out.is_dir():
            raise OutputError(f"--merge: --out {out} is not a folder; give the folder the shards wrote into")
        if not args.merge:
            check_out_dir(out)
            check_setup()
        with out_lock(out, None if args.merge else shard):
            return _locked(args, out, shard)
    except (OutputError, BrowserMissingError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a write failed: a full disk, a folder turned read-only
        from olmocr_rl.storage.files import describe_write_failure

        reason = describe_write_failure(error, out, None) or f"{type(error).__name__}: {error}"
        print(f"error: cannot write in --out {out}: {reason}; pages written whole so far stay, the rest are not "
              "written; free room and rerun the same command", file=sys.stderr)
        return 1


def _locked(args: argparse.Namespace, out: Path, shard: tuple[int, int] | None) -> int:
    """The run, holding ``out`` (the whole folder, or shard K's part of it)."""
    if args.merge:
        remove_temp_files(out)
        jsonls = merge_shards(out)
        print(f"merged {len(jsonls)} JSONL file(s) in {out}")
        return _finish(out, jsonls)
    if shard is None:
        remove_temp_files(out)  # left by a run that was killed (this run holds the whole folder)
    if args.from_pdfs:
        from .server import pages_from_pdfs

        html_dir, server_skips = pages_from_pdfs(args)
    else:
        html_dir, server_skips = args.html, []
    planned = plan_pages(html_dir, args.name)
    if not planned and not args.from_pdfs:
        raise OutputError(f"no *.html page in --html {args.html}; give the folder of your HTML pages")
    jobs = take_shard(planned, shard)
    options = PageOptions(args.seed, tuple({**DEFAULT_CAPS, **dict(args.cap)}.items()), tuple(args.types),
                          int(args.max_html_mb * 2**20))
    start = time.perf_counter()
    print(f"[synth] {len(jobs)} page(s) from {html_dir} -> {out} with {args.jobs} job(s)", file=sys.stderr)
    results, skips = [], []
    for done, item in enumerate(run_pages(jobs, options, args.jobs, args.timeout_s) if jobs else [], 1):
        _progress(done, len(jobs), item)
        if isinstance(item, PageSkip):
            skips.append(item)
        else:
            write_page(out, item)
            results.append(item)
    order = {job.pdf: i for i, job in enumerate(jobs)}
    results.sort(key=lambda r: order[r.job.pdf])
    skips.sort(key=lambda s: order[s.job.pdf])
    jsonls = write_outputs(out, results, _manifest(args, tool_versions(), results, skips, server_skips), shard)
    print(closing_table(results, skips, server_skips))
    elapsed = time.perf_counter() - start
    print(f"{len(results)} page(s) in {elapsed:.1f} s ({len(jobs) / max(elapsed, 1e-9):.2f} pages/s)")
    if not jobs and shard is not None and not server_skips:
        print(f"OK: {out}: shard {args.shard} has no page ({len(planned)} in all); its manifest is written for "
              "--merge")
        return 0
    if not results:
        skipped = len(skips) + len(server_skips)
        print(f"error: no page written in {out}: {skipped} page(s) skipped, each with its reason in "
              f"{out / MANIFEST if shard is None else out}", file=sys.stderr)
        return 1
    return _finish(out, jsonls)
