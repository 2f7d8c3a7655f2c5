"""Reward functions for GRPO on olmOCR-bench pages, with TRL's signature and olmOCR's names.

* ``olmocr_bench_reward`` / ``olmocr_bench_reward_macroavg`` — unit-test pass rate (bench_reward.py)
* ``olmocr_bench_continuous_reward[_macroavg]`` — mean partial credit per test (``bench_reward_function(...,
  continuous=True)``; the credit is ``olmocr_rl.bench.partial``'s), built by the registry only
* ``reward_front_matter`` — YAML front matter validity and agreement (front_matter_reward.py)
* ``make_reward_eos`` — builds ``reward_eos`` for a tokenizer's EOS id (eos.py)
* ``medoid_reward``, ``bench_edit_distance_reward`` — text similarity (similarity.py)
* ``reward_element_count``, ``reward_rect_tables`` — structure (structure.py)
* ``build_reward_functions`` — the reward table (``config/rewards.py``) built into TRL's functions (registry.py)

docs/rewards.md describes the scoring, the differences from olmOCR and the measured throughput.
"""

from olmocr_rl.rewards.bench_reward import (
    BenchRewardScorer,
    CompletionStats,
    bench_reward_function,
    olmocr_bench_reward,
    olmocr_bench_reward_macroavg,
)
from olmocr_rl.rewards.eos import make_reward_eos
from olmocr_rl.rewards.evaluator import resolve_workers
from olmocr_rl.rewards.front_matter_reward import reward_front_matter
from olmocr_rl.rewards.registry import REWARDS, RewardContext, RewardValue, build_reward_functions, parse_reward
from olmocr_rl.rewards.similarity import bench_edit_distance_reward, medoid_reward
from olmocr_rl.rewards.structure import reward_element_count, reward_rect_tables

__all__ = [
    "BenchRewardScorer",
    "CompletionStats",
    "REWARDS",
    "RewardContext",
    "RewardValue",
    "bench_edit_distance_reward",
    "bench_reward_function",
    "build_reward_functions",
    "make_reward_eos",
    "medoid_reward",
    "olmocr_bench_reward",
    "olmocr_bench_reward_macroavg",
    "parse_reward",
    "resolve_workers",
    "reward_element_count",
    "reward_front_matter",
    "reward_rect_tables",
]
