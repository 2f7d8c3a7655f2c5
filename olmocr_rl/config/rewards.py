"""The ``--reward_*`` flags: names, help lines, and the one parser of their values (light: no torch).

A reward flag's value is absent (disabled), bare (weight 1.0), a number (that weight; negative = a
penalty), or for the two bench rewards the path of a bench JSONL (weight 1.0 on that file's tests only),
since a published guide passes ``--reward_bench ./bench_data/test1.jsonl``. ``parse_reward_value`` is the
only place these rules live; the CLI (``olmocr_rl.config``) and ``build_reward_functions`` both call it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

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

#: The rewards whose value may be a JSONL path.
BENCH_REWARDS: tuple[str, ...] = ("bench", "bench_macroavg")


def flag_list() -> str:
    """Every reward flag, for messages."""
    return ", ".join(f"--reward_{key}" for key in REWARD_FLAGS)


#: The one message for a run with every reward disabled.
NO_REWARD = (f"no reward enabled: add at least one of {flag_list()} (a bare flag means weight 1.0; olmOCR 2's "
             "recipe: --reward_bench --reward_front_matter --reward_eos)")


def parse_reward_value(
    key: str, value: Any, folder: str | Path | None = None, *, form_only: bool = False
) -> tuple[float | None, str | None]:
    """``(weight, jsonl_path)`` of one ``--reward_<key>`` value; weight None = disabled.

    A JSONL path is looked up as given, then by its name in ``folder`` (the train bench folder), and
    returned resolved. ``form_only`` checks only that the value is a number or a .jsonl path (what argparse
    judges); the weight's range and the file are then left to validation.
    Raises ValueError with one line naming the flag and the fix.
    """
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
            return 1.0, _jsonl_value(key, value, folder, form_only)
    else:
        raise ValueError(f"{flag} takes an optional weight (a number), got {type(value).__name__} {value!r}")
    if not form_only and not math.isfinite(weight):
        # Negative weights are allowed: a penalty, or (for --reward_bench -1) the sign-flip sanity check.
        raise ValueError(f"{flag} {value}: the weight must be a finite number")
    return weight, None


def _jsonl_value(key: str, value: str, folder: str | Path | None, form_only: bool) -> str:
    """The JSONL file a reward flag names, checked in the order the rules are documented above."""
    flag = f"--reward_{key}"
    if not value.endswith(".jsonl"):
        also = " or the path of a bench .jsonl" if key in BENCH_REWARDS else ""
        raise ValueError(f"{flag} takes an optional weight (a number){also}, got {value!r}")
    if key not in BENCH_REWARDS:
        raise ValueError(f"{flag} takes a weight, not a JSONL path (only bench rewards are per-file)")
    if form_only:
        return value
    candidates = [Path(value)] + ([Path(folder) / Path(value).name] if folder else [])
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        looked = " and ".join(str(c) for c in candidates)
        raise ValueError(f"{flag} {value}: JSONL file not found (looked at {looked}); pass a weight such as "
                         f"{flag} 1.0, or the path of a JSONL in the bench folder")
    return str(found.resolve())
