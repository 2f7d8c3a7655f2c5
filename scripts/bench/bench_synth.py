"""Pages per second of ``python -m olmocr_rl.synth`` (render, typeset, text layer, tests, guarantee, writing),
with 1 and with 2 jobs, on copies of the shipped pages (tests/fixtures/synth/pages). Wall time from the command's
start to its post-condition, browser start-up included.

    python scripts/bench/bench_synth.py [--pages 40] [--jobs 1 2] [--work DIR]

Needs the browser set-up (bash scripts/setup_browser.sh); docs/synth.md ("Speed") has the measured numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from olmocr_rl.synth import cli  # noqa: E402
from olmocr_rl.synth.render import BrowserMissingError, check_setup  # noqa: E402

PAGES = REPO / "tests" / "fixtures" / "synth" / "pages"


def make_pages(folder: Path, count: int) -> None:
    sources = sorted(PAGES.glob("*.html"))
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        source = sources[i % len(sources)]
        shutil.copy(source, folder / f"{source.stem}_{i:03d}.html")


def timed_run(pages: Path, out: Path, jobs: int) -> tuple[float, int, str]:
    """(seconds, exit status, closing table) of one run."""
    buffer = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["--html", str(pages), "--out", str(out), "--jobs", str(jobs)])
    return time.perf_counter() - start, code, buffer.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=40, help="pages per run (default 40)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="job counts to time (default 1 2)")
    parser.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args()
    try:
        check_setup()
    except BrowserMissingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_synth_"))
    make_pages(work / "pages", args.pages)
    print(f"{args.pages} pages (copies of the {len(list(PAGES.glob('*.html')))} shipped ones)")
    print(f"{'jobs':>4} {'seconds':>8} {'pages/s':>8}  tests written")
    for jobs in args.jobs:
        out = work / f"out-{jobs}"
        shutil.rmtree(out, ignore_errors=True)
        seconds, code, table = timed_run(work / "pages", out, jobs)
        if code != 0:
            print(f"error: the run with --jobs {jobs} exited {code}", file=sys.stderr)
            return 1
        written = next((line.split()[1] for line in table.splitlines() if line.startswith("all ")), "?")
        print(f"{jobs:>4} {seconds:>8.2f} {args.pages / seconds:>8.2f}  {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
