"""FSDP2 and ZeRO-3 over two CPU processes (gloo), launched with the command the Slurm launcher's dry run prints for
``--accelerate-config fsdp|zero3`` (``accelerate launch --config_file configs/accelerate/fsdp.yaml ...``), against
the same run on one process.

Two test-only shims (tests/sharded_cpu/sitecustomize.py, on the subprocesses' PYTHONPATH only): accelerate's
FSDP2 path allowed on a CPU process group, and completions sampled per global row, so that both layouts sample
the same completions and score the same rewards. Each arm is a pair of 2-step runs on a tiny model:

- the rewards are equal, step for step (same pages, same completions);
- losses and grad norms agree within fp32 reduction-order noise (:data:`GRAD_NORM_RTOL`, :data:`LOSS_ATOL`);
- each process holds about half of every sharded tensor (``rank_memory.json``): the two local shards add up to
  one full copy of the trainable parameters, their gradients and Adam's two moments, and to the preflight's
  FSDP2 arithmetic (model.colocate_memory.sharded_trainer_bytes);
- the checkpoint is manifested (engine, world size, every rank's files) and verifies; resumed by another number
  of processes or under another engine it is refused in one ``error:`` line before the model loads;
- full arm (5 steps): the same 2-process run mirrored to S3 (the moto server on loopback) is SIGKILLed once
  checkpoint-2 is whole there; with its folder and cache deleted, the same command in an empty folder resumes
  from S3 and is sent SIGTERM once step 3 is logged: it saves and uploads checkpoint-4 (the step the signal
  arrived in) and exits 75. Steps 1-4 equal the uninterrupted run's bit for bit, and so does checkpoint-4.

Tolerance: the 2-process run computes each rank's gradient from its own row and averages the two in a
reduce-scatter; the 1-process run sums both rows in one backward. The same fp32 numbers are added in another
order, so they differ by a few ulps per reduction (fp32 eps = 1.2e-7), compounded over the reductions of a
backward pass; after one Adam step (which divides by sqrt of a tiny second moment, amplifying relative noise)
step 2 differs more. Measured (grad norm, relative): FSDP2 at most 3.2e-6, ZeRO-3 at most 5.4e-6 (step 2;
DeepSpeed reduces in its own flat buffers and sums the norm in fp64). 2e-5 (about 170 eps) leaves 4x room for
other BLAS builds and still fails for any real fault (a shard missing or doubled, a rank's gradient dropped, a
sum not averaged: 10% or more). GRPO's loss on-policy is ~0 (advantages sum to zero per group), so it is
compared absolutely (measured at most 1.1e-7).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python
from s3_server import moto_s3  # noqa: F401  (pytest fixture, the full arm's S3)
from test_cli_e2e import BENCH, REPO, cli_env, failure

SHIMS = Path(__file__).resolve().parents[1] / "sharded_cpu"
GRAD_NORM_RTOL = 2e-5
LOSS_ATOL = 1e-6
COMMON = ["--train_bench_data_folder", str(BENCH), "--pages", "simple_lines", "--max_steps", "2",
          "--num_generations", "2", "--gradient_accumulation_steps", "1", "--max_completion_length", "8",
          "--target_longest_image_dim", "256", "--logging_steps", "1", "--save_steps", "100",
          "--no-log_completions", "--report_to", "none", "--vllm_mode", "none", "--temperature", "1.0",
          "--seed", "0", "--warmup_steps", "0", "--reward_bench_edit_distance", "1.0", "--learning_rate", "1e-3"]


def sharded_env(tmp_path: Path) -> dict[str, str]:
    env = cli_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIMS), str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(OLMOCR_RL_TEST_FSDP_ON_CPU="1", OLMOCR_RL_TEST_DEEPSPEED_ON_CPU="1", OLMOCR_RL_TEST_ROW_KEYED_SAMPLING="1")
    return env


def sharded_command(engine: str, port: int, flags: list[str]) -> list[str]:
    """The command the Slurm launcher's dry run prints for one node of 2 GPUs, no vLLM GPU, ``--accelerate-config
    fsdp|zero3`` (``accelerate launch --config_file configs/accelerate/ENGINE.yaml --num_processes 2 ...``), run
    with this interpreter's accelerate and one flag added: ``--mixed_precision no`` (bf16 autocast is a GPU
    setting; the 1-process comparison runs fp32)."""
    import contextlib
    import io
    from unittest import mock

    from launcher_helpers import commands, only, slurm_env

    from olmocr_rl.launch import slurm

    printed = io.StringIO()
    with mock.patch.dict(os.environ, slurm_env("cpu01", 1), clear=True), contextlib.redirect_stdout(printed):
        assert slurm.main(["job", "--dry-run", "--gpus-per-node", "2", "--vllm-gpus", "0", "--accelerate-config",
                           engine, "--main-process-port", str(port), "--", *flags]) == 0
    (node,) = only(commands(printed.getvalue()), "train node")
    argv = node[node.index("accelerate"):]
    assert argv[:6] == ["accelerate", "launch", "--config_file", f"configs/accelerate/{engine}.yaml",
                        "--num_processes", "2"]
    return [sys.executable, "-m", "accelerate.commands.launch", *argv[2:4], "--mixed_precision", "no", *argv[4:]]


def run_pair(model_dir: Path, tmp_path: Path, extra: list[str], engine: str = "fsdp",
             fresh: str = "single") -> tuple[Path, Path]:
    """The same 2-step run on one process (2 rows per batch) and under FSDP2 / ZeRO-3 on two (1 row each). The one
    named by ``fresh`` ("single" or "sharded") is a process of its own, the other forked from the preloaded
    interpreter (tests/warm_python.py; a launcher's workers too): runs that must agree never share a hash secret."""
    from test_lora_training import _free_port

    one, two = tmp_path / "one", tmp_path / "two"
    flags = [*COMMON, "--model_name", str(model_dir), *extra]
    env = sharded_env(tmp_path)
    single = [sys.executable, "-m", "olmocr_rl.grpo_train", *flags, "--per_device_train_batch_size", "2",
              "--output_dir", str(one)]
    sharded = sharded_command(engine, _free_port(), [*flags, "--per_device_train_batch_size", "1",
                                                     "--output_dir", str(two)])
    for name, command in (("single", single), ("sharded", sharded)):
        result = warm_python.run(command, fresh=name == fresh, cwd=REPO, env=env, capture_output=True, text=True,
                                 timeout=600)
        assert result.returncode == 0, failure(result)
    engine_file = "pytorch_model_fsdp.bin" if engine == "fsdp" else "zero_pp_rank_1_mp_rank_00_model_states.pt"
    assert list(two.glob(f"checkpoint-2/**/{engine_file}"))  # the engine's own checkpoint layout
    return one, two


def _steps(out: Path) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "reward" in r]


def assert_same_steps(one: Path, two: Path, steps: int = 2) -> None:
    a, b = _steps(one), _steps(two)
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, steps + 1))
    for x, y in zip(a, b):
        assert x["reward"] == y["reward"] and x["reward_std"] == y["reward_std"]  # the same completions
        assert abs(x["loss"] - y["loss"]) <= LOSS_ATOL
        assert x["grad_norm"] > 0 and abs(x["grad_norm"] - y["grad_norm"]) <= GRAD_NORM_RTOL * x["grad_norm"]


def assert_half_each(one: Path, two: Path, gradients: bool = True) -> dict:
    single, = json.loads((one / "rank_memory.json").read_text())["ranks"]
    report = json.loads((two / "rank_memory.json").read_text())
    ranks = report["ranks"]
    assert report["processes"] == 2
    for kind in ("trainable_parameters", "frozen_parameters", "optimizer_state") + ("gradients",) * gradients:
        assert sum(r[kind] for r in ranks) == single[kind]  # the two shards are one full copy
        assert all(r[kind] <= 0.6 * single[kind] for r in ranks), (kind, ranks)  # about half each
    for r in ranks:
        assert r["trainable_parameters_full"] == single["trainable_parameters"]
        assert r["optimizer_state"] == 2 * r["trainable_parameters"]  # Adam's two moments, sharded alike
        assert r["gradients"] == (r["trainable_parameters"] if gradients else 0)
    return report


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["full", "lora_olmorl", "moe_frozen_tower"])
def test_fsdp2_on_two_processes_matches_one_process(arm, tiny_model_dir, tiny_family_dir, tmp_path, request):
    model, extra = {"full": (tiny_model_dir, ["--max_steps", "5", "--save_steps", "2"]),
                    "lora_olmorl": (tiny_model_dir, ["--use_peft", "--olmorl"]),
                    "moe_frozen_tower": (tiny_family_dir("qwen3_vl_moe"), ["--freeze_vision_tower"])}[arm]
    # full: the sharded run is also the reference the S3 resume below must equal bit for bit, so it is the fresh one
    one, two = run_pair(model, tmp_path, extra, fresh="sharded" if arm == "full" else "single")
    assert_same_steps(one, two, steps=5 if arm == "full" else 2)
    report = assert_half_each(one, two)
    print(arm, json.dumps(report))
    assert_preflight_arithmetic(model, extra, report["ranks"])
    assert_manifested(two / "checkpoint-2", "fsdp2-full_state_dict", "pytorch_model_fsdp.bin")
    if arm == "full":
        server = request.getfixturevalue("moto_s3")
        save_uri, cache = f"s3://{server.bucket}/runs/fsdp2", tmp_path / "cache"
        remote = kill_once_on_s3(sharded_s3_command(model, tmp_path / "killed", save_uri, cache), server,
                                 "runs/fsdp2", tmp_path)
        assert_resumed_from_s3(model, two, remote, save_uri, tmp_path)
        # resumed by one process: refused in one line, before the model loads
        single = [sys.executable, "-m", "olmocr_rl.grpo_train", *COMMON, "--model_name", str(model),
                  "--per_device_train_batch_size", "2", "--max_steps", "5", "--output_dir", str(two),
                  "--resume_from_checkpoint", str(two / "checkpoint-2")]
        assert_refused(warm_python.run(single, cwd=REPO, env=sharded_env(tmp_path), capture_output=True, text=True,
                                       timeout=300), "2 processes on 1 machine (fsdp2-full_state_dict)",
                       "1 process on 1 machine (single)")


def assert_preflight_arithmetic(model_dir: Path, extra: list[str], ranks: list[dict]) -> None:
    """The preflight's FSDP2 arithmetic (model.colocate_memory, fp32 here) is what each process holds."""
    from transformers import AutoConfig

    from olmocr_rl.model.colocate_memory import Training, model_facts, sharded_trainer_bytes

    training = Training(use_peft="--use_peft" in extra, freeze_vision_tower="--freeze_vision_tower" in extra)
    expected = sharded_trainer_bytes(model_facts(AutoConfig.from_pretrained(model_dir)), training, engine="fsdp2",
                                     processes=2, mixed_precision=False)
    held = [r["trainable_parameters"] + r["frozen_parameters"] + r["gradients"] + r["optimizer_state"] for r in ranks]
    assert abs(sum(held) - 2 * expected) <= 2 and max(held) - min(held) <= 0.01 * expected, (held, expected)


def sharded_s3_command(model: Path, out: Path, save_uri: str, cache: Path, save_steps: int = 2) -> list[str]:
    """The full arm's 5-step 2-process run mirrored to ``save_uri``, resuming from its newest checkpoint if any."""
    from test_lora_training import _free_port

    return sharded_command("fsdp", _free_port(), [*COMMON, "--model_name", str(model), "--max_steps", "5",
                                                  "--save_steps", str(save_steps), "--per_device_train_batch_size",
                                                  "1", "--output_dir", str(out), "--s3_save_path", save_uri,
                                                  "--cache_dir", str(cache), "--resume_from_checkpoint"])


def start(command: list[str], tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    with log.open("w") as handle:
        return warm_python.popen(command, cwd=REPO, env=sharded_env(tmp_path), stdout=handle,
                                 stderr=subprocess.STDOUT), log


def kill_once_on_s3(command: list[str], server, prefix: str, tmp_path: Path) -> set[str]:
    """Run ``command``; once checkpoint-2 is whole on S3 (its manifest, then trainer_state.json, go last), SIGKILL
    the launcher and both trainers as a preempted machine loses them. Returns S3's files of checkpoint-2."""
    from fault_helpers import descendants, survivors
    from test_cli_s3 import remote_files
    from test_preemption import kill_tree, wait_for_remote

    proc, log = start(command, tmp_path, "killed")
    try:
        on_s3 = wait_for_remote(server, prefix, "checkpoint-2/trainer_state.json", proc)
        processes = [proc.pid, *descendants(proc.pid)]
    finally:
        kill_tree(proc)
    assert on_s3 and proc.returncode == -9, log.read_text()[-6000:]
    assert survivors(processes) == []  # the launcher, both trainers and their workers: gone with the machine
    remote = remote_files(server, prefix)
    assert "checkpoint-4/trainer_state.json" not in remote, "killed too late: " + log.read_text()[-3000:]
    return {rel[len("checkpoint-2/"):] for rel in remote if rel.startswith("checkpoint-2/")}


def same(a, b) -> bool:
    """Bit-for-bit equality of what torch.load returns (tensors, numpy arrays, nested containers)."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):  # a loaded optimizer keeps Adam's betas as the list it was saved as
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def assert_resumed_from_s3(model: Path, two: Path, remote: set[str], save_uri: str, tmp_path: Path) -> None:
    """The 2-process run mirrored to S3 was SIGKILLed once checkpoint-2 was there; its folder and cache deleted,
    the command in an empty folder (no periodic save now) pulls checkpoint-2 (every rank's files, verified) and
    trains on; a SIGTERM once step 3 is logged arrives in step 4: checkpoint-4 is saved and uploaded, the run
    exits 75 without step 5. Steps 1-4 (1-2 from S3's history) equal the uninterrupted run's bit for bit, and so
    does checkpoint-4 (the weights, Adam's moments, the schedule, both ranks' RNG states): the next resume
    continues exactly."""
    import shutil
    import signal

    import torch
    from fault_helpers import wait_for_record

    from olmocr_rl.storage.verify import verify_folder

    cache, killed = tmp_path / "cache", tmp_path / "killed"
    manifest = json.loads((killed / "checkpoint-2" / "olmocr_rl_manifest" / "node-0.json").read_text())
    assert {"rng_state_0.pth", "rng_state_1.pth", "pytorch_model_fsdp.bin", "optimizer.bin"} <= set(manifest["files"])
    assert set(manifest["files"]) | {"olmocr_rl_manifest/node-0.json"} <= remote  # every rank's files mirrored
    shutil.rmtree(killed)  # the preempted machine's disk is gone: its output folder and its cache
    shutil.rmtree(cache, ignore_errors=True)

    resumed = tmp_path / "resumed"
    proc, log = start(sharded_s3_command(model, resumed, save_uri, cache, save_steps=100), tmp_path, "resumed")
    try:
        assert wait_for_record(proc, resumed / "metrics.jsonl", 3), log.read_text()[-6000:]
        proc.send_signal(signal.SIGTERM)  # arrives in step 4
        proc.wait(timeout=300)
    finally:
        proc.kill()
    text = log.read_text()
    assert f"pulled {save_uri}/checkpoint-2/" in text
    assert f"checkpoint-4 saved in {resumed} and uploaded to {save_uri}; exiting with status 75" in text, text[-6000:]
    assert verify_folder(resumed / "checkpoint-2") is None  # pulled whole: every rank's files as manifested
    after, uninterrupted = _steps(resumed), _steps(two)
    assert [r["step"] for r in after] == [1, 2, 3, 4]  # stopped in the step the signal arrived in
    for x, y in zip(after, uninterrupted):
        for key in ("step", "reward", "reward_std", "loss", "grad_norm", "entropy", "learning_rate"):
            assert x[key] == y[key], (x["step"], key)
    assert verify_folder(resumed / "checkpoint-4") is None
    for name in ("pytorch_model_fsdp.bin", "optimizer.bin", "scheduler.pt", "rng_state_0.pth", "rng_state_1.pth"):
        mine, theirs = (torch.load(d / "checkpoint-4" / name, weights_only=False) for d in (resumed, two))
        assert same(mine, theirs), name


def assert_manifested(checkpoint: Path, engine: str, weights: str) -> None:
    """The node manifest names the engine and the world size, lists every rank's files, and the folder verifies."""
    from olmocr_rl.storage.verify import verify_folder

    manifest = json.loads((checkpoint / "olmocr_rl_manifest" / "node-0.json").read_text())
    assert manifest["engine"] == engine and manifest["world_size"] == 2
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(manifest["files"])
    assert any(rel.endswith(weights) for rel in manifest["files"])
    assert verify_folder(checkpoint) is None


def assert_refused(result, saved: str, current: str) -> None:
    errors = sorted({line for line in result.stderr.splitlines() if line.startswith("error:")})  # one per process
    assert result.returncode != 0 and len(errors) == 1, failure(result)
    assert saved in errors[0] and current in errors[0] and "--resume_from_checkpoint" in errors[0]
    assert "Loading weights" not in result.stderr + result.stdout  # refused before the model loads


@pytest.mark.slow
def test_zero3_on_two_processes_matches_one_process(tiny_model_dir, tmp_path):
    """DeepSpeed 0.19.8 on CPU: its CPU accelerator talks gloo (oneCCL is not needed) and ZeRO-3 partitions the
    weights and Adam's moments; its gradients sit in DeepSpeed's own flat buffers (not counted)."""
    pytest.importorskip("deepspeed")
    one, two = run_pair(tiny_model_dir, tmp_path, [], engine="zero3")
    assert_same_steps(one, two)
    print("zero3", json.dumps(assert_half_each(one, two, gradients=False)))
    assert_manifested(two / "checkpoint-2", "deepspeed-zero3", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    # the same two processes under another engine (FSDP2): refused in one line, before the model loads
    from test_lora_training import _free_port

    fsdp = sharded_command("fsdp", _free_port(), [*COMMON, "--model_name", str(tiny_model_dir),
                                                  "--per_device_train_batch_size", "1", "--max_steps", "3",
                                                  "--output_dir", str(two),
                                                  "--resume_from_checkpoint", str(two / "checkpoint-2")])
    assert_refused(warm_python.run(fsdp, cwd=REPO, env=sharded_env(tmp_path), capture_output=True, text=True,
                                   timeout=300), "(deepspeed-zero3)", "2 processes on 1 machine (fsdp2-")


@pytest.mark.slow
def test_fsdp2_shared_prefix_equals_the_stock_forward(tiny_model_dir, tmp_path):
    """--shared_prefix under FSDP2: two processes holding half of one page's group of 8 each, one completion a
    micro-batch and 4 micro-steps a step (olmOCR 2's geometry), the defaults against ``--no-shared_prefix``.
    Generation's prefill and the training forwards share the page prompt: each rank forwards it without gradients in
    its first micro-step, the segments of the next attend to it, and the last holds it in its row again with the
    gradients they gathered (no graph outlives a micro-step: FSDP2 reshards between them; each rank's first use
    checked against the stock path). The completions are the same, and the losses and grad norms agree to float
    rounding (the same reductions in both runs; only the forwards' layout differs)."""
    from test_lora_training import _free_port

    runs = {}
    for name, extra in (("shared", []), ("stock", ["--no-shared_prefix"])):
        out = tmp_path / name
        command = sharded_command("fsdp", _free_port(), [*COMMON, "--model_name", str(tiny_model_dir),
                                                         "--per_device_train_batch_size", "1", "--num_generations",
                                                         "8", "--gradient_accumulation_steps", "4",
                                                         "--output_dir", str(out), *extra])
        result = warm_python.run(command, cwd=REPO, env=sharded_env(tmp_path), capture_output=True, text=True,
                                 timeout=600)
        assert result.returncode == 0, failure(result)
        runs[name] = (_steps(out), result.stdout + result.stderr)
    (shared, log), (stock, stock_log) = runs["shared"], runs["stock"]
    # the first-use checks passed: the main process logs its own (2 rows, 1 page prompt); a fallback, on any rank,
    # would be a warning line
    assert "shared prefix: the first forward (1 rows, 1 prompts) matches the stock forward" in log, log[-3000:]
    assert "shared prefill: the first generation's prefill (4 rows, 1 prompts) matches the stock one" in log
    assert "is off for the rest of this run" not in log and "shared pre" not in stock_log
    assert [r["step"] for r in shared] == [r["step"] for r in stock] == [1, 2]
    for mine, theirs in zip(shared, stock):
        assert mine["reward"] == theirs["reward"] and mine["reward_std"] == theirs["reward_std"]
        assert mine["grad_norm"] > 0 and mine["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-4, abs=LOSS_ATOL)
        # the prompt twice a step instead of 4 times: about half the real tokens (the prompt is most of a row)
        assert 0.4 < mine["timing/shared_prefix_tokens"] < 0.75, mine["timing/shared_prefix_tokens"]
