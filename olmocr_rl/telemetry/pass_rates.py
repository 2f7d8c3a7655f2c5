"""Bench-reward telemetry: per test type and per JSONL file pass rates, logged every ``logging_steps``.

The bench reward hands each scored batch to :class:`DetailedRewardLogger` (``build_reward_functions(...,
reward_logger=...)``). At every Trainer log event :class:`DetailedRewardLoggingCallback` gathers the counts of
all ranks (torch.distributed, every rank takes part), adds ``bench_reward/...`` keys to the Trainer's ``logs``
on the global main process, so they reach every ``report_to`` backend and ``trainer_state.json``, and starts a
new window. Its console table (per test type and per JSONL file) covers the steps since the last table and prints
every ``detail_steps`` steps and at the end of training (``--console_detail_steps``; default: with each
checkpoint), not at every log. The keys are olmOCR's trainer's (docs/rewards.md, "Telemetry" lists them); two
are added here:

* ``bench_reward/<type>/mean_reward``: the mean bench reward of the completions whose page has tests of that
  type (how well pages "with math" go), next to the per-test ``pass_rate``;
* ``bench_reward/frac_zero_signal_groups``: the share of GRPO groups whose bench rewards are all identical.
  A group is every completion of one page in one reward call, pooled across ranks (TRL spreads a page's
  ``num_generations`` samples over the ranks). It measures the bench reward only; TRL's
  ``frac_reward_zero_std`` measures the weighted total. Groups with fewer than two scored completions are
  not counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

PREFIX = "bench_reward"
# Rewards closer than this are "identical" (pass fractions of the same page are exact ratios anyway).
SAME_REWARD_TOLERANCE = 1e-9


@dataclass
class RewardTotals:
    """Counts accumulated since the last log event; plain containers, so they pickle for ``all_gather_object``.

    ``by_type[type] = [passed, total, completions, reward_sum]``; ``by_jsonl[basename] = [passed, total]``;
    ``groups[key] = [reward, ...]`` with key ``"<call index>:<page>"``.
    """

    completions: int = 0
    passed: int = 0
    total: int = 0
    by_type: dict[str, list[float]] = field(default_factory=dict)
    by_jsonl: dict[str, list[int]] = field(default_factory=dict)
    groups: dict[str, list[float]] = field(default_factory=dict)

    def merge(self, other: "RewardTotals") -> None:
        """Add ``other``'s counts to these (used to combine ranks)."""
        self.completions += other.completions
        self.passed += other.passed
        self.total += other.total
        for name, values in other.by_type.items():
            mine = self.by_type.setdefault(name, [0, 0, 0, 0.0])
            for k in range(4):
                mine[k] += values[k]
        for name, values in other.by_jsonl.items():
            mine = self.by_jsonl.setdefault(name, [0, 0])
            mine[0] += values[0]
            mine[1] += values[1]
        for key, rewards in other.groups.items():
            self.groups.setdefault(key, []).extend(rewards)


def zero_signal_fraction(groups: Iterable[Sequence[float]]) -> tuple[int, int]:
    """(groups whose rewards are all identical, groups with at least two rewards). Pure."""
    zero = counted = 0
    for rewards in groups:
        if len(rewards) < 2:
            continue
        counted += 1
        zero += max(rewards) - min(rewards) <= SAME_REWARD_TOLERANCE
    return zero, counted


def summarize(totals: RewardTotals, prefix: str = PREFIX) -> dict[str, float]:
    """The ``bench_reward/...`` metrics of ``totals``; rates only where their denominator is positive. Pure."""
    out: dict[str, float] = {}
    if totals.completions == 0:
        return out
    out[f"{prefix}/total_completions"] = totals.completions
    if totals.total > 0:
        out[f"{prefix}/overall_pass_rate"] = totals.passed / totals.total
    for name in sorted(totals.by_type):
        passed, total, completions, reward_sum = totals.by_type[name]
        if total > 0:
            out[f"{prefix}/{name}/pass_rate"] = passed / total
        out[f"{prefix}/{name}/total_tests"] = total
        if completions > 0:
            out[f"{prefix}/{name}/avg_tests_per_completion"] = total / completions
            out[f"{prefix}/{name}/mean_reward"] = reward_sum / completions
    for name in sorted(totals.by_jsonl):
        passed, total = totals.by_jsonl[name]
        if total > 0:
            out[f"{prefix}/jsonl_{name}/pass_rate"] = passed / total
        out[f"{prefix}/jsonl_{name}/total_tests"] = total
    zero, counted = zero_signal_fraction(totals.groups.values())
    if counted > 0:
        out[f"{prefix}/frac_zero_signal_groups"] = zero / counted
    return out


def format_table(totals: RewardTotals, step: int | None = None, span: str | None = None) -> str:
    """A readable console table of ``totals`` (overall, per type, per JSONL file, zero-signal groups); ``span``
    (e.g. ``"steps 1-25"``) names the steps it covers, else ``step``."""
    if totals.completions == 0:
        return "bench reward: no scored completions since the last log"
    where = f" over {span}" if span else ("" if step is None else f" at step {step}")
    header = f"bench reward{where}: {totals.completions} completions"
    if totals.total:
        header += f", {totals.passed}/{totals.total} tests passed ({100 * totals.passed / totals.total:.1f}%)"
    zero, counted = zero_signal_fraction(totals.groups.values())
    if counted:
        header += f", zero-signal groups {zero}/{counted} ({100 * zero / counted:.1f}%)"
    lines = [header, f"  {'test type':<24}{'pass rate':>10}{'passed':>9}{'tests':>9}{'tests/compl':>13}{'mean reward':>13}"]
    for name in sorted(totals.by_type):
        passed, total, completions, reward_sum = totals.by_type[name]
        rate = f"{100 * passed / total:.1f}%" if total else "-"
        per = f"{total / completions:.1f}" if completions else "-"
        mean = f"{reward_sum / completions:.3f}" if completions else "-"
        lines.append(f"  {name:<24}{rate:>10}{int(passed):>9}{int(total):>9}{per:>13}{mean:>13}")
    lines.append(f"  {'jsonl file':<24}{'pass rate':>10}{'passed':>9}{'tests':>9}")
    for name in sorted(totals.by_jsonl):
        passed, total = totals.by_jsonl[name]
        rate = f"{100 * passed / total:.1f}%" if total else "-"
        lines.append(f"  {name:<24}{rate:>10}{passed:>9}{total:>9}")
    return "\n".join(lines)


def _distributed_ready() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return dist.is_available() and dist.is_initialized()


class DetailedRewardLogger:
    """Accumulates the bench reward's per-completion statistics between log events.

    ``add_batch_stats`` is the bench reward's ``stats_sink``: one call per reward call, with one
    ``CompletionStats`` (or None for unscored completions) per completion. Every rank has its own logger;
    :meth:`gather` combines them.
    """

    def __init__(self) -> None:
        self.totals = RewardTotals()
        self._calls = 0  # reward calls so far; every rank calls the reward in step, so indices align

    def add_batch_stats(self, stats: Sequence[Any]) -> None:
        """Record one reward call's statistics (``CompletionStats`` or None per completion)."""
        call = self._calls
        self._calls += 1
        totals = self.totals
        for item in stats:
            if item is None:
                continue
            totals.completions += 1
            for name, (passed, total) in item.by_type.items():
                totals.passed += passed
                totals.total += total
                entry = totals.by_type.setdefault(name, [0, 0, 0, 0.0])
                entry[0] += passed
                entry[1] += total
                entry[2] += 1
                entry[3] += item.reward
            for name, (passed, total) in item.by_jsonl.items():
                entry = totals.by_jsonl.setdefault(name, [0, 0])
                entry[0] += passed
                entry[1] += total
            totals.groups.setdefault(f"{call}:{item.group}", []).append(item.reward)

    def gather(self) -> RewardTotals:
        """The totals of all ranks combined (a collective call when torch.distributed is initialised: every
        rank must call it); this rank's totals otherwise."""
        if not _distributed_ready():
            combined = RewardTotals()
            combined.merge(self.totals)
            return combined
        import torch.distributed as dist

        everyone: list[RewardTotals | None] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, self.totals)
        combined = RewardTotals()
        for totals in everyone:
            if totals is not None:
                combined.merge(totals)
        return combined

    def summary(self, totals: RewardTotals | None = None) -> dict[str, float]:
        """``bench_reward/...`` metrics of ``totals`` (default: this rank's own, not gathered)."""
        return summarize(self.totals if totals is None else totals)

    def clear(self) -> None:
        """Start a new accumulation window."""
        self.totals = RewardTotals()


class DetailedRewardLoggingCallback(TrainerCallback):
    """Adds the gathered ``bench_reward/...`` metrics to every Trainer log event (see the module docstring).

    Install it with :meth:`attach`, which puts it before the reporting callbacks (wandb, tensorboard...):
    a callback passed to ``Trainer(callbacks=...)`` runs after them, too late to add keys they report.
    Eval log events (keys starting ``eval_``) get ``eval_bench_reward/...`` keys.
    """

    def __init__(self, reward_logger: DetailedRewardLogger, console: bool = True, detail_steps: int | None = None,
                 print_fn=None):
        self.reward_logger = reward_logger
        self.console = console
        self.detail_steps = detail_steps  # None: a table at every log; 0: only at the end; N: every N steps
        if print_fn is None:
            from olmocr_rl.telemetry.console import write as print_fn
        self.print = print_fn
        self._pending = RewardTotals()  # training totals since the last table
        self._last_table_step = 0
        self._last_table_block = 0

    @classmethod
    def attach(cls, trainer: Any, reward_logger: DetailedRewardLogger, console: bool = True,
               detail_steps: int | None = None) -> "DetailedRewardLoggingCallback":
        """Create the callback and make it the first of ``trainer``'s callbacks; returns it."""
        callbacks = trainer.callback_handler.callbacks
        callbacks[:] = [cb for cb in callbacks if not isinstance(cb, cls)]
        callback = cls(reward_logger, console=console, detail_steps=detail_steps)
        callbacks.insert(0, callback)
        return callback

    def on_log(self, args, state, control, logs=None, **kwargs):
        totals = self.reward_logger.gather()  # collective: all ranks, every log event
        self.reward_logger.clear()
        if not state.is_world_process_zero or totals.completions == 0:
            return
        is_eval = logs is not None and any(str(key).startswith("eval_") for key in logs)
        metrics = summarize(totals, prefix=f"eval_{PREFIX}" if is_eval else PREFIX)
        if logs is not None:
            logs.update(metrics)
        # Trainer.log appended a copy of logs to log_history before calling back; keep that file complete too.
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(metrics)
        if not self.console:
            return
        if is_eval:
            self.print("eval " + format_table(totals, step=state.global_step))
            return
        self._pending.merge(totals)
        block = state.global_step // self.detail_steps if self.detail_steps else 0
        if self.detail_steps is None or (self.detail_steps and block > self._last_table_block):
            self._last_table_block = block
            self._print_pending(state.global_step)

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_table_step = state.global_step  # a resumed run counts from its checkpoint
        self._last_table_block = state.global_step // self.detail_steps if self.detail_steps else 0

    def on_train_end(self, args, state, control, **kwargs):
        if self.console and state.is_world_process_zero and self._pending.completions:
            self._print_pending(state.global_step)

    def _print_pending(self, step: int) -> None:
        first = self._last_table_step + 1
        span = f"steps {first}-{step}" if first < step else f"step {step}"
        self.print(format_table(self._pending, span=span))
        self._pending, self._last_table_step = RewardTotals(), step
