"""Running the pages: in this process with one browser (``--jobs 1``), or in N worker processes, one browser each.

Results come back as each page finishes (for the progress lines); the caller sorts them into plan order, so the
files written do not depend on ``--jobs``. A worker's browser is closed when the worker exits.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator
from multiprocessing.util import Finalize

from .pipeline import PageJob, PageOptions, PageResult, PageSkip, make_page
from .render import Renderer

__all__ = ["run_pages"]

_WORKER: dict = {}


def _start_worker(options: PageOptions, timeout_s: float) -> None:
    # The parent handles Ctrl-C and SIGTERM (it ends the pool); a worker ignores the one and dies of the other.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _WORKER.update(options=options)
    try:  # a worker whose browser does not start skips its pages with the reason (a Pool would restart it forever)
        renderer = Renderer(timeout_s).__enter__()
    except Exception as error:  # noqa: BLE001
        _WORKER.update(error=f"{type(error).__name__}: {error}")
        return
    _WORKER.update(renderer=renderer)
    Finalize(renderer, renderer.close, exitpriority=10)


def _work(job: PageJob) -> PageResult | PageSkip:
    if "error" in _WORKER:
        return PageSkip(job, f"this worker's browser did not start: {_WORKER['error']}", "render")
    return make_page(job, _WORKER["options"], _WORKER["renderer"])


def run_pages(jobs: list[PageJob], options: PageOptions, workers: int, timeout_s: float
              ) -> Iterator[PageResult | PageSkip]:
    """Each page's result or skip, in the order they finish."""
    if workers <= 1 or len(jobs) <= 1:
        with Renderer(timeout_s) as renderer:
            for job in jobs:
                yield make_page(job, options, renderer)
        return
    context = multiprocessing.get_context("fork")
    with context.Pool(min(workers, len(jobs)), initializer=_start_worker, initargs=(options, timeout_s)) as pool:
        yield from pool.imap_unordered(_work, jobs)
        pool.close()
        pool.join()
