"""Trainer callbacks for run history and console progress (global main process only).

- :class:`MetricsFileCallback` appends every log event to ``OUTPUT_DIR/metrics.jsonl`` (one JSON
  object per line, with ``step``), the history that ``python -m olmocr_rl.report`` plots. A resumed
  run appends to the same file after ``storage.checkpoints.trim_history`` dropped the records of the
  steps after its checkpoint (they are trained again), so each step is recorded by one run. A disk that refuses
  a record (full, read-only) stops the run with the one line of a full disk at a save (a StorageError).
- :class:`ProgressTableCallback` prints one row per training log above the progress bar: step, reward, its
  std, bench pass rate overall and per test type (a column for every type the training pages have tests of,
  ``-`` in a row whose pages have none), the share of sequences vLLM's importance-sampling correction
  masked (vLLM runs), mean completion length, fraction of zero-signal groups, and seconds per step; the header
  again every 20 rows.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from transformers import TrainerCallback


class MetricsFileCallback(TrainerCallback):
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, "epoch": state.epoch, "time": time.time()}
        for key, value in logs.items():
            if isinstance(value, (int, float, str, bool)) or value is None:
                record[key] = value
        line = json.dumps(record) + "\n"
        size = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            size = self.path.stat().st_size if self.path.exists() else 0
            with self.path.open("a") as fh:
                fh.write(line)
        except OSError as exc:
            raise _append_failed(exc, self.path, size, len(line)) from None


def _append_failed(exc: OSError, path: Path, size: int | None, needed: int):
    """A record the disk refused: the file cut back to its last whole record, and the one line of a full disk at a
    save (storage.files.describe_write_failure) as a StorageError, which the CLI prints; any other OSError as is."""
    from olmocr_rl.storage import StorageError, describe_write_failure
    from olmocr_rl.storage.checkpoints import local_checkpoints

    reason = describe_write_failure(exc, path, needed)
    if reason is None:
        return exc
    if size is not None:
        try:
            with path.open("r+b") as fh:
                fh.truncate(size)  # no half record for the report to choke on
        except OSError:
            pass
    previous = [folder.name for _step, folder in local_checkpoints(path.parent)]
    kept = f"{previous[0]} is intact" if previous else "no checkpoint was saved yet"
    return StorageError(f"appending to {path} failed: {reason}; {kept}: make room (or point --output_dir at a disk "
                        "with room) and resume with --resume_from_checkpoint")


def _fmt(value, pct: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{100 * value:5.1f}%" if pct else f"{value:.3f}"


#: Optional columns of the row: (header, logs key, as a percentage), shown when the first logged row has the key.
OPTIONAL_COLUMNS = (
    ("is_mask", "sampling/is_masked_sequence_fraction", True),  # vLLM IS correction: sequences masked/truncated
    ("len", "completions/mean_length", False),
)


class ProgressTableCallback(TrainerCallback):
    """One compact row per training log, printed above the progress bar; the header every ``header_every`` rows.

    Columns: step, reward and its std, bench pass rate overall and per test type, the share of sequences vLLM's
    importance-sampling correction masked (with vLLM), mean completion length, fraction of zero-signal groups,
    seconds per step. The per-type columns are ``test_types`` (the training set's: a step whose page has no test of a
    type shows ``-`` there), or without it the types of the first row; a type that shows up later in the logs gets a
    column of its own then (the header is printed again), so no type's pass rate is left out. The other columns
    are fixed by the first row.
    """

    def __init__(self, print_fn=None, header_every: int = 20, test_types=None):
        if print_fn is None:
            from olmocr_rl.telemetry.console import write as print_fn
        self.print = print_fn
        self.header_every = header_every
        self._last_step_time: float | None = None
        self._last_step = 0
        self._types: list[str] = list(test_types or ())
        self._optional: list[tuple[str, str, bool]] | None = None  # fixed by the first row
        self._rows = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_step_time = time.time()
        self._last_step = state.global_step

    def _header(self) -> str:
        header = (["step", "reward", "r_std", "pass"] + [t[:8] for t in self._types]
                  + [name for name, _, _ in self._optional] + ["zero_sig", "s/step"])
        return " ".join(f"{h:>8}" for h in header)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "reward" not in logs:
            return
        now = time.time()
        steps = max(1, state.global_step - self._last_step)
        step_time = (now - self._last_step_time) / steps if self._last_step_time else float("nan")
        self._last_step_time, self._last_step = now, state.global_step
        if self._optional is None:
            self._optional = [column for column in OPTIONAL_COLUMNS if column[1] in logs]
        new_types = _logged_types(logs) - set(self._types)
        if new_types:  # the first row, or a type no column shows yet: a column for it from now on
            self._types += _in_bench_order(new_types)
            self._rows = 0  # the header again, with the new column
        zero = logs.get("bench_reward/frac_zero_signal_groups", logs.get("frac_reward_zero_std"))
        row = [f"{state.global_step:>8d}", f"{_fmt(logs.get('reward')):>8}", f"{_fmt(logs.get('reward_std')):>8}",
               f"{_fmt(logs.get('bench_reward/overall_pass_rate'), pct=True):>8}"]
        row += [f"{_fmt(logs.get(f'bench_reward/{t}/pass_rate'), pct=True):>8}" for t in self._types]
        row += [f"{_fmt(logs.get(key), pct=pct) if pct else _fmt_plain(logs.get(key)):>8}"
                for _, key, pct in self._optional]
        row += [f"{_fmt(zero):>8}", f"{step_time:8.2f}"]
        if self._rows % self.header_every == 0:
            self.print(self._header())
        self._rows += 1
        self.print(" ".join(row))


def _logged_types(logs: dict) -> set[str]:
    """The test types whose pass rate ``logs`` holds (``bench_reward/<type>/pass_rate``, JSONL files aside)."""
    return {key.split("/")[1] for key in logs if key.startswith("bench_reward/") and key.endswith("/pass_rate")
            and not key.split("/")[1].startswith("jsonl_")}


def _in_bench_order(types: set[str]) -> list[str]:
    """``types`` in olmOCR-bench's order of its test types (bench.test_types()), any other after them by name."""
    from olmocr_rl.bench import test_types as bench_types

    order = {name: index for index, name in enumerate(bench_types())}
    return sorted(types, key=lambda name: (order.get(name, len(order)), name))


def _fmt_plain(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f}"
