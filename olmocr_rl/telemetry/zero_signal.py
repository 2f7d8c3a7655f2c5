"""One warning when a run's GRPO groups carry (almost) no learning signal.

A group is the ``num_generations`` samples of one page; when every sample gets the same reward, every advantage
is 0 and the group teaches the model nothing (``--olmorl`` drops such groups from the loss). A run where nearly
all groups are like that is training on nothing: the model gives every sample of a page the same score -- it does
not read these pages (a model warm-started on other pages writes their text for any page), its completions are
cut short by ``--max_completion_length``, or it fails (or passes) the same tests every time.

:class:`ZeroSignalWarningCallback` reads the share the console row shows (``bench_reward/frac_zero_signal_groups``,
else TRL's ``frac_reward_zero_std``) at each training log. Once the latest logs cover at least
``WINDOW_STEPS`` optimizer steps and at least ``WARN_FRACTION`` of their groups (weighted by the steps each log
covers) had identical rewards, it logs one warning line, once a run: what it means, the numbers that tell which
cause it is (mean completion length against the limit, the share cut short, the bench pass rate), and what to do.
"""

from __future__ import annotations

import logging
from collections import deque

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

#: The warning needs the logs of at least this many optimizer steps (a few unlucky steps are no verdict).
WINDOW_STEPS = 10
#: ... in which at least this share of the groups had identical rewards.
WARN_FRACTION = 0.95
#: The keys of the zero-signal share, first found wins (the console row's choice).
ZERO_SIGNAL_KEYS = ("bench_reward/frac_zero_signal_groups", "frac_reward_zero_std")


class ZeroSignalWindow:
    """The zero-signal share over the latest logs that cover at least ``steps`` optimizer steps. Pure."""

    def __init__(self, steps: int = WINDOW_STEPS) -> None:
        self.steps = steps
        self._logs: deque[tuple[int, int, float, dict]] = deque()  # (first step, steps covered, share, extras)

    def add(self, first_step: int, steps: int, share: float, extras: dict | None = None) -> None:
        """A log covering ``steps`` steps from ``first_step`` on, ``share`` of its groups zero-signal; ``extras``:
        other numbers of the log to average over the window (completion length, pass rate, ...)."""
        self._logs.append((first_step, max(1, steps), share, dict(extras or {})))
        while len(self._logs) > 1 and sum(n for _, n, _, _ in self._logs) - self._logs[0][1] >= self.steps:
            self._logs.popleft()  # the logs after the oldest still cover the window

    def covered(self) -> int:
        return sum(n for _, n, _, _ in self._logs)

    def share(self) -> float:
        """The step-weighted zero-signal share of the window."""
        return sum(n * share for _, n, share, _ in self._logs) / max(1, self.covered())

    def mean(self, key: str) -> float | None:
        """The step-weighted mean of extra ``key`` over the logs of the window that have it."""
        values = [(n, extras[key]) for _, n, _, extras in self._logs if extras.get(key) is not None]
        return sum(n * v for n, v in values) / sum(n for n, _ in values) if values else None

    def span(self) -> tuple[int, int]:
        """(first, last) step of the window."""
        return self._logs[0][0], self._logs[-1][0] + self._logs[-1][1] - 1


def zero_signal_warning(window: ZeroSignalWindow, temperature: float | None, max_completion_length: int | None
                        ) -> str | None:
    """The warning line for ``window``, or None while it covers fewer than ``WINDOW_STEPS`` steps or its share is
    below ``WARN_FRACTION``."""
    if window.covered() < window.steps or window.share() < WARN_FRACTION:
        return None
    first, last = window.span()
    length, clipped, passed = (window.mean(key) for key in
                               ("completions/mean_length", "completions/clipped_ratio", "pass_rate"))
    seen = []
    if length is not None:
        limit = f" of --max_completion_length {max_completion_length}" if max_completion_length else ""
        cut = f", {100 * clipped:.0f}% cut short there" if clipped is not None else ""
        seen.append(f"mean completion length {length:.0f}{limit}{cut}")
    if passed is not None:
        seen.append(f"bench pass rate {100 * passed:.1f}%")
    numbers = f" ({'; '.join(seen)})" if seen else ""
    return (f"zero signal: in {100 * window.share():.0f}% of the GRPO groups of steps {first}-{last} every sample of "
            "the page got the same reward, so these steps teach the model nothing: it gives every sample the same "
            "score -- it does not read these pages (a model warm-started on other pages, like the CPU demo's on "
            "simple_lines, writes their text for any page), its completions are too short, or all fail (or pass) "
            f"the same tests{numbers}. To get a signal: warm-start the model on pages like these first (`python -m "
            "olmocr_rl.tiny_model OUT --sft BENCH_DIR` makes a tiny model warm-started on BENCH_DIR/claude_original; "
            "docs/recipe.md), raise --temperature"
            + (f" (now {temperature})" if temperature is not None else "")
            + ", or lengthen --max_completion_length"
            + (f" (now {max_completion_length})" if max_completion_length else ""))


class ZeroSignalWarningCallback(TrainerCallback):
    """Logs :func:`zero_signal_warning`'s line once a run, on the global main process (module docstring)."""

    def __init__(self, window_steps: int = WINDOW_STEPS) -> None:
        self.window = ZeroSignalWindow(window_steps)
        self.warned = False
        self._last_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_step = state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.warned or not state.is_world_process_zero or not logs or "reward" not in logs:
            return
        share = next((logs[key] for key in ZERO_SIGNAL_KEYS if logs.get(key) is not None), None)
        first, steps = self._last_step + 1, state.global_step - self._last_step
        self._last_step = state.global_step
        if share is None or steps < 1:
            return
        extras = {key: logs.get(key) for key in ("completions/mean_length", "completions/clipped_ratio")}
        extras["pass_rate"] = logs.get("bench_reward/overall_pass_rate")
        self.window.add(first, steps, share, extras)
        line = zero_signal_warning(self.window, getattr(args, "temperature", None),
                                   getattr(args, "max_completion_length", None))
        if line is not None:
            self.warned = True
            logger.warning("%s", line)
