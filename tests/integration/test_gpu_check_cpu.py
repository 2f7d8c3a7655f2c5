"""python -m olmocr_rl.gpu_check on CPU: the arms train and the table has the MFU columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_python

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_on_cpu_reports_the_mfu_columns(tmp_path):
    out = tmp_path / "gpu_check.json"
    result = warm_python.run(
        [sys.executable, "-m", "olmocr_rl.gpu_check", "--steps", "2", "--arms", "grpo,lora", "--work_dir", str(tmp_path),
         "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    table = json.loads(out.read_text())
    row = table["rows"][0]
    assert table["backend"] in ("hf-generate", "vllm-colocate") and row["steps_measured"] == 1
    assert row["model_flops"] > 0 and row["train_mfu"] >= row["mfu"] > 0
    assert row["mfu"] == pytest.approx(row["model_flops"] / row["step_s"] / table["peak_flops"])
    assert row["train_mfu"] == pytest.approx(row["model_flops"] / row["train_s"] / table["peak_flops"])
    for column in ("mfu_6n", "mfu", "train_mfu"):
        assert column in result.stdout
    lora = table["rows"][1]
    assert lora["arm"] == "lora" and lora["steps_measured"] == 1 and lora["train_s"] > 0
    assert "LoRA: adapters on 14 layers of the language model" in result.stderr


@pytest.mark.slow
def test_the_device_script_runs_on_cpu_with_tiny_shapes(tmp_path):
    """scripts/device_gpu_check.sh, the one prepared GPU run, on CPU: stock and all-speed-ups rows, the profile of
    one step per phase, and a dated section appended to (a copy of) docs/gpu_check.md."""
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "WITH_7B": "0", "ARMS": "grpo/stock,grpo/all",
           "STEPS": "3", "WORK_DIR": str(tmp_path / "work"), "BUDGET_S": "600", "HF_HUB_OFFLINE": "1",
           "WHEELS": str(tmp_path / "no-wheels")}  # a checkout holding .whl/ for a GPU run: not for this Python
    result = subprocess.run(["bash", "scripts/device_gpu_check.sh"], cwd=REPO, capture_output=True, text=True,
                            timeout=900, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    table = json.loads((out / "gpu_check.json").read_text())
    assert [row["arm"] for row in table["rows"]] == ["grpo/stock", "grpo/all"] and table["not_measured"] == []
    # step 1 is warm-up; step 3 of grpo/all is the profiled one, left out of its means
    assert [row["steps_measured"] for row in table["rows"]] == [2, 1]
    profile = table["profile"]
    assert profile["arm"] == "grpo/all" and profile["step"] == 3 and set(profile["phases"]) == {"generate", "reward",
                                                                                              "train"}
    assert profile["phases"]["train"]["top_operators"] and profile["phases"]["generate"]["verdict"] == "cpu"
    docs = (out / "gpu_check.md").read_text()
    assert docs.startswith((REPO / "docs" / "gpu_check.md").read_text().rstrip("\n"))
    section = docs[docs.rindex("## Measured: "):]
    assert table["date"] in section and "| grpo/stock |" in section and "| grpo/all |" in section
    assert "| generate |" in section and "| train |" in section
    # the spread behind the means, and what the shared prefix forwarded (on in grpo/all, off in grpo/stock)
    stock, defaults = table["rows"]
    assert len(stock["step_seconds"]) == 2 and len(defaults["step_seconds"]) == 1
    assert f"Seconds of each measured step: grpo/stock {stock['step_seconds'][0]:.2f}" in section
    assert 0 < defaults["shared_prefix_tokens"] < 1 and stock["shared_prefix_tokens"] != stock["shared_prefix_tokens"]
    assert f"nothing shared): grpo/all {defaults['shared_prefix_tokens']:.2f}." in section
    assert (out / "gpu_check.log").is_file()
    # each arm's checkpoint and saved model are deleted once its row is written (a 3B arm left ~26 GB: the third arm
    # of an H200 run found its disk full); its metrics stay
    runs = sorted((tmp_path / "work").glob("run-*"))
    assert [run.name for run in runs] == ["run-tiny-grpo-all", "run-tiny-grpo-stock"]
    for run in runs:
        assert (run / "metrics.jsonl").is_file()
        assert not list(run.glob("checkpoint-*")) and not list(run.rglob("*.safetensors")), sorted(run.rglob("*"))


def test_arms_and_their_flags():
    from olmocr_rl.gpu_check import SPEEDUP_FLAGS, _arm_cli, parse_arm

    assert parse_arm("grpo") == ("grpo", "all") and parse_arm("olmorl/stock") == ("olmorl", "stock")
    with pytest.raises(ValueError, match="grpo|olmorl"):
        parse_arm("ppo/all")
    stock = _arm_cli("olmorl/stock", "b", Path("m"), Path("o"), 8, 256, 3, 1288, "hf-generate",
                     {"min_new_tokens": 256}, profile_step=3)
    assert "--olmorl" in stock and stock[-2:] == ["--profile_step", "3"]
    for flag in SPEEDUP_FLAGS["stock"]:
        assert flag in stock
    # every stock flag names a real trainer flag, switched off (checkpointing: TRL's every-layer default)
    from olmocr_rl.config import parse_args

    args = parse_args(SPEEDUP_FLAGS["stock"])
    assert (args.share_page_encoding, args.batched_vision_attention, args.share_page_processing, args.padding_free,
            args.compiled_generation, args.gradient_checkpointing) == (False, False, False, False, False, "true")
    assert parse_args(SPEEDUP_FLAGS["vision"]).batched_vision_attention is True
    vision = parse_args(SPEEDUP_FLAGS["vision"])
    assert (vision.share_page_encoding, vision.padding_free, vision.shared_prefix) == (True, False, False)
    assert SPEEDUP_FLAGS["all"] == []  # the defaults


def test_bad_arms_are_one_error_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "olmocr_rl.gpu_check", "--arms", "grpo/fast"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("error: --arms: arm 'grpo/fast'")
    assert result.stderr.count("\n") == 1


def test_gpu_check_on_cpu_builds_and_measures_another_family(tmp_path):
    """--family qwen3_vl_moe: the tiny MoE preset, its FLOPs counted with the routed experts only."""
    out = tmp_path / "gpu_check.json"
    result = warm_python.run(
        [sys.executable, "-m", "olmocr_rl.gpu_check", "--family", "qwen3_vl_moe", "--steps", "2", "--arms", "grpo",
         "--work_dir", str(tmp_path), "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    table = json.loads(out.read_text())
    assert (table["family"], table["shape"]) == ("qwen3_vl_moe", "tiny")
    assert "model Qwen3-VL-MoE tiny" in result.stdout
    assert table["rows"][0]["model_flops"] > 0
    assert json.loads((tmp_path / "model-qwen3_vl_moe-tiny" / "config.json").read_text())["model_type"] == "qwen3_vl_moe"


def test_gpu_check_refuses_a_shape_the_family_lacks(tmp_path):
    result = subprocess.run([sys.executable, "-m", "olmocr_rl.gpu_check", "--family", "qwen3_vl", "--shape", "7b",
                             "--work_dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "error: --shape 7b: Qwen3-VL has tiny, 2b, 4b, 8b"
    assert not list(tmp_path.glob("model-*"))


def test_a_failed_arm_is_recorded_and_the_next_arm_still_runs(tmp_path, monkeypatch):
    """One arm crashing (a GPU path never run before, say) must not cost the other arms' rows: it is listed as
    failed, the next arm runs, and the results are written after every arm."""
    import argparse

    from olmocr_rl import gpu_check

    monkeypatch.setattr(gpu_check, "_build_model", lambda work, family, shape, cuda: (work / "model", 10))
    codes = iter([3, 0])
    monkeypatch.setattr(gpu_check, "_run_arm", lambda cli: (next(codes), 1.5))
    monkeypatch.setattr(gpu_check, "summarise", lambda path, **kw: {"arm": kw["arm"], "step_s": 2.0, "train_s": 1.0,
                                                                    "generate_s": 0.5,
                                                                    "peak_mem_gb": kw["peak_mem_gb"]})
    reports = []
    args = argparse.Namespace(profile=False, time_budget_s=None, bench="b")
    settings = {"cuda": False, "family": "qwen2_5_vl", "shape": "tiny", "steps": 2, "G": 4, "length": 16,
                "image_dim": 448, "backend": "hf-generate", "length_kwargs": {}, "device": "cpu"}
    state = gpu_check._run_arms([("tiny", "grpo/all"), ("tiny", "grpo/noprefix")], args, settings, tmp_path, 0.0,
                                lambda s: reports.append((len(s["rows"]), list(s["failed"]))))
    assert state["failed"] == ["grpo/all: exit code 3"] and [r["arm"] for r in state["rows"]] == ["grpo/noprefix"]
    assert reports == [(0, ["grpo/all: exit code 3"]), (1, ["grpo/all: exit code 3"])]
    section = gpu_check.markdown_section({
        "date": "2026-12-04", "device": "cpu", "backend": "hf-generate", "versions": {"torch": "x"}, "shape": "tiny",
        "num_generations": 4, "completion_length": 16, "image_dim": 448, "steps": 2, "memory": "RSS", "total_s": 1.0,
        "rows": [], "failed": state["failed"], "complete": False})
    assert "Failed (see the run's log): grpo/all: exit code 3." in section
    assert "The run stopped before its last arm" in section


def test_the_stock_arm_turns_every_speed_up_off():
    """Every flag of the speed group is off in ``stock`` (a new speed-up on by default would otherwise leak into
    the before row), and ``noprefix`` is the defaults but the shared prefix."""
    import dataclasses

    from olmocr_rl.config import parse_args
    from olmocr_rl.config.options import FLAG, SPEED, ResolvedConfig
    from olmocr_rl.gpu_check import SPEEDUP_FLAGS

    stock, noprefix = parse_args(SPEEDUP_FLAGS["stock"]), parse_args(SPEEDUP_FLAGS["noprefix"])
    speed = [f.name for f in dataclasses.fields(ResolvedConfig) if FLAG in f.metadata and f.metadata[FLAG].group == SPEED]
    assert "shared_prefix" in speed and "cache_vision_features" in speed
    for name in speed:
        assert getattr(stock, name) in (False, "true"), name
    defaults = parse_args([])
    assert noprefix.shared_prefix is False and defaults.shared_prefix is True
    assert all(getattr(noprefix, name) == getattr(defaults, name) for name in speed if name != "shared_prefix")


def test_a_run_stops_its_reward_workers(tiny_model_dir, tmp_path, monkeypatch):
    """A run's bench reward pool is stopped when ``main`` returns: a process that called it (gpu_check's per-arm
    process, a launcher's child) otherwise waited at its exit for workers that waited for work (seen on an H200:
    the first arm's process never exited)."""
    import multiprocessing
    import threading

    from olmocr_rl import grpo_train

    monkeypatch.setenv("OLMOCR_RL_REWARD_WORKERS", "2")
    before = set(multiprocessing.active_children())
    code = grpo_train.main([
        "--config", str(REPO / "configs" / "tiny-cpu.yaml"), "--model_name", str(tiny_model_dir),
        "--output_dir", str(tmp_path / "out"), "--train_bench_data_folder", str(REPO / "bench_data_sample"),
        "--num_generations", "4", "--per_device_train_batch_size", "4", "--max_completion_length", "8",
        "--max_steps", "1", "--save_steps", "100", "--vllm_mode", "none"])
    assert code == 0
    # ended by the time main returns: the workers, and the pool's manager thread (one still closing its wake-up pipe
    # when the interpreter's exit hook writes to it fails the exit on Python 3.11: "Bad file descriptor")
    assert not set(multiprocessing.active_children()) - before
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]


def _finish_and_linger(cli, results):
    """An arm's process that sends its result, then cannot exit (a non-daemon thread that never ends)."""
    import threading

    results.put((0, 1.25))
    threading.Thread(target=time.sleep, args=(3600,)).start()


def test_an_arm_process_that_does_not_exit_is_killed_and_its_result_kept(monkeypatch, capsys):
    """The arm's row is written as soon as its result arrives (on_result), before the lingering process is
    killed: a run stopped from outside meanwhile keeps it."""
    from olmocr_rl import gpu_check

    monkeypatch.setattr(gpu_check, "_arm_process", _finish_and_linger)
    start, seen = time.time(), []
    result = gpu_check._run_arm_in_own_process(
        ["--flags"], on_result=lambda code, peak: seen.append((code, peak, capsys.readouterr().err)), exit_grace_s=1)
    assert result == (0, 1.25) and [s[:2] for s in seen] == [(0, 1.25)]
    assert "killed" not in seen[0][2]  # reported before the kill
    assert time.time() - start < 60
    assert "still running 1s after it finished; killed" in capsys.readouterr().err
