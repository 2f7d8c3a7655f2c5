"""The CPU demo pointed at one's own bench folder: the config's page filter said in one line with the folder's real
page names and the command that lists them all, an `absent` column in the row whatever the first page holds, and
one warning when nearly every GRPO group's rewards are identical."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from transformers import TrainerState

from olmocr_rl import grpo_train, validate_bench
from olmocr_rl.config import parse_args, validate
from olmocr_rl.data.validation import validate_bench_folder
from olmocr_rl.telemetry.history import ProgressTableCallback
from olmocr_rl.telemetry.zero_signal import ZeroSignalWarningCallback, ZeroSignalWindow, zero_signal_warning

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "bench_data_sample"
DEMO_CONFIG = "configs/tiny-cpu.yaml"
OWN_PDFS = ("counting.pdf", "table.pdf", "two_columns.pdf")  # no simple_lines: the demo config's page


@pytest.fixture
def own_folder(tmp_path) -> Path:
    """A bench folder of a few of the sample's pages, without the demo config's simple_lines."""
    folder = tmp_path / "my bench"
    (folder / "pdfs").mkdir(parents=True)
    for pdf in OWN_PDFS:
        shutil.copy(SAMPLE / "pdfs" / pdf, folder / "pdfs" / pdf)
    lines = [line for jsonl in sorted(SAMPLE.glob("*.jsonl")) for line in jsonl.read_text().splitlines()
             if any(f'"pdf": "{pdf}"' in line for pdf in OWN_PDFS)]
    (folder / "mine.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _datasets(folder: Path, tmp_path: Path, *flags: str):
    """The training CLI's dataset phase, with the demo's config and ``flags`` on the command line."""
    cfg = validate(parse_args(["--config", str(REPO_ROOT / DEMO_CONFIG), "--train_bench_data_folder", str(folder),
                               "--output_dir", str(tmp_path / "out"), *flags]))
    return grpo_train._build_datasets(cfg, {str(folder): validate_bench_folder(str(folder))})


def test_the_configs_page_filter_is_named_with_the_real_pages_and_a_command_that_lists_them(own_folder, tmp_path,
                                                                                             capsys):
    config = str(REPO_ROOT / DEMO_CONFIG)
    with pytest.raises(grpo_train._Stop) as stop:
        _datasets(own_folder, tmp_path)
    message = stop.value.message
    assert message.startswith(f"--pages 'simple_lines' (the `pages:` line of {config}) leaves no page of "
                              f"{own_folder}: its 4 pages are named <pdf under pdfs/>:<page>: counting.pdf:1, "
                              "counting.pdf:2, table.pdf:1, ... (1 more; `python -m olmocr_rl.validate_bench ")
    assert f"delete the `pages:` line of {config} or pass --pages ''" in message and "\n" not in message
    command = shlex.split(message.split("`")[3])  # the command the message gives, run as written
    assert command[:3] == ["python", "-m", "olmocr_rl.validate_bench"] and "--list_pages" in command
    assert validate_bench.main(command[3:]) == 0
    assert capsys.readouterr().out.split() == ["counting.pdf:1", "counting.pdf:2", "table.pdf:1", "two_columns.pdf:1"]

    with pytest.raises(grpo_train._Stop) as stop:  # the same filter given on the command line: said so
        _datasets(own_folder, tmp_path, "--pages", "simple_lines", "--exclude_pages", "table")
    assert stop.value.message.startswith("--pages 'simple_lines' (on the command line) with --exclude_pages 'table' "
                                         "(on the command line) leave no page")
    assert stop.value.message.endswith("to train on every page, pass --pages '' and pass --exclude_pages ''")

    train, _ = _datasets(own_folder, tmp_path, "--pages", "")  # the fix the message gives: every page
    assert len(train) == 4 and train.summary["dropped_pages_by_page_filter"] == 0


def test_list_pages_follows_the_type_filter(capsys):
    assert validate_bench.main([str(SAMPLE), "--list_pages", "--bench_type_filter", "math"]) == 0
    assert capsys.readouterr().out.split() == ["equations.pdf:1"]


def _state(step: int) -> TrainerState:
    state = TrainerState(is_world_process_zero=True, is_local_process_zero=True)
    state.global_step = step
    return state


def _bench_logs(**rates: float) -> dict:
    return {"reward": 0.5, "reward_std": 0.0, **{f"bench_reward/{t}/pass_rate": r for t, r in rates.items()}}


def test_the_row_has_a_column_for_every_test_type_of_the_training_pages():
    printed: list[str] = []
    table = ProgressTableCallback(print_fn=printed.append, test_types=["present", "absent", "order", "baseline"])
    table.on_train_begin(None, _state(0), None)
    table.on_log(None, _state(1), None, logs=_bench_logs(present=0.0, order=0.5, baseline=1.0))  # no absent test
    table.on_log(None, _state(2), None, logs=_bench_logs(present=0.0, absent=1.0, baseline=1.0))
    assert printed[0].split()[4:8] == ["present", "absent", "order", "baseline"]
    assert printed[1].split()[4:8] == ["0.0%", "-", "50.0%", "100.0%"]
    assert printed[2].split()[4:8] == ["0.0%", "100.0%", "-", "100.0%"]


def test_without_the_types_a_type_first_seen_later_gets_its_column_and_the_header_again():
    printed: list[str] = []
    table = ProgressTableCallback(print_fn=printed.append)
    table.on_train_begin(None, _state(0), None)
    table.on_log(None, _state(1), None, logs=_bench_logs(present=0.25, order=0.5))
    table.on_log(None, _state(2), None, logs=_bench_logs(present=0.75, absent=1.0))
    assert printed[0].split()[4:6] == ["present", "order"] and printed[1].split()[4:6] == ["25.0%", "50.0%"]
    assert printed[2].split()[4:7] == ["present", "order", "absent"]  # the header again, the new column last
    assert printed[3].split()[4:7] == ["75.0%", "-", "100.0%"]


class _Args:
    temperature, max_completion_length = 1.0, 64


def _run_zero_signal(shares, logging_steps: int = 1) -> tuple[list[int], list[str]]:
    """Feed a run's zero-signal shares (one per log) to the callback: the steps it warned at, and the lines."""
    callback, warned, lines = ZeroSignalWarningCallback(), [], []
    callback.on_train_begin(_Args(), _state(0), None)
    import logging

    class Catch(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Catch()
    logger = logging.getLogger("olmocr_rl.telemetry.zero_signal")
    logger.addHandler(handler)
    try:
        for index, share in enumerate(shares, start=1):
            before = len(lines)
            logs = {"reward": 0.3, "bench_reward/frac_zero_signal_groups": share, "completions/mean_length": 64.0,
                    "completions/clipped_ratio": 1.0, "bench_reward/overall_pass_rate": 0.316}
            callback.on_log(_Args(), _state(index * logging_steps), None, logs=logs)
            warned += [index * logging_steps] if len(lines) > before else []
    finally:
        logger.removeHandler(handler)
    return warned, lines


def test_a_run_of_zero_signal_groups_warns_once_after_ten_steps_in_one_line():
    warned, lines = _run_zero_signal([1.0] * 30)
    assert warned == [10]  # not before the window is full, once a run
    line = lines[0]
    assert line.startswith("zero signal: in 100% of the GRPO groups of steps 1-10 every sample of the page got the "
                           "same reward") and "\n" not in line
    for said in ("does not read these pages", "too short", "mean completion length 64 of --max_completion_length 64, "
                 "100% cut short there; bench pass rate 31.6%", "python -m olmocr_rl.tiny_model OUT --sft BENCH_DIR",
                 "raise --temperature (now 1.0)", "lengthen --max_completion_length (now 64)"):
        assert said in line


def test_no_warning_below_the_share_and_the_window_follows_the_latest_steps():
    assert _run_zero_signal([0.9] * 40)[0] == []  # 90 % of the groups: some signal
    assert _run_zero_signal([0.0] * 5 + [1.0] * 9)[0] == []  # the latest 10 steps hold one step with signal
    assert _run_zero_signal([0.0] * 5 + [1.0] * 10)[0] == [15]
    assert _run_zero_signal([1.0, 1.0, 0.9], logging_steps=5)[0] == [10]  # logs of 5 steps: 2 cover the window
    assert _run_zero_signal([0.8, 1.0, 0.95], logging_steps=5)[0] == [15]  # steps 1-10: 90 %; 6-15: 97.5 %


def test_the_window_without_the_completion_numbers_still_says_what_to_do():
    window = ZeroSignalWindow(steps=10)
    window.add(1, 10, 1.0)
    line = zero_signal_warning(window, None, None)
    assert "steps 1-10" in line and line.endswith("raise --temperature, or lengthen --max_completion_length")


def test_a_run_gets_the_row_with_its_pages_types_and_the_zero_signal_warning(tmp_path):
    from olmocr_rl.config.rewards import reward
    from olmocr_rl.telemetry.pass_rates import DetailedRewardLogger
    from olmocr_rl.trainer.build import add_callbacks

    class Trainer:
        class callback_handler:  # noqa: N801 (the Trainer's attribute)
            callbacks: list = []

        def add_callback(self, callback):
            self.callback_handler.callbacks.append(callback)

    cfg = validate(parse_args(["--config", str(REPO_ROOT / DEMO_CONFIG), "--output_dir", str(tmp_path)]))
    for names, columns in (([reward("bench").name], ["absent", "table"]), ([reward("front_matter").name], [])):
        Trainer.callback_handler.callbacks = []
        add_callbacks(Trainer(), cfg, names, DetailedRewardLogger(), test_types=["absent", "table"])
        kinds = {type(callback): callback for callback in Trainer.callback_handler.callbacks}
        assert ZeroSignalWarningCallback in kinds
        assert kinds[ProgressTableCallback]._types == columns  # type columns only where the bench scores the pages
