"""DetailedRewardLogger / DetailedRewardLoggingCallback: aggregation, key names, Trainer wiring, gathering."""

from __future__ import annotations

import json
import os
import socket

import pytest

from olmocr_rl.rewards import CompletionStats
from olmocr_rl.telemetry.pass_rates import (
    DetailedRewardLogger,
    DetailedRewardLoggingCallback,
    RewardTotals,
    format_table,
    summarize,
    zero_signal_fraction,
)

# A hand-worked window: two pages, one reward call plus a second call on page A.
C1 = CompletionStats(2 / 3, {"present": (2, 2), "math": (0, 1)}, {"a.jsonl": (2, 3)}, "A")
C2 = CompletionStats(2 / 3, {"present": (1, 2), "math": (1, 1)}, {"a.jsonl": (2, 3)}, "A")
C3 = CompletionStats(0.25, {"table": (1, 4)}, {"b.jsonl": (1, 4)}, "B")
C4 = CompletionStats(0.75, {"table": (3, 4)}, {"b.jsonl": (3, 4)}, "B")
A_GOOD = CompletionStats(1.0, {"present": (2, 2)}, {"a.jsonl": (2, 2)}, "A")
A_BAD = CompletionStats(0.0, {"present": (0, 2)}, {"a.jsonl": (0, 2)}, "A")

ALL_CALLS = [[C1, C2, C3, C4, None], [A_GOOD, A_BAD]]
RANK_CALLS = {0: [[C1, C3], [A_GOOD]], 1: [[C2, C4, None], [A_BAD]]}

EXPECTED = {
    "bench_reward/total_completions": 6,
    "bench_reward/overall_pass_rate": 10 / 18,  # (8 + 2 + 0) / (14 + 2 + 2)
    "bench_reward/present/pass_rate": 5 / 8,
    "bench_reward/present/total_tests": 8,
    "bench_reward/present/avg_tests_per_completion": 2.0,
    "bench_reward/present/mean_reward": (2 / 3 + 2 / 3 + 1.0 + 0.0) / 4,
    "bench_reward/math/pass_rate": 0.5,
    "bench_reward/math/total_tests": 2,
    "bench_reward/math/avg_tests_per_completion": 1.0,
    "bench_reward/math/mean_reward": 2 / 3,
    "bench_reward/table/pass_rate": 0.5,
    "bench_reward/table/total_tests": 8,
    "bench_reward/table/avg_tests_per_completion": 4.0,
    "bench_reward/table/mean_reward": 0.5,
    "bench_reward/jsonl_a.jsonl/pass_rate": 6 / 10,
    "bench_reward/jsonl_a.jsonl/total_tests": 10,
    "bench_reward/jsonl_b.jsonl/pass_rate": 0.5,
    "bench_reward/jsonl_b.jsonl/total_tests": 8,
    # groups: call 0 page A (2/3, 2/3) identical; call 0 page B differs; call 1 page A (1, 0) differs
    "bench_reward/frac_zero_signal_groups": 1 / 3,
}


def filled_logger(calls) -> DetailedRewardLogger:
    reward_logger = DetailedRewardLogger()
    for call in calls:
        reward_logger.add_batch_stats(call)
    return reward_logger


def test_summary_keys_and_values_hand_worked():
    summary = filled_logger(ALL_CALLS).summary()
    assert summary.keys() == EXPECTED.keys()
    for key, value in EXPECTED.items():
        assert summary[key] == pytest.approx(value), key


def test_empty_window_has_no_keys_and_clear_starts_a_new_window():
    reward_logger = filled_logger(ALL_CALLS)
    reward_logger.clear()
    assert reward_logger.summary() == {}
    reward_logger.add_batch_stats([None, None])
    assert reward_logger.summary() == {}


def test_zero_signal_fraction_ignores_groups_of_one():
    assert zero_signal_fraction([[0.5, 0.5], [0.1, 0.2], [1.0]]) == (1, 2)
    assert zero_signal_fraction([]) == (0, 0)


def test_merge_equals_accumulating_together():
    left, right = filled_logger(RANK_CALLS[0]), filled_logger(RANK_CALLS[1])
    combined = RewardTotals()
    combined.merge(left.totals)
    combined.merge(right.totals)
    assert summarize(combined) == pytest.approx(EXPECTED)


def test_console_table_lists_types_and_files():
    table = format_table(filled_logger(ALL_CALLS).totals, step=5)
    assert "step 5: 6 completions, 10/18 tests passed (55.6%)" in table
    assert "zero-signal groups 1/3" in table
    for word in ("present", "math", "table", "a.jsonl", "b.jsonl"):
        assert word in table


# --- the callback in a real Trainer ----------------------------------------------------------------


class _Recorder:
    """Stands in for a reporting integration (wandb/tensorboard): records what each log event carried."""

    def __init__(self):
        self.events = []


def test_callback_puts_keys_into_trainer_logs_before_reporting_callbacks(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, x, labels=None):
            return {"loss": ((self.linear(x).squeeze(-1) - labels) ** 2).mean()}

    reward_logger = DetailedRewardLogger()
    recorded = _Recorder()

    class Reporting(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            recorded.events.append(dict(logs))

    class FeedsStats(TrainerCallback):  # what the bench reward does during a GRPO step
        def on_step_begin(self, args, state, control, **kwargs):
            reward_logger.add_batch_stats([C1, C2])

    data = [{"x": torch.tensor([1.0, 2.0]), "labels": torch.tensor(1.0)} for _ in range(8)]
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=4, logging_steps=2,
        report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True,
    )
    trainer = Trainer(model=Model(), args=args, train_dataset=data, callbacks=[Reporting(), FeedsStats()])
    callback = DetailedRewardLoggingCallback.attach(trainer, reward_logger)
    assert trainer.callback_handler.callbacks[0] is callback
    trainer.train()

    train_events = [e for e in recorded.events if "loss" in e]
    assert len(train_events) == 2
    for event in train_events:
        # each window of 2 steps saw C1, C2 twice: present 6/8, math 2/4
        assert event["bench_reward/total_completions"] == 4
        assert event["bench_reward/present/pass_rate"] == pytest.approx(0.75)
        assert event["bench_reward/math/pass_rate"] == pytest.approx(0.5)
        assert event["bench_reward/frac_zero_signal_groups"] == 1.0  # both calls: page A at (2/3, 2/3)
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert all(h["bench_reward/total_completions"] == 4 for h in history)
    assert "bench reward over steps 1-2: 4 completions" in capsys.readouterr().out  # a table at every log by default


# --- two ranks (gloo) ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist
    from transformers import TrainerControl, TrainerState, TrainingArguments

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        reward_logger = filled_logger(RANK_CALLS[rank])
        callback = DetailedRewardLoggingCallback(reward_logger, console=False)
        state = TrainerState(is_world_process_zero=rank == 0, is_local_process_zero=rank == 0)
        logs = {"loss": 1.0}
        callback.on_log(TrainingArguments(output_dir=out_dir, report_to="none"), state, TrainerControl(), logs=logs)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
            json.dump(logs, handle)
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_two_gloo_ranks_log_what_one_process_sees(tmp_path):
    mp = pytest.importorskip("torch.multiprocessing")
    # fork: the children inherit the imports (no CUDA here), which keeps this test to a few seconds
    mp.start_processes(_rank_main, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True, start_method="fork")
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank1 == {"loss": 1.0}  # only the global main process adds keys
    single = filled_logger(ALL_CALLS).summary()
    assert {k: v for k, v in rank0.items() if k != "loss"} == pytest.approx(single)
    assert single == pytest.approx(EXPECTED)
