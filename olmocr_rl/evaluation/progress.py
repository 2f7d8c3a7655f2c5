"""The progress an evaluation prints on stderr: on a terminal one line redrawn, in a log one line per finished page
(and, under olmOCR's pipeline, one per attempt round).

The rate and time left come from the work done in this session: pages under ``--protocol single`` (every page is
one request of K sequences); attempts under ``--protocol olmocr-pipeline``, where a page may take up to
``max_attempts`` of them and pages finish in any round. There the work left is each unfinished transcription's
expected attempts: as many as the finished ones took on average (at least one more than it has had); while none
has finished, one more than the most any has had.
"""

from __future__ import annotations

import sys
import time


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


class Progress:
    """Counts pages (and attempts, rounds) and prints them; ``resumed`` pages were done by an earlier session."""

    def __init__(self, total: int, *, resumed: int = 0, repeats: int = 1, max_attempts: int | None = None,
                 label: str = "evaluate", stream=None, width: int = 24):
        self.total, self.resumed, self.repeats, self.max_attempts = total, resumed, repeats, max_attempts
        self.label, self.width = label, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.perf_counter()
        self.done = resumed  # pages finished, this session's and earlier ones
        self.attempts = 0  # requests answered this session (pipeline)
        self.finished_repeats = 0  # transcriptions finished this session (pipeline)
        self.finished_attempts = 0  # the attempts those took
        self.pending: dict[tuple[int, int], int] = {}  # unfinished transcription -> attempts it has had (pipeline)
        self.round = 0

    @property
    def pipeline(self) -> bool:
        return self.max_attempts is not None

    def rate(self) -> float:
        """Work units per second this session: pages (single) or attempts (pipeline)."""
        elapsed = time.perf_counter() - self.started
        work = self.attempts if self.pipeline else self.done - self.resumed
        return work / elapsed if elapsed > 0 else 0.0

    def work_left(self) -> float:
        """Pages left (single), or the expected attempts left (pipeline: see the module docstring)."""
        if not self.pipeline:
            return self.total - self.done
        if self.finished_repeats:
            mean = self.finished_attempts / self.finished_repeats
        else:  # none finished yet: each is expected to need at least one attempt more than any has had
            mean = 1.0 + max(self.pending.values(), default=0)
        started = len({page for page, _ in self.pending})
        unstarted = (self.total - self.done - started) * self.repeats
        left = sum(max(1.0, mean - had) for had in self.pending.values())
        return left + unstarted * mean

    def line(self, note: str = "") -> str:
        filled = int(self.width * self.done / self.total) if self.total else self.width
        rate, left = self.rate(), self.work_left()
        eta = f", ~{_duration(left / rate)} left" if rate > 0 and self.done < self.total else ""
        if self.pipeline:
            speed = (f"round {self.round} ({min(self.round, self.max_attempts)} of up to {self.max_attempts} "
                     f"attempts), {self.attempts} attempt(s) answered, {rate:.2f} attempts/s")
        else:
            speed = f"{rate:.2f} pages/s"
        earlier = f" ({self.resumed} from an earlier run)" if self.resumed else ""
        return (f"[{self.label}] |{'#' * filled}{'.' * (self.width - filled)}| {self.done}/{self.total} pages"
                f"{earlier}, {speed}{eta}{f'  {note}' if note else ''}")

    def _show(self, note: str = "", *, log: bool) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line(note))
        elif log:
            self.stream.write(self.line(note) + "\n")
        else:
            return
        self.stream.flush()

    # --- events -------------------------------------------------------------------------------------------------

    def start_round(self, pending: dict[tuple[int, int], int]) -> None:
        """A pipeline round begins: ``pending`` maps each unfinished (page, repeat) to the attempts it has had."""
        self.round = 1 + max(pending.values(), default=0)
        self.pending = dict(pending)

    def attempt_done(self, key: tuple[int, int] | None = None, finished: bool = False) -> None:
        """One pipeline request answered (``key``: its page and repeat; ``finished``: that transcription is done)."""
        self.attempts += 1
        if key is not None:
            had = self.pending.pop(key, 0) + 1
            if finished:
                self.finished_repeats += 1
                self.finished_attempts += had
            else:
                self.pending[key] = had
        self._show(log=False)

    def round_done(self, sent: int, finished: int, note: str = "") -> None:
        """A pipeline round ended: ``sent`` attempts, ``finished`` transcriptions done in it."""
        self._show(f"round {self.round}: {sent} attempt(s), {finished} transcription(s) finished{note}", log=True)

    def page_done(self, note: str = "") -> None:
        self.done += 1
        self._show(note, log=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
