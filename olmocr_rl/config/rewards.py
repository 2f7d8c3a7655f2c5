"""The reward table: one :class:`Reward` per ``--reward_*`` flag, and the one parser of their values (light: no torch).

Each row says everything the package knows of a reward: its flag (``--reward_<key>``), the reward function's
``__name__`` (TRL logs ``rewards/<name>/mean``, so it is the W&B name too), the flag's help, whether a bench
JSONL may replace the weight, and where the function comes from (``function``, used as it is, or ``factory``,
called with the parsed value and the build context by ``olmocr_rl.rewards.registry``). The parser's flags,
validation, ``--print``, the builder and the docs' list all read this table; docs/rewards.md ("Adding a
reward") says how to add one.

A flag's value is absent (disabled), bare (weight 1.0), a number (that weight; negative = a penalty), or, for a
``per_file`` reward, the path of a bench JSONL (weight 1.0 on that file's tests only), since a published guide
passes ``--reward_bench ./bench_data/test1.jsonl``. :func:`flag_value` is argparse's view (the form: a number
or a ``.jsonl``); :func:`parse_reward` turns it into the :class:`RewardValue` the run uses, once, at validation
(range, file lookup), and the builder takes that value unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Reward:
    """One reward. ``function`` or ``factory`` (exactly one) is ``"module:attribute"``:

    - ``function``: the reward function itself (TRL's signature), named ``name``;
    - ``factory``: ``factory(value: RewardValue, context) -> reward function`` for a reward that needs the run's
      settings (``olmocr_rl.rewards.registry.RewardContext``: tokenizer EOS id, bench scorer, ...).
    """

    key: str
    name: str
    help: str
    function: str | None = None
    factory: str | None = None
    per_file: bool = False
    bench_tests: bool = False  # scored by the page's bench unit tests: the run logs their per-type tables

    def __post_init__(self) -> None:
        if (self.function is None) == (self.factory is None):
            raise ValueError(f"Reward {self.key!r}: give exactly one of function= or factory= ('module:attribute')")

    @property
    def flag(self) -> str:
        return f"--reward_{self.key}"

    @property
    def dest(self) -> str:
        """The flag's attribute in the parsed arguments."""
        return f"reward_{self.key}"


#: Every reward, olmOCR's in olmOCR's order (docs/design.md, "Compatibility with olmOCR's trainer"), then this
#: project's: TRL gets them so.
REWARDS: tuple[Reward, ...] = (
    Reward("bench", "olmocr_bench_reward",
           "share of the page's olmOCR-bench unit tests the completion passes (micro average); "
           "a JSONL path instead of a weight restricts the tests to that file",
           factory="olmocr_rl.rewards.registry:bench_reward", per_file=True,
           bench_tests=True),
    Reward("bench_macroavg", "olmocr_bench_reward_macroavg",
           "mean over test types of the per-type pass rates (macro average); also accepts a JSONL path",
           factory="olmocr_rl.rewards.registry:bench_macroavg_reward", per_file=True,
           bench_tests=True),
    Reward("medoid", "medoid_reward",
           "closeness (Levenshtein) to the medoid of the page's completions in the batch (experimental)",
           function="olmocr_rl.rewards.similarity:medoid_reward"),
    Reward("bench_edit_distance", "bench_edit_distance_reward",
           "rapidfuzz ratio between completion and the claude_original reference (experimental)",
           function="olmocr_rl.rewards.similarity:bench_edit_distance_reward"),
    Reward("front_matter", "reward_front_matter",
           "0.5 for valid YAML front matter, +0.1 per field equal to the reference's",
           function="olmocr_rl.rewards.front_matter_reward:reward_front_matter"),
    Reward("element_count", "reward_element_count",
           "0.5 each for matching the reference's HTML-table count and math-span count (experimental)",
           function="olmocr_rl.rewards.structure:reward_element_count"),
    Reward("rect_tables", "reward_rect_tables",
           "share of the completion's HTML tables that are rectangular; 1.0 without tables (experimental)",
           function="olmocr_rl.rewards.structure:reward_rect_tables"),
    Reward("eos", "reward_eos", "1.0 when the completion ends with the EOS token (was not truncated)",
           factory="olmocr_rl.rewards.registry:eos_reward"),
    # This project's additions, after olmOCR's eight.
    Reward("bench_continuous", "olmocr_bench_continuous_reward",
           "mean partial credit of the page's olmOCR-bench tests: 1 per passed test, up to 0.5 per failed test "
           "by how close it came (docs/rewards.md); also accepts a JSONL path",
           factory="olmocr_rl.rewards.registry:bench_continuous_reward", per_file=True,
           bench_tests=True),
    Reward("bench_continuous_macroavg", "olmocr_bench_continuous_reward_macroavg",
           "mean over test types of the per-type mean partial credit (macro average); also accepts a JSONL path",
           factory="olmocr_rl.rewards.registry:bench_continuous_macroavg_reward", per_file=True,
           bench_tests=True),
)


@dataclass(frozen=True)
class RewardValue:
    """A reward's parsed value: its weight and, for a per-file reward given a JSONL, that file (resolved path)."""

    weight: float
    jsonl: str | None = None


def reward_table() -> tuple[Reward, ...]:
    """The rewards (read at each call, so every reader sees the same table)."""
    return REWARDS


def reward(key: str) -> Reward:
    """The reward ``key`` (``bench`` or ``reward_bench``); ValueError naming every flag for an unknown one."""
    key = key[len("reward_"):] if key.startswith("reward_") else key
    for entry in reward_table():
        if entry.key == key:
            return entry
    raise ValueError(f"unknown reward {key!r}; the reward flags are {flag_list()}")


def flag_list() -> str:
    """Every reward flag, for messages."""
    return ", ".join(entry.flag for entry in reward_table())


def no_reward_message() -> str:
    """The one message for a run with every reward disabled."""
    return (f"no reward enabled: add at least one of {flag_list()} (a bare flag means weight 1.0; olmOCR 2's "
            "recipe: --reward_bench --reward_front_matter --reward_eos)")


#: :func:`no_reward_message` for the built-in table.
NO_REWARD = no_reward_message()


def flag_value(key: str, value: Any) -> float | str | None:
    """A ``--reward_<key>`` value in the form argparse keeps (and ``--print`` shows): None (disabled), a weight,
    or a ``.jsonl`` path as written. Only the form is judged here; range and file are :func:`parse_reward`'s.
    Raises ValueError with one line naming the flag and the fix."""
    entry = reward(key)
    if value is None or value is False:
        return None
    if value is True:
        return 1.0
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{entry.flag} takes an optional weight (a number), got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except ValueError:
        pass
    if not value.endswith(".jsonl"):
        also = " or the path of a bench .jsonl" if entry.per_file else ""
        raise ValueError(f"{entry.flag} takes an optional weight (a number){also}, got {value!r}")
    if not entry.per_file:
        raise ValueError(f"{entry.flag} takes a weight, not a JSONL path (only bench rewards are per-file)")
    return value


def parse_reward(key: str, value: Any, folder: str | Path | None = None) -> RewardValue | None:
    """The :class:`RewardValue` of one ``--reward_<key>`` value (any form :func:`flag_value` takes); None = disabled.

    A JSONL path is looked up as given, then by its name in ``folder`` (the train bench folder), and kept
    resolved. Raises ValueError with one line naming the flag and the fix.
    """
    entry = reward(key)
    form = flag_value(key, value)
    if form is None:
        return None
    if isinstance(form, float):
        if not math.isfinite(form):
            # Negative weights are allowed: a penalty, or (for --reward_bench -1) the sign-flip sanity check.
            raise ValueError(f"{entry.flag} {value}: the weight must be a finite number")
        return RewardValue(form)
    candidates = [Path(form)] + ([Path(folder) / Path(form).name] if folder else [])
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        looked = " and ".join(str(c) for c in candidates)
        raise ValueError(f"{entry.flag} {form}: JSONL file not found (looked at {looked}); pass a weight such as "
                         f"{entry.flag} 1.0, or the path of a JSONL in the bench folder")
    return RewardValue(1.0, str(found.resolve()))
