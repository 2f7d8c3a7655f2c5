"""The console: compact rows with a repeated header, tables every --console_detail_steps, no raw dict, no noise."""

from __future__ import annotations

import logging

from transformers import TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ProgressCallback

from olmocr_rl.telemetry.pass_rates import DetailedRewardLogger, DetailedRewardLoggingCallback
from olmocr_rl.telemetry.console import ConsoleProgressCallback, filter_startup_noise, use_console_progress
from olmocr_rl.telemetry.history import ProgressTableCallback


class _Stats:
    def __init__(self, group: str, reward: float):
        self.by_type = {"present": (1, 2)}
        self.by_jsonl = {"basic.jsonl": (1, 2)}
        self.group, self.reward = group, reward


def _state(step: int) -> TrainerState:
    state = TrainerState(is_world_process_zero=True, is_local_process_zero=True)
    state.global_step = step
    return state


def _run_logs(tmp_path, detail_steps, steps=7):
    """A training of ``steps`` steps logging every step, one scored completion pair per step."""
    printed: list[str] = []
    reward_logger = DetailedRewardLogger()
    callback = DetailedRewardLoggingCallback(reward_logger, detail_steps=detail_steps, print_fn=printed.append)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    callback.on_train_begin(args, _state(0), TrainerControl())
    for step in range(1, steps + 1):
        reward_logger.add_batch_stats([_Stats("p", 0.5), _Stats("p", 0.4)])
        logs = {"loss": 1.0, "reward": 0.45}
        callback.on_log(args, _state(step), TrainerControl(), logs=logs)
        assert logs["bench_reward/overall_pass_rate"] == 0.5  # every log still gets the keys
    callback.on_train_end(args, _state(steps), TrainerControl())
    return [p.splitlines()[0] for p in printed]


def test_tables_every_detail_steps_over_the_steps_since_the_last_and_at_the_end(tmp_path):
    heads = _run_logs(tmp_path, detail_steps=3)
    assert heads == [
        "bench reward over steps 1-3: 6 completions, 6/12 tests passed (50.0%), zero-signal groups 0/3 (0.0%)",
        "bench reward over steps 4-6: 6 completions, 6/12 tests passed (50.0%), zero-signal groups 0/3 (0.0%)",
        "bench reward over step 7: 2 completions, 2/4 tests passed (50.0%), zero-signal groups 0/1 (0.0%)",
    ]


def test_detail_steps_zero_prints_once_at_the_end_and_none_at_every_log(tmp_path):
    assert [h.split(":")[0] for h in _run_logs(tmp_path, detail_steps=0)] == ["bench reward over steps 1-7"]
    assert len(_run_logs(tmp_path, detail_steps=None)) == 7


def test_the_default_detail_steps_is_the_checkpoint_interval(tmp_path):
    from olmocr_rl.config import parse_args
    from olmocr_rl.trainer.build import console_detail_steps

    assert console_detail_steps(parse_args([])) == 25  # --save_steps' default
    assert console_detail_steps(parse_args(["--save_steps", "7"])) == 7
    assert console_detail_steps(parse_args(["--console_detail_steps", "0"])) == 0


def test_the_row_header_repeats_every_twenty_rows_and_vllm_columns_appear():
    printed: list[str] = []
    table = ProgressTableCallback(print_fn=printed.append)
    table.on_train_begin(None, _state(0), None)
    logs = {"reward": 0.5, "reward_std": 0.1, "sampling/is_masked_sequence_fraction": 0.25,
            "completions/mean_length": 812.5}
    for step in range(1, 46):
        table.on_log(None, _state(step), None, logs=logs)
    headers = [i for i, line in enumerate(printed) if line.split()[0] == "step"]
    assert headers == [0, 21, 42] and len(printed) == 45 + 3
    assert printed[0].split() == ["step", "reward", "r_std", "pass", "is_mask", "len", "zero_sig", "s/step"]
    assert printed[1].split()[:6] == ["1", "0.500", "0.100", "-", "25.0%", "812.5"]


def test_the_progress_bar_keeps_quiet_about_the_raw_dict_unless_asked(tmp_path, capsys):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    state = _state(0)
    state.max_steps = 3
    for raw, expected in ((False, ""), (True, "'loss': '1.5'")):
        bar = ConsoleProgressCallback(raw_metrics=raw)
        bar.on_train_begin(args, state, TrainerControl())
        bar.on_log(args, state, TrainerControl(), logs={"loss": 1.5})
        bar.on_train_end(args, state, TrainerControl())
        out = capsys.readouterr()
        assert (expected in out.out + out.err) and ("'loss'" in out.out + out.err) is raw


def test_use_console_progress_replaces_the_trainers_bar_in_place():
    class Handler:
        callbacks = [object(), ProgressCallback(max_str_len=55), object()]

    class Trainer:
        callback_handler = Handler()

    use_console_progress(Trainer, raw_metrics=True)
    bar = Trainer.callback_handler.callbacks[1]
    assert type(bar) is ConsoleProgressCallback and bar.raw_metrics and bar.max_str_len == 55


def test_the_tokenizer_alignment_warning_is_dropped_and_nothing_else():
    from transformers.utils import logging as hf_logging

    filter_startup_noise()
    filter_startup_noise()  # idempotent
    logger = hf_logging.get_logger("transformers.trainer_utils")
    assert sum(type(f).__name__ == "_DropMessages" for f in logger.filters) == 1
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        logger.warning("The tokenizer has new PAD/BOS/EOS tokens that differ from the model config ...")
        logger.warning("something else")
    finally:
        logger.removeHandler(handler)
    assert seen == ["something else"]
