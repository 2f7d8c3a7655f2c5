"""From ``--reward_*`` flags to TRL's ``reward_funcs`` and ``reward_weights``.

Each flag takes an optional value: absent = disabled, bare = weight 1.0, a number = that weight. The two
bench flags also accept a JSONL path (weight 1.0, the page's tests restricted to that file), since a
published guide passes ``--reward_bench ./bench_data/test1.jsonl``. Functions are returned in olmOCR's
order and carry olmOCR's ``__name__``s, which TRL uses in ``rewards/<name>/mean``.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Iterable, Mapping, Sequence

from olmocr_rl.rewards.bench_reward import BenchRewardScorer
from olmocr_rl.rewards.eos import make_reward_eos
from olmocr_rl.rewards.front_matter_reward import reward_front_matter
from olmocr_rl.rewards.similarity import bench_edit_distance_reward, medoid_reward
from olmocr_rl.rewards.structure import reward_element_count, reward_rect_tables

# olmOCR's order (docs/design.md, "Compatibility with olmOCR's trainer"); the CLI flag of each is ``--reward_<key>``.
REWARD_FLAGS: tuple[str, ...] = (
    "bench",
    "bench_macroavg",
    "medoid",
    "bench_edit_distance",
    "front_matter",
    "element_count",
    "rect_tables",
    "eos",
)

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

REWARD_HELP: dict[str, str] = {
    "bench": "share of the page's olmOCR-bench unit tests the completion passes (micro average); "
    "a JSONL path instead of a weight restricts the tests to that file",
    "bench_macroavg": "mean over test types of the per-type pass rates (macro average); also accepts a JSONL path",
    "medoid": "closeness (Levenshtein) to the medoid of the page's completions in the batch (experimental)",
    "bench_edit_distance": "rapidfuzz ratio between completion and the claude_original reference (experimental)",
    "front_matter": "0.5 for valid YAML front matter, +0.1 per field equal to the reference's",
    "element_count": "0.5 each for matching the reference's HTML-table count and math-span count (experimental)",
    "rect_tables": "share of the completion's HTML tables that are rectangular; 1.0 without tables (experimental)",
    "eos": "1.0 when the completion ends with the EOS token (was not truncated)",
}

_BENCH_KEYS = ("bench", "bench_macroavg")


def flag_list() -> str:
    """Every reward flag, for messages."""
    return ", ".join(f"--reward_{key}" for key in REWARD_FLAGS)


def parse_reward_value(key: str, value: Any) -> tuple[float | None, str | None]:
    """``(weight, jsonl_path)`` for one flag value; weight None = disabled. Raises ValueError naming the flag."""
    flag = f"--reward_{key}"
    if value is None or value is False:
        return None, None
    if value is True:
        return 1.0, None
    if isinstance(value, (int, float)):
        weight = float(value)
    elif isinstance(value, str):
        try:
            weight = float(value)
        except ValueError:
            if key not in _BENCH_KEYS:
                raise ValueError(f"{flag} takes an optional weight (a number), got {value!r}") from None
            if not os.path.isfile(value):
                raise ValueError(
                    f"{flag} {value!r}: no such JSONL file; pass a weight (e.g. {flag} 1.0) or an existing bench JSONL path"
                ) from None
            return 1.0, value
    else:
        raise ValueError(f"{flag} takes an optional weight (a number), got {type(value).__name__} {value!r}")
    if not math.isfinite(weight):
        raise ValueError(f"{flag} weight must be a finite number, got {value!r}")
    return weight, None


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
        raise ValueError(
            f"no reward enabled: pass at least one of {flag_list()} "
            "(a bare flag means weight 1.0, e.g. --reward_bench --reward_front_matter --reward_eos)"
        )

    scorer = None
    if any(key in enabled for key in _BENCH_KEYS):
        sink = reward_logger.add_batch_stats if reward_logger is not None else None
        scorer = BenchRewardScorer(workers=workers, stats_sink=sink)
    recording_key = "bench" if "bench" in enabled else "bench_macroavg"

    funcs, weights, names = [], [], []
    for key in enabled:
        weight, jsonl_path = parsed[key]
        if key in _BENCH_KEYS:
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
