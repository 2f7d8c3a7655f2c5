"""From ``--reward_*`` flags to TRL's ``reward_funcs`` and ``reward_weights``.

The flag names, help lines and the parsing of their values live in ``olmocr_rl.config.rewards`` (light, shared
with the CLI); this module builds the functions. Functions are returned in olmOCR's
order and carry olmOCR's ``__name__``s, which TRL uses in ``rewards/<name>/mean``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from olmocr_rl.config.rewards import (
    BENCH_REWARDS,
    NO_REWARD,
    REWARD_FLAGS,
    REWARD_HELP,
    flag_list,
    parse_reward_value,
)
from olmocr_rl.rewards.bench_reward import BenchRewardScorer
from olmocr_rl.rewards.eos import make_reward_eos
from olmocr_rl.rewards.front_matter_reward import reward_front_matter
from olmocr_rl.rewards.similarity import bench_edit_distance_reward, medoid_reward
from olmocr_rl.rewards.structure import reward_element_count, reward_rect_tables

REWARD_FUNCTION_NAMES: dict[str, str] = {
    "bench": "olmocr_bench_reward",
    "bench_macroavg": "olmocr_bench_reward_macroavg",
    "medoid": "medoid_reward",
    "bench_edit_distance": "bench_edit_distance_reward",
    "front_matter": "reward_front_matter",
    "element_count": "reward_element_count",
    "rect_tables": "reward_rect_tables",
    "eos": "reward_eos",
}

__all__ = [
    "REWARD_FLAGS",
    "REWARD_FUNCTION_NAMES",
    "REWARD_HELP",
    "build_reward_functions",
    "flag_list",
    "parse_reward_value",
]


def build_reward_functions(
    spec: Mapping[str, float | str | bool | None],
    *,
    eos_token_id: int | Iterable[int] | None = None,
    raw_completion: bool = False,
    bench_type_filter: Sequence[str] | None = None,
    reward_logger: Any = None,
    workers: int | None = None,
) -> tuple[list[Callable[..., list[float | None]]], list[float], list[str]]:
    """``(reward_funcs, reward_weights, names)`` for the enabled rewards, in ``REWARD_FLAGS`` order.

    ``spec`` maps a reward key (``"bench"`` or ``"reward_bench"``) to None (disabled), a weight, or for the
    bench rewards a JSONL path. ``eos_token_id`` is required when ``eos`` is enabled. ``raw_completion`` feeds
    the bench tests the completion with its front matter (olmOCR's behaviour). ``bench_type_filter`` keeps only
    tests of those types. ``reward_logger`` (anything with ``add_batch_stats(list)``, e.g. the telemetry's
    ``DetailedRewardLogger``) receives per-completion statistics from exactly one bench reward, the micro one
    when both are enabled, so nothing is counted twice. Both bench rewards share one scorer: the tests run once
    per batch. ``workers`` is the reward process count (default: see ``resolve_workers``).
    Raises ValueError for unknown keys, bad values, or when no reward is enabled (listing every flag).
    """
    values: dict[str, Any] = {}
    for name, value in spec.items():
        key = name[len("reward_") :] if name.startswith("reward_") else name
        if key not in REWARD_FLAGS:
            raise ValueError(f"unknown reward {name!r}; the reward flags are {flag_list()}")
        values[key] = value
    parsed = {key: parse_reward_value(key, values.get(key)) for key in REWARD_FLAGS}
    enabled = [key for key in REWARD_FLAGS if parsed[key][0] is not None]
    if not enabled:
        raise ValueError(NO_REWARD)

    scorer = None
    if any(key in enabled for key in BENCH_REWARDS):
        sink = reward_logger.add_batch_stats if reward_logger is not None else None
        scorer = BenchRewardScorer(workers=workers, stats_sink=sink)
    recording_key = "bench" if "bench" in enabled else "bench_macroavg"

    funcs, weights, names = [], [], []
    for key in enabled:
        weight, jsonl_path = parsed[key]
        if key in BENCH_REWARDS:
            func = _bench_function(
                scorer,
                macro_average=key == "bench_macroavg",
                raw_completion=raw_completion,
                type_filter=bench_type_filter,
                restrict_to_jsonl=jsonl_path,
                record_stats=key == recording_key,
            )
        elif key == "eos":
            if eos_token_id is None:
                raise ValueError("--reward_eos needs the tokenizer's eos_token_id, which is None for this tokenizer")
            func = make_reward_eos(eos_token_id)
        else:
            func = _PLAIN_REWARDS[key]
        assert func.__name__ == REWARD_FUNCTION_NAMES[key]
        funcs.append(func)
        weights.append(weight)
        names.append(func.__name__)
    return funcs, weights, names


_PLAIN_REWARDS = {
    "medoid": medoid_reward,
    "bench_edit_distance": bench_edit_distance_reward,
    "front_matter": reward_front_matter,
    "element_count": reward_element_count,
    "rect_tables": reward_rect_tables,
}


def _bench_function(
    scorer: BenchRewardScorer,
    *,
    macro_average: bool,
    raw_completion: bool,
    type_filter: Sequence[str] | None,
    restrict_to_jsonl: str | None,
    record_stats: bool,
) -> Callable[..., list[float | None]]:
    """A bench reward bound to ``scorer`` and these settings, named as olmOCR names it."""

    def bench_reward(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Any = None,
        pdf_path: Sequence[str] | None = None,
        jsonl_file: Sequence[str] | None = None,
        test_ids: Sequence[Sequence[str]] | None = None,
        *,
        jsonl_files: Sequence[Sequence[str]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        return scorer.rewards(
            completions,
            pdf_path=pdf_path,
            jsonl_file=jsonl_file,
            jsonl_files=jsonl_files,
            test_ids=test_ids,
            macro_average=macro_average,
            raw_completion=raw_completion,
            type_filter=type_filter,
            restrict_to_jsonl=restrict_to_jsonl,
            record_stats=record_stats,
        )

    name = "olmocr_bench_reward_macroavg" if macro_average else "olmocr_bench_reward"
    bench_reward.__name__ = bench_reward.__qualname__ = name
    bench_reward.scorer = scorer  # type: ignore[attr-defined]  # lets the caller close the worker pool
    return bench_reward
