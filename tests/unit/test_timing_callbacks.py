"""Direct tests of olmocr_rl.telemetry.timing (step time split) and olmocr_rl.telemetry.history (history file,
console table, W&B key routing), on fake trainers and hand-made Trainer states: no model, no training."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from olmocr_rl.telemetry import timing
from olmocr_rl.storage.checkpoints import trim_history
from olmocr_rl.telemetry.history import MetricsFileCallback, ProgressTableCallback
from olmocr_rl.telemetry.wandb_run import olmocr_wandb_callback


class FakeClock:
    """A perf_counter that each timed call advances by a set amount."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _state(step: int = 1, main: bool = True):
    return SimpleNamespace(global_step=step, epoch=0.5, is_world_process_zero=main)


def _fake_trainer(clock: FakeClock, gen_s: float, reward_s: float, refill: bool = False):
    def generate(prompts):
        clock.advance(gen_s)
        # (prompt_ids, completion_ids, ...) as TRL 1.16's _generate returns them
        return [[1, 2, 3]] * len(prompts), [[7] * (i + 1) for i in range(len(prompts))], None

    def rewards(*args):
        clock.advance(reward_s)
        return [0.5]

    def logps(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        return "log-probs"

    trainer = SimpleNamespace(
        model=SimpleNamespace(config=SimpleNamespace(), training=True),  # no known architecture: FLOPs count 0
        args=SimpleNamespace(num_iterations=1),
        _generate=generate,
        _calculate_rewards=rewards,
        _get_per_token_logps_and_entropies=logps,
    )
    if refill:
        def active_sampling_refill():
            clock.advance(0.25)

        trainer._active_sampling_refill = active_sampling_refill
        trainer.active_sampling = True
    return trainer


def _instrument(trainer):
    """The fake trainer's methods timed through a StepClock as PlainGRPOTrainer's overrides time TRL's (there the
    overrides are the class's own; here, on a stand-in object, the test routes them)."""
    clock = timing.StepClock(trainer, log_refill=bool(getattr(trainer, "active_sampling", False)))
    generate, rewards = trainer._generate, trainer._calculate_rewards
    logps, refill = trainer._get_per_token_logps_and_entropies, getattr(trainer, "_active_sampling_refill", None)

    def timed_generate(*args, **kwargs):
        with clock.generation() as batch:
            out = generate(*args, **kwargs)
            batch.generated(out)
        return out

    def timed_rewards(*args):
        with clock.rewards():
            return rewards(*args)

    def counted_logps(model, input_ids, attention_mask, *args, **kwargs):
        clock.forward(attention_mask)
        return logps(model, input_ids, attention_mask, *args, **kwargs)

    def timed_refill():
        with clock.refill():
            return refill()

    trainer._generate, trainer._calculate_rewards = timed_generate, timed_rewards
    trainer._get_per_token_logps_and_entropies = counted_logps
    if refill is not None:
        trainer._active_sampling_refill = timed_refill
    return clock.callback


def _one_step(callback, trainer, clock, other_s: float, prompts=("a", "b")):
    callback.on_step_begin(None, _state(), None)
    trainer._generate(list(prompts))
    trainer._calculate_rewards()
    clock.advance(other_s)
    callback.on_step_end(None, _state(), None)


def test_step_time_splits_into_generation_rewards_and_training(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    trainer = _fake_trainer(clock, gen_s=2.0, reward_s=0.5)
    callback = _instrument(trainer)
    _one_step(callback, trainer, clock, other_s=1.5)
    _one_step(callback, trainer, clock, other_s=3.5)

    logs = {"reward": 0.1}
    callback.on_log(None, _state(), None, logs=logs)
    assert logs["timing/step_s"] == pytest.approx((4.0 + 6.0) / 2)
    assert logs["timing/generate_s"] == pytest.approx(2.0)
    assert logs["timing/reward_s"] == pytest.approx(0.5)
    assert logs["timing/train_s"] == pytest.approx((1.5 + 3.5) / 2)
    assert logs["timing/reward_share"] == pytest.approx(1.0 / 10.0)
    assert logs["timing/generated_tokens"] == pytest.approx(3)  # 1 + 2 completion tokens per step
    assert logs["timing/model_flops"] == 0.0  # architecture unknown to the counter
    assert "timing/active_sampling_s" not in logs
    assert "timing/padding_fraction" not in logs  # no training forward ran

    # The window restarts after each log: the next log averages only the steps since.
    _one_step(callback, trainer, clock, other_s=0.0)
    logs = {"reward": 0.2}
    callback.on_log(None, _state(), None, logs=logs)
    assert logs["timing/step_s"] == pytest.approx(2.5)
    assert logs["timing/train_s"] == pytest.approx(0.0)


def test_evaluation_generations_are_timed_but_not_counted_as_trained_tokens(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    trainer = _fake_trainer(clock, gen_s=1.0, reward_s=0.0)
    callback = _instrument(trainer)
    callback.on_step_begin(None, _state(), None)
    trainer._generate(["a"])  # training: 1 token
    trainer.model.training = False  # the Trainer's evaluate() switches the model to eval mode
    trainer._generate(["a", "b", "c"])
    trainer.model.training = True
    callback.on_step_end(None, _state(), None)
    logs = {"reward": 0.0}
    callback.on_log(None, _state(), None, logs=logs)
    assert logs["timing/generated_tokens"] == 1
    assert logs["timing/generate_s"] == pytest.approx(2.0)


def test_timing_keys_only_on_training_logs_with_steps(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    trainer = _fake_trainer(clock, gen_s=1.0, reward_s=1.0)
    callback = _instrument(trainer)
    no_steps = {"reward": 0.0}
    callback.on_log(None, _state(), None, logs=no_steps)
    assert no_steps == {"reward": 0.0}
    _one_step(callback, trainer, clock, other_s=1.0)
    eval_logs = {"eval_loss": 1.0}  # not a training log: left alone, the window kept
    callback.on_log(None, _state(), None, logs=eval_logs)
    assert eval_logs == {"eval_loss": 1.0}
    logs = {"reward": 0.0}
    callback.on_log(None, _state(), None, logs=logs)
    assert logs["timing/step_s"] == pytest.approx(3.0)


def test_active_sampling_refill_time_is_logged(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    trainer = _fake_trainer(clock, gen_s=1.0, reward_s=0.0, refill=True)
    callback = _instrument(trainer)
    callback.on_step_begin(None, _state(), None)
    trainer._generate(["a"])
    trainer._active_sampling_refill()
    callback.on_step_end(None, _state(), None)
    logs = {"reward": 0.0}
    callback.on_log(None, _state(), None, logs=logs)
    assert logs["timing/active_sampling_s"] == pytest.approx(0.25)


def test_active_sampling_time_is_logged_as_zero_for_a_step_without_refills(monkeypatch):
    """With --active_sampling the column is there every log step (0 when no refill ran); without it, never."""
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    for active in (True, False):
        trainer = _fake_trainer(clock, gen_s=1.0, reward_s=0.0, refill=active)
        callback = _instrument(trainer)
        assert callback.log_refill is active
        _one_step(callback, trainer, clock, other_s=0.5)
        logs = {"reward": 0.0}
        callback.on_log(None, _state(), None, logs=logs)
        assert logs.get("timing/active_sampling_s") == (0.0 if active else None)


def test_reward_time_counts_even_when_the_reward_call_raises(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    trainer = _fake_trainer(clock, gen_s=0.0, reward_s=0.0)

    def failing(*args):
        clock.advance(0.75)
        raise RuntimeError("reward worker died")

    trainer._calculate_rewards = failing
    callback = _instrument(trainer)
    callback.on_step_begin(None, _state(), None)
    with pytest.raises(RuntimeError, match="reward worker died"):
        trainer._calculate_rewards()
    callback.on_step_end(None, _state(), None)
    logs = {"reward": 0.0}
    callback.on_log(None, _state(), None, logs=logs)
    assert logs["timing/reward_s"] == pytest.approx(0.75)


def test_metrics_file_records_scalars_of_the_main_process_only(tmp_path):
    path = tmp_path / "out" / "metrics.jsonl"
    callback = MetricsFileCallback(path)
    callback.on_log(None, _state(step=3), None, logs={"reward": 0.5, "name": "x", "flag": True, "none": None,
                                                      "table": {"a": 1}, "values": [1, 2]})
    callback.on_log(None, _state(step=4, main=False), None, logs={"reward": 0.9})
    callback.on_log(None, _state(step=5), None, logs={})
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 1
    record = records[0]
    assert record["step"] == 3 and record["epoch"] == 0.5 and "time" in record
    assert {k: record[k] for k in ("reward", "name", "flag", "none")} == {"reward": 0.5, "name": "x", "flag": True, "none": None}
    assert "table" not in record and "values" not in record


def test_trim_history_drops_only_later_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "reward": s / 10}) for s in (1, 2, 3, 4)]
    lines.insert(2, "not json")
    lines.append(json.dumps({"step": True}))  # a bool is not a step
    lines.append(json.dumps(["a list"]))
    path.write_text("\n".join(lines) + "\n")
    kept, dropped = trim_history(path, last_step=2)
    assert (kept, dropped) == (5, 2)
    text = path.read_text().splitlines()
    assert text == [lines[0], lines[1], "not json", lines[-2], lines[-1]]
    assert not (tmp_path / "metrics.jsonl.tmp").exists()
    assert trim_history(path, last_step=2) == (5, 0)
    assert trim_history(tmp_path / "missing.jsonl", last_step=1) == (0, 0)


def test_progress_table_prints_a_header_then_one_row_per_training_log():
    printed: list[str] = []
    table = ProgressTableCallback(print_fn=printed.append)
    table.on_train_begin(None, _state(step=0), None)
    logs = {
        "reward": 0.4321, "reward_std": 0.1,
        "bench_reward/overall_pass_rate": 0.5,
        "bench_reward/math/pass_rate": 0.25, "bench_reward/table/pass_rate": 1.0,
        "bench_reward/jsonl_arxiv/pass_rate": 0.3,  # per-file rates are not columns
        "bench_reward/frac_zero_signal_groups": 0.125,
    }
    table.on_log(None, _state(step=2), None, logs=logs)
    table.on_log(None, _state(step=3), None, logs={"loss": 1.0})  # not a training log
    table.on_log(None, _state(step=3, main=False), None, logs=logs)  # not the main process
    table.on_log(None, _state(step=4), None, logs={"reward": float("nan")})
    assert len(printed) == 3
    # the types in olmOCR-bench's order (bench.test_types(): table before math)
    assert printed[0].split() == ["step", "reward", "r_std", "pass", "table", "math", "zero_sig", "s/step"]
    row = printed[1].split()
    assert row[:7] == ["2", "0.432", "0.100", "50.0%", "100.0%", "25.0%", "0.125"]
    assert float(row[7]) >= 0
    later = printed[2].split()
    assert later[:7] == ["4", "-", "-", "-", "-", "-", "-"]


def test_wandb_callback_logs_bench_keys_at_top_level(monkeypatch):
    pytest.importorskip("wandb")
    callback = olmocr_wandb_callback()
    calls: list[tuple[dict, dict]] = []

    class FakeRun:
        def log(self, data, **kwargs):
            calls.append((dict(data), kwargs))

    callback._wandb = FakeRun()
    callback._initialized = True
    logs = {"bench_reward/overall_pass_rate": 0.5, "bench_reward/math/pass_rate": 0.25, "reward": 0.4, "loss": 1.5}
    callback.on_log(SimpleNamespace(), _state(step=7), None, model=None, logs=logs)
    top, top_kwargs = calls[0]
    assert top == {"bench_reward/overall_pass_rate": 0.5, "bench_reward/math/pass_rate": 0.25}
    assert top_kwargs == {"commit": False}
    rest = calls[1][0]
    assert rest["train/reward"] == 0.4 and rest["train/loss"] == 1.5
    assert not any(key.startswith(("bench_reward/", "train/bench_reward/")) for key in rest)
    assert not math.isnan(rest["train/global_step"]) and rest["train/global_step"] == 7


def test_padding_fraction_counts_the_training_forwards_padded_positions(monkeypatch):
    import torch

    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    trainer = _fake_trainer(clock, gen_s=0.0, reward_s=0.0)
    callback = _instrument(trainer)
    callback.on_step_begin(None, _state(), None)
    block = torch.tensor([[0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]])  # 4 of 12 positions are padding
    assert trainer._get_per_token_logps_and_entropies("model", None, block, 2, batch_size=1) == "log-probs"
    trainer._get_per_token_logps_and_entropies("model", None, torch.ones(1, 4, dtype=torch.long), 2)  # none of 4
    trainer.model.training = False  # evaluation's forwards are not counted
    trainer._get_per_token_logps_and_entropies("model", None, torch.zeros(3, 3, dtype=torch.long), 2)
    trainer.model.training = True
    callback.on_step_end(None, _state(), None)
    logs = {"reward": 0.0}
    callback.on_log(None, _state(), None, logs=logs)
    assert logs["timing/padding_fraction"] == pytest.approx(4 / 16)


def test_shared_prefix_tokens_is_the_share_of_real_tokens_the_language_model_forwarded():
    import torch

    for shared_prefix in (True, False):
        trainer = _fake_trainer(FakeClock(), gen_s=0.0, reward_s=0.0)
        clock = timing.StepClock(trainer, shared_prefix=shared_prefix)
        clock.callback.on_step_begin(None, _state(), None)
        clock.forward(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))  # 7 real tokens
        clock.shared(3)  # the shared prefix forwarded 4 of them
        clock.forward(torch.ones(1, 5, dtype=torch.long))  # 5 more, forwarded as they are
        trainer.model.training = False
        clock.shared(100)  # evaluation's forwards are not counted
        trainer.model.training = True
        clock.callback.on_step_end(None, _state(), None)
        logs = {"reward": 0.0}
        clock.callback.on_log(None, _state(), None, logs=logs)
        if shared_prefix:
            assert logs["timing/shared_prefix_tokens"] == pytest.approx(9 / 12)
        else:
            assert "timing/shared_prefix_tokens" not in logs  # the flag off: no key
