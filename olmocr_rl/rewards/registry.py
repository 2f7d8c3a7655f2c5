"""From the reward table (``olmocr_rl.config.rewards.REWARDS``) and the parsed values to TRL's ``reward_funcs`` and
``reward_weights``.

Each enabled row's ``function`` is used as it is, or its ``factory(value, context)`` builds the function from the
parsed :class:`~olmocr_rl.config.rewards.RewardValue` and the :class:`RewardContext`. Functions come in the
table's order (olmOCR's) and carry the table's names, which TRL logs as ``rewards/<name>/mean``. The factories of
the built-in rewards that need the run's settings (the two bench rewards, EOS) are below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from olmocr_rl.config.rewards import (
    REWARDS,
    Reward,
    RewardValue,
    flag_list,
    no_reward_message,
    parse_reward,
    reward,
    reward_table,
)
from olmocr_rl.rewards.bench_reward import BenchRewardScorer, bench_reward_function
from olmocr_rl.rewards.eos import make_reward_eos

__all__ = ["REWARDS", "RewardContext", "RewardValue", "build_reward_functions", "flag_list", "parse_reward"]

RewardFunction = Callable[..., list[float | None]]


@dataclass
class RewardContext:
    """What a reward factory may use besides its value: the run's settings, and the bench scorer both bench
    rewards share (created by the first, which is also the one that records telemetry)."""

    eos_token_id: int | Iterable[int] | None = None
    raw_completion: bool = False
    bench_type_filter: Sequence[str] | None = None
    reward_logger: Any = None
    workers: int | None = None
    with_credit: bool = False  # a continuous bench reward is enabled: score batches with partial credit once
    _scorer: BenchRewardScorer | None = field(default=None, init=False, repr=False)

    def bench_scorer(self) -> tuple[BenchRewardScorer, bool]:
        """``(scorer, first)``: the one scorer of the bench rewards (the tests run once per batch) and whether this
        caller is its first user, the one that records the per-completion statistics (nothing is counted twice)."""
        if self._scorer is not None:
            return self._scorer, False
        sink = self.reward_logger.add_batch_stats if self.reward_logger is not None else None
        self._scorer = BenchRewardScorer(workers=self.workers, stats_sink=sink, with_credit=self.with_credit)
        return self._scorer, True


def build_reward_functions(
    spec: Mapping[str, RewardValue | float | str | bool | None],
    *,
    eos_token_id: int | Iterable[int] | None = None,
    raw_completion: bool = False,
    bench_type_filter: Sequence[str] | None = None,
    reward_logger: Any = None,
    workers: int | None = None,
) -> tuple[list[RewardFunction], list[float], list[str]]:
    """``(reward_funcs, reward_weights, names)`` for the enabled rewards, in the table's order.

    ``spec`` maps a reward key (``"bench"`` or ``"reward_bench"``) to its value: validation's
    :class:`RewardValue` (``ResolvedConfig.rewards``), taken as it is, or a flag value as a caller writes it
    (None = disabled, a weight, a bench JSONL path), parsed here by the same ``parse_reward``.
    ``eos_token_id`` is required when ``eos`` is enabled. ``raw_completion`` feeds the bench tests the completion
    with its front matter (olmOCR's behaviour). ``bench_type_filter`` keeps only tests of those types.
    ``reward_logger`` (anything with ``add_batch_stats(list)``, e.g. the telemetry's ``DetailedRewardLogger``)
    receives per-completion statistics from exactly one bench reward, the micro one when both are enabled.
    ``workers`` is the reward process count (default: see ``resolve_workers``).
    Raises ValueError for unknown keys, bad values, or when no reward is enabled (listing every flag).
    """
    values: dict[str, RewardValue] = {}
    for name, value in spec.items():
        entry = reward(name)  # ValueError naming every flag for an unknown one
        parsed = value if isinstance(value, RewardValue) else parse_reward(entry.key, value)
        if parsed is not None:
            values[entry.key] = parsed
    enabled = [entry for entry in reward_table() if entry.key in values]
    if not enabled:
        raise ValueError(no_reward_message())
    context = RewardContext(eos_token_id=eos_token_id, raw_completion=raw_completion,
                            bench_type_filter=bench_type_filter, reward_logger=reward_logger, workers=workers,
                            with_credit=any(entry.key in CONTINUOUS_KEYS for entry in enabled))
    funcs = [_build(entry, values[entry.key], context) for entry in enabled]
    return funcs, [values[entry.key].weight for entry in enabled], [entry.name for entry in enabled]


def _resolve(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _build(entry: Reward, value: RewardValue, context: RewardContext) -> RewardFunction:
    """The row's reward function, checked to carry the row's name (TRL logs rewards by ``__name__``)."""
    func = _resolve(entry.function) if entry.function else _resolve(entry.factory)(value, context)
    if getattr(func, "__name__", None) != entry.name:
        raise TypeError(f"{entry.function or entry.factory} gave a reward function named "
                        f"{getattr(func, '__name__', None)!r}, but the reward table (config/rewards.py) names "
                        f"{entry.flag} {entry.name!r}: TRL and W&B would log it under another name; rename one")
    return func


# ---- factories of the built-in rewards (the table's factory= entries) ------------------------------------


#: The continuous bench rewards (their scorer computes partial credit).
CONTINUOUS_KEYS = ("bench_continuous", "bench_continuous_macroavg")


def _bench(value: RewardValue, context: RewardContext, *, macro_average: bool, continuous: bool = False) -> RewardFunction:
    scorer, first = context.bench_scorer()
    return bench_reward_function(scorer, macro_average=macro_average, raw_completion=context.raw_completion,
                                 type_filter=context.bench_type_filter, restrict_to_jsonl=value.jsonl,
                                 record_stats=first, continuous=continuous)


def bench_reward(value: RewardValue, context: RewardContext) -> RewardFunction:
    """``olmocr_bench_reward`` on the shared scorer (``value.jsonl``: only that file's tests)."""
    return _bench(value, context, macro_average=False)


def bench_macroavg_reward(value: RewardValue, context: RewardContext) -> RewardFunction:
    """``olmocr_bench_reward_macroavg`` on the shared scorer (``value.jsonl``: only that file's tests)."""
    return _bench(value, context, macro_average=True)


def bench_continuous_reward(value: RewardValue, context: RewardContext) -> RewardFunction:
    """``olmocr_bench_continuous_reward``: the mean partial credit of the page's tests (docs/rewards.md)."""
    return _bench(value, context, macro_average=False, continuous=True)


def bench_continuous_macroavg_reward(value: RewardValue, context: RewardContext) -> RewardFunction:
    """``olmocr_bench_continuous_reward_macroavg``: the mean over test types of each type's mean partial credit."""
    return _bench(value, context, macro_average=True, continuous=True)


def eos_reward(value: RewardValue, context: RewardContext) -> RewardFunction:
    """``reward_eos`` for the tokenizer's EOS id(s)."""
    if context.eos_token_id is None:
        raise ValueError("--reward_eos needs the tokenizer's eos_token_id, which is None for this tokenizer")
    return make_reward_eos(context.eos_token_id)
