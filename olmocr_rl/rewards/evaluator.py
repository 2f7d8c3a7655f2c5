"""Scoring a batch of completions against their pages' tests, serially or in a pool of worker processes.

Why processes: the tests' hot path (regex normalisation, fuzzy matching, table parsing) is Python and
rapidfuzz scorer calls, which hold the GIL, so threads do not scale (docs/rewards.md, "Parallel evaluation",
has the measurement). A process pool is therefore used when more than one worker is asked for.

Pool design:
* created lazily on the first batch and reused across calls (and GRPO steps);
* the start method is chosen when the pool starts (the first batch, after the model and any vLLM engine
  are up): ``fork`` on Linux while the process has no CUDA context and no vLLM engine (nothing is
  re-imported, workers only run pure Python and rapidfuzz); ``forkserver`` once CUDA is initialised or
  vLLM is imported, because forking a process that holds CUDA, NCCL or vLLM's threads can deadlock the
  child; ``spawn`` off Linux (fork is unsafe on macOS). ``OLMOCR_RL_REWARD_START_METHOD`` chooses one
  explicitly. ``spawn`` / ``forkserver`` re-import the main module in the workers, so a script must keep
  its work under ``if __name__ == "__main__":``;
* tasks name tests by :class:`PageKey` (file paths + ids) and each worker keeps its own
  :class:`PageTestCache`, so test objects are never pickled per call and any start method works;
* a page's completions go to the workers in a few chunks, so each worker constructs a page's tests at
  most once per batch (in one epoch each page is seen once, so construction is not amortised by the cache);
* a failing pool (a worker killed, e.g. out of memory) is logged, and that batch scored in-process; the
  pool is restarted on the next batch, and after 3 failures in a row scoring stays in-process;
* workers die with the trainer (:func:`_worker_start`): the kernel sends them SIGKILL when their parent ends,
  however it ends, and they leave the trainer's process group, so a Ctrl-C in the terminal, or a launcher's signal to the group, reaches only the
  trainer, which stops them itself (no traceback from each worker, no pool broken under the last step).
  The pool gets no work before every worker has left the group (a barrier the workers and the trainer meet at).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Sequence

from olmocr_rl.rewards.completions import page_body
from olmocr_rl.rewards.page_score import PageScore, score_page
from olmocr_rl.rewards.page_tests import PageKey, PageTestCache

logger = logging.getLogger(__name__)

WORKERS_ENV = "OLMOCR_RL_REWARD_WORKERS"
START_METHOD_ENV = "OLMOCR_RL_REWARD_START_METHOD"
MAX_DEFAULT_WORKERS = 16
MAX_POOL_FAILURES = 3  # consecutive failed batches before the pool is given up for the run
WORKER_START_TIMEOUT_S = 120.0  # every worker out of the trainer's process group by then, or the pool failed


def resolve_workers(workers: int | None = None) -> int:
    """How many reward worker processes to use (1 = score in the calling process).

    ``workers`` if given, else ``$OLMOCR_RL_REWARD_WORKERS``, else min(usable CPUs / local processes, 16),
    where local processes = ``$LOCAL_WORLD_SIZE`` (set by torchrun / accelerate), so that 8 trainer
    processes on one node do not each start 16 workers.
    """
    if workers is None:
        raw = os.environ.get(WORKERS_ENV)
        if raw:
            try:
                workers = int(raw)
            except ValueError:
                raise ValueError(f"${WORKERS_ENV}={raw!r} is not an integer; set it to a worker count >= 1") from None
    if workers is not None:
        if workers < 1:
            raise ValueError(f"reward workers must be >= 1 (got {workers}); use 1 to score in-process")
        return workers
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    local_processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, min(cpus // local_processes, MAX_DEFAULT_WORKERS))


def default_start_method() -> str:
    """``fork`` on Linux while it is safe, ``forkserver`` once CUDA or vLLM is up, ``spawn`` off Linux."""
    if not sys.platform.startswith("linux"):
        return "spawn"  # fork is unsafe on macOS
    return "forkserver" if _fork_unsafe() else "fork"


def _fork_unsafe() -> bool:
    """True when this process holds state a forked child must not inherit: a CUDA context or vLLM."""
    if any(name == "vllm" or name.startswith("vllm.") for name in list(sys.modules)):
        return True
    torch = sys.modules.get("torch")  # never import torch here: an unimported torch has no CUDA context
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch build without CUDA support
        return False


def score_texts(
    cache: PageTestCache, key: PageKey, texts: Sequence[str], raw_completion: bool, with_credit: bool = False
) -> list[PageScore]:
    """Score each text on the page ``key``; a page without usable tests gives empty counts (reward None).
    ``with_credit`` also sums the tests' partial credit (the continuous reward)."""
    try:
        page = cache.get(key)
    except Exception as error:  # noqa: BLE001 - the loader reports problems itself; this is a last resort
        problem = f"loading tests {key.test_ids[:3]}... from {key.jsonl_files} failed: {type(error).__name__}: {error}"
        return [PageScore(by_type={}, by_jsonl={}, load_errors=(problem,)) for _text in texts]
    scores = []
    for text in texts:
        if page.tests:
            try:
                body = page_body(text, raw_completion)
            except Exception:  # noqa: BLE001 - the splitter promises not to raise; fall back to the raw text
                body = text
            score = score_page(page.tests, body, with_credit)
        else:
            score = PageScore(by_type={}, by_jsonl={})
        scores.append(
            PageScore(
                by_type=score.by_type,
                by_jsonl=score.by_jsonl,
                errors=score.errors,
                missing_ids=page.missing_ids,
                load_errors=page.load_errors,
                credit_by_type=score.credit_by_type,
            )
        )
    return scores


# Each worker process keeps its own cache (module state of the worker, never of the trainer process).
_worker_cache: PageTestCache | None = None
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _worker_start(parent: int | None, ready=None) -> None:
    """A reward worker's first act: SIGKILL when its parent dies (Linux), out of the parent's process group, then
    say so (``ready``: the pool's barrier, which the trainer waits at before it gives the pool any work).

    ``parent``: the trainer's pid when the worker is forked from it (a worker whose parent is already gone
    then exits); None with forkserver/spawn (the parent is the fork server, which exits with the trainer).
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the worker may outlive a killed trainer
            pass
    if parent is not None and os.getppid() != parent:
        os._exit(0)  # the trainer died before prctl took effect
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    if ready is not None:
        ready.wait(timeout=WORKER_START_TIMEOUT_S)


def _score_in_worker(key: PageKey, texts: list[str], raw_completion: bool, with_credit: bool = False) -> list[PageScore]:
    global _worker_cache
    if _worker_cache is None:
        _worker_cache = PageTestCache()
    return score_texts(_worker_cache, key, texts, raw_completion, with_credit)


class BenchEvaluator:
    """Scores ``(PageKey, text)`` tasks; ``workers == 1`` scores in-process, otherwise in a process pool."""

    def __init__(self, workers: int | None = None, start_method: str | None = None):
        self.workers = resolve_workers(workers)
        # None: decided by default_start_method() when the pool starts (CUDA/vLLM may come up before that).
        self.start_method = start_method or os.environ.get(START_METHOD_ENV) or None
        self._pool_method: str | None = None  # the start method the last pool used
        if self.start_method is not None and self.start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(
                f"reward pool start method {self.start_method!r} is not available here; "
                f"choose one of {multiprocessing.get_all_start_methods()} (${START_METHOD_ENV})"
            )
        self.cache = PageTestCache()  # used by the in-process path
        self._pool: ProcessPoolExecutor | None = None
        self._failures = 0
        self.pool_disabled = False

    def evaluate(
        self, tasks: Sequence[tuple[PageKey, str]], raw_completion: bool, with_credit: bool = False
    ) -> list[PageScore]:
        """One :class:`PageScore` per task, in task order (with partial credit when ``with_credit``). Never
        raises for a worker failure."""
        chunks = _chunks(tasks, self.workers)
        if self.workers > 1 and len(tasks) > 1 and not self.pool_disabled:
            try:
                results = self._run_in_pool(chunks, raw_completion, with_credit)
                self._failures = 0
                return _unchunk(len(tasks), chunks, results)
            except Exception as error:  # noqa: BLE001 - BrokenProcessPool (a worker died) or anything else
                self._pool_failed(error)
        results = [score_texts(self.cache, key, texts, raw_completion, with_credit) for key, _indices, texts in chunks]
        return _unchunk(len(tasks), chunks, results)

    def _run_in_pool(self, chunks, raw_completion: bool, with_credit: bool = False) -> list[list[PageScore]]:
        if self._pool is None:
            self._pool_method = self.start_method or default_start_method()
            logger.info("reward worker pool: %d processes, start method %s", self.workers, self._pool_method)
            self._pool = self._start_pool()
        futures = [self._pool.submit(_score_in_worker, key, texts, raw_completion, with_credit)
                   for key, _indices, texts in chunks]
        return [future.result() for future in futures]

    def _start_pool(self) -> ProcessPoolExecutor:
        """A pool whose every worker has left the trainer's process group: each waits at a barrier after doing so
        (one task each makes the pool start them all), and so does the trainer, before any work goes out."""
        context = multiprocessing.get_context(self._pool_method)
        parent = os.getpid() if self._pool_method == "fork" else None
        ready = context.Barrier(self.workers + 1)
        pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context, initializer=_worker_start,
                                   initargs=(parent, ready))
        started = [pool.submit(os.getpid) for _ in range(self.workers)]  # no worker idle yet: one process each
        try:
            ready.wait(timeout=WORKER_START_TIMEOUT_S)
            for future in started:
                future.result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return pool

    def _pool_failed(self, error: Exception) -> None:
        self.close()
        self._failures += 1
        reason = f"{type(error).__name__}: {error}"
        if self._failures < MAX_POOL_FAILURES:
            logger.error("reward worker pool failed (%s); this batch is scored in-process, the pool restarts", reason)
            return
        self.pool_disabled = True
        logger.error(
            "reward worker pool failed %d times in a row (last: %s); scoring in the trainer process from now on. "
            "Likely causes: workers killed for memory (lower %s), or, with the %r start method, a main script "
            "whose work is not under `if __name__ == \"__main__\":` (it re-runs in every worker).",
            self._failures, reason, WORKERS_ENV, self._pool_method,
        )

    def close(self, wait: bool = False) -> None:
        """Stop the worker processes (a later batch starts a new pool). ``wait``: until they and the pool's manager
        thread have ended -- at the end of a run, so that nothing of the pool is left to the interpreter's exit
        (Python 3.11's exit hook can write to the manager's wake-up pipe while that thread closes it: "Bad file
        descriptor", exit status 1, after a pool stopped without waiting)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None

    def __del__(self):  # best effort: do not leave workers behind when the evaluator is dropped
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _chunks(tasks: Sequence[tuple[PageKey, str]], workers: int) -> list[tuple[PageKey, list[int], list[str]]]:
    """Group task indices by page, then cut each page's list into chunks of about total / (2 x workers).

    Two chunks per worker balance the load; keeping a chunk on one page means its tests load once there.
    """
    by_page: dict[PageKey, list[int]] = {}
    for index, (key, _text) in enumerate(tasks):
        by_page.setdefault(key, []).append(index)
    size = max(1, math.ceil(len(tasks) / (2 * workers)))
    chunks = []
    for key, indices in by_page.items():
        for start in range(0, len(indices), size):
            part = indices[start : start + size]
            chunks.append((key, part, [tasks[i][1] for i in part]))
    return chunks


def _unchunk(n: int, chunks, results: list[list[PageScore]]) -> list[PageScore]:
    ordered: list[PageScore | None] = [None] * n
    for (_key, indices, _texts), scores in zip(chunks, results):
        for index, score in zip(indices, scores):
            ordered[index] = score
    return ordered  # type: ignore[return-value]
