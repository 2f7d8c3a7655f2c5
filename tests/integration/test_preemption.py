"""Preemption changes nothing: a run SIGKILLed after a checkpoint and restarted on an empty folder resumes
from S3 (the real moto server on loopback, tests/s3_server.py) and continues exactly as the uninterrupted
run: same pages, same sampled completions, same rewards and losses (CPU, fp32), the same W&B run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_helpers import descendants, safetensors_bytes, survivors
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from test_cli_e2e import REPO, cli_env, failure, offline_runs, read_metrics, run_cli, tiny_run_flags
from test_cli_s3 import remote_files
import warm_python

# Every per-step number that depends on the pages, the sampled completions and the weights.
COMPARED = ("reward", "reward_std", "loss", "grad_norm", "entropy", "learning_rate", "completions/mean_length")


def exact_run_flags(model: Path, output_dir: Path) -> list:
    """8 steps over every sample page (so data order matters), a checkpoint every 4; the edit-distance
    reward differs between any two samples, so every step has a learning signal (non-zero advantages)."""
    return [*tiny_run_flags(model, output_dir, 8), "--pages", ".", "--save_steps", 4,
            "--reward_bench_edit_distance", 1.0]


def wait_for_remote(server, prefix: str, name: str, proc: subprocess.Popen, timeout: float = 540) -> bool:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if name in remote_files(server, prefix):
            return True
        time.sleep(0.1)
    return False


def per_step(records: list[dict]) -> dict[int, dict]:
    return {r["step"]: r for r in records if "reward" in r}


@pytest.mark.slow
def test_sigkill_after_checkpoint_4_then_resume_from_s3_continues_exactly(moto_s3, tmp_path, tiny_model_dir):
    # Run A: 8 steps, uninterrupted, no S3, no W&B.
    run_a = tmp_path / "a"
    a = run_cli([*exact_run_flags(tiny_model_dir, run_a), "--report_to", "none"], tmp_path, fresh=True)
    assert a.returncode == 0, failure(a)

    # Run B, first machine: the same run with S3 and W&B (offline), SIGKILLed once checkpoint-4 is on S3.
    save_uri = f"s3://{moto_s3.bucket}/runs/b"
    machine1 = tmp_path / "machine1"
    b_flags = [*exact_run_flags(tiny_model_dir, machine1), "--s3_save_path", save_uri, "--cache_dir",
               tmp_path / "cache", "--report_to", "wandb", "--resume_from_checkpoint"]
    log_path = tmp_path / "b1.log"
    with log_path.open("w") as log_file:
        proc = warm_python.popen([sys.executable, "-m", "olmocr_rl.grpo_train", *map(str, b_flags)], cwd=REPO,
                                env=cli_env(tmp_path), stdout=log_file, stderr=subprocess.STDOUT)
        try:
            on_s3 = wait_for_remote(moto_s3, "runs/b", "checkpoint-4/trainer_state.json", proc)
            children = descendants(proc.pid)  # the reward workers (and W&B's service)
            proc.kill()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert on_s3, "checkpoint-4 never reached S3 while run B was going:\n" + log_path.read_text()[-6000:]
    assert proc.returncode == -9
    assert survivors(children) == []  # no reward worker lives on under PID 1
    remote = remote_files(moto_s3, "runs/b")
    assert "checkpoint-8/trainer_state.json" not in remote  # killed between the two checkpoints
    wandb_record = moto_s3.client().get_object(Bucket=moto_s3.bucket, Key="runs/b/checkpoint-4/wandb_run.json")
    run_id = json.loads(wandb_record["Body"].read())["id"]
    first_runs = offline_runs(machine1)
    assert len(first_runs) == 1 and first_runs[0].name.endswith(f"-{run_id}"), first_runs
    shutil.rmtree(machine1)  # the preempted machine and its disk are gone

    # Run B, second machine: an empty folder; the same command resumes from S3's checkpoint-4.
    machine2 = tmp_path / "machine2"
    b2 = run_cli([*exact_run_flags(tiny_model_dir, machine2), *b_flags[b_flags.index("--s3_save_path"):]], tmp_path)
    assert b2.returncode == 0, failure(b2)
    log = b2.stdout + b2.stderr
    assert f"pulled {save_uri}/checkpoint-4/" in log
    assert f"loaded the model weights of {machine2 / 'checkpoint-4'} (every key)" in log
    assert f"W&B: continuing run {run_id}" in log

    # Steps 5-8 of run B equal run A's: same pages, completions, rewards, losses, gradients.
    steps_a, steps_b = per_step(read_metrics(run_a)), per_step(read_metrics(machine2))
    assert sorted(steps_b) == [1, 2, 3, 4, 5, 6, 7, 8]  # 1-4 from S3's history, 5-8 trained after the resume
    worst = {key: max(abs(steps_a[s][key] - steps_b[s][key]) for s in range(5, 9)) for key in COMPARED}
    assert all(diff <= 1e-6 for diff in worst.values()), worst
    assert any(steps_a[s]["loss"] != 0.0 for s in range(5, 9)) and all(steps_a[s]["grad_norm"] > 0 for s in range(5, 9))
    from safetensors.torch import load_file

    final_a, final_b = load_file(run_a / "model.safetensors"), load_file(machine2 / "model.safetensors")
    assert max((final_a[k] - final_b[k]).abs().max().item() for k in final_a) == 0.0

    # The resumed W&B run is the same run: its offline folder and the new checkpoint carry the same id.
    second_runs = offline_runs(machine2)
    assert len(second_runs) == 1 and second_runs[0].name.endswith(f"-{run_id}"), second_runs
    assert json.loads((machine2 / "checkpoint-8" / "wandb_run.json").read_text())["id"] == run_id


# ---------------------------------------------------------------------------------------------
# two machines, no shared disk: every node mirrors its own ranks' files, resume pulls them all


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_command(rank: int, port: int, model: Path, output_dir: Path, save_uri: str, cache: Path) -> list[str]:
    """Machine ``rank`` of 2, one process each (accelerate's CPU data parallel over gloo), its own folder."""
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO / "configs" / "accelerate" / "cpu_ddp.yaml"), "--num_processes", "2",
        "--num_machines", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
        "--main_process_port", str(port),
        "-m", "olmocr_rl.grpo_train",
        "--model_name", str(model), "--train_bench_data_folder", str(REPO / "bench_data_sample"),
        "--output_dir", str(output_dir), "--vllm_mode", "none", "--reward_bench",
        "--reward_bench_edit_distance", "1.0", "--max_steps", "6", "--save_steps", "2", "--logging_steps", "1",
        "--num_generations", "2", "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1",
        "--max_completion_length", "8", "--target_longest_image_dim", "256", "--no-log_completions",
        "--dataloader_num_workers", "0", "--warmup_steps", "0", "--seed", "0", "--report_to", "none",
        "--s3_save_path", save_uri, "--cache_dir", str(cache), "--resume_from_checkpoint",
    ]


def start_nodes(tmp_path: Path, folders: list[Path], tag: str, **command) -> list[tuple[subprocess.Popen, Path]]:
    port = free_port()
    nodes = []
    for rank, folder in enumerate(folders):
        log = tmp_path / f"{tag}-node{rank}.log"
        with log.open("w") as handle:
            proc = warm_python.popen(node_command(rank, port, output_dir=folder, **command), cwd=REPO,
                                     env=cli_env(tmp_path), stdout=handle, stderr=subprocess.STDOUT)
        nodes.append((proc, log))
    return nodes


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a launcher and every process it started, as a preempted machine loses them all."""
    import os
    import signal

    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)


def manifests_on_s3(server, prefix: str) -> dict[int, set[int]]:
    """checkpoint step -> node ranks whose manifest is on S3."""
    found: dict[int, set[int]] = {}
    for rel in remote_files(server, prefix):
        parts = rel.split("/")
        if len(parts) == 3 and parts[1] == "olmocr_rl_manifest":
            found.setdefault(int(parts[0].split("-")[1]), set()).add(int(parts[2][len("node-"):-len(".json")]))
    return found


def whole_on_s3(server, prefix: str) -> list[int]:
    """The checkpoint steps whole on S3: both nodes' manifests and trainer_state.json (the files that mark a
    checkpoint whole go last, the manifests before trainer_state.json: either alone is a checkpoint cut short)."""
    remote = remote_files(server, prefix)
    return sorted(step for step, ranks in manifests_on_s3(server, prefix).items()
                  if ranks == {0, 1} and f"checkpoint-{step}/trainer_state.json" in remote)


@pytest.mark.slow
def test_two_machines_without_shared_disk_resume_from_s3_with_every_rank_file(moto_s3, tmp_path, tiny_model_dir):
    save_uri = f"s3://{moto_s3.bucket}/runs/mn"
    command = {"model": tiny_model_dir, "save_uri": save_uri, "cache": tmp_path / "cache"}
    folders = [tmp_path / "node0", tmp_path / "node1"]

    # Both machines train; once a checkpoint is whole on S3 (both nodes' manifests, its trainer_state.json), SIGKILL both.
    nodes = start_nodes(tmp_path, folders, "first", **command)
    try:
        deadline = time.monotonic() + 540
        whole: list[int] = []
        while time.monotonic() < deadline and all(p.poll() is None for p, _ in nodes):
            whole = whole_on_s3(moto_s3, "runs/mn")
            if whole:
                break
            time.sleep(0.1)
    finally:
        processes = [pid for proc, _ in nodes for pid in (proc.pid, *descendants(proc.pid))]
        for proc, _ in nodes:
            kill_tree(proc)
    assert survivors(processes) == []  # launchers, trainers and their reward workers: all gone with the machine
    logs = "\n".join(log.read_text()[-4000:] for _, log in nodes)
    assert whole, "no checkpoint became whole on S3 while both nodes ran:\n" + logs
    step = whole_on_s3(moto_s3, "runs/mn")[-1]
    assert step < 6, logs  # killed before the end
    # Rank 1's RNG state exists only on machine 1's disk, and reached S3 from there.
    assert not (folders[0] / f"checkpoint-{step}" / "rng_state_1.pth").exists()
    assert (folders[1] / f"checkpoint-{step}" / "rng_state_1.pth").is_file()
    remote = remote_files(moto_s3, "runs/mn")
    assert {f"checkpoint-{step}/rng_state_0.pth", f"checkpoint-{step}/rng_state_1.pth",
            f"checkpoint-{step}/trainer_state.json", f"checkpoint-{step}/model.safetensors"} <= remote
    node1 = json.loads(moto_s3.client().get_object(
        Bucket=moto_s3.bucket, Key=f"runs/mn/checkpoint-{step}/olmocr_rl_manifest/node-1.json")["Body"].read())
    assert "rng_state_1.pth" in node1["files"] and node1["world_size"] == 2 and node1["num_machines"] == 2

    # A newer checkpoint on S3 that lacks one rank's file (its manifests list it): never chosen.
    client = moto_s3.client()
    broken = step + 1
    for rel in remote:
        if rel.startswith(f"checkpoint-{step}/") and rel != f"checkpoint-{step}/rng_state_1.pth":
            client.copy_object(Bucket=moto_s3.bucket, CopySource={"Bucket": moto_s3.bucket, "Key": f"runs/mn/{rel}"},
                               Key=f"runs/mn/checkpoint-{broken}/{rel.split('/', 1)[1]}")

    # Fresh machines: both local folders gone; the same commands resume from S3 and finish.
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    nodes = start_nodes(tmp_path, folders, "second", **command)
    for proc, _ in nodes:
        proc.wait(timeout=540)
    logs = [log.read_text() for _, log in nodes]
    assert all(proc.returncode == 0 for proc, _ in nodes), "\n".join(log[-6000:] for log in logs)
    assert f"skipping checkpoint {save_uri}/checkpoint-{broken} on S3: rng_state_1.pth is missing" in logs[0]
    assert f"pulled {save_uri}/checkpoint-{step}/" in logs[0]
    for folder in folders:  # each machine pulled every rank's files
        assert (folder / f"checkpoint-{step}" / "rng_state_1.pth").is_file()
        assert (folder / f"checkpoint-{step}" / "trainer_state.json").is_file()
    state = json.loads((folders[0] / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    assert [h["step"] for h in state["log_history"] if "reward" in h] == [1, 2, 3, 4, 5, 6]
    assert manifests_on_s3(moto_s3, "runs/mn")[6] == {0, 1}

    # The same two machines uninterrupted: the resumed steps equal theirs (rank 1 samples with its own
    # restored RNG state, which only machine 1's disk had; the logged reward averages both ranks).
    reference = [tmp_path / "ref0", tmp_path / "ref1"]
    nodes = start_nodes(tmp_path, reference, "reference", **{**command, "save_uri": f"s3://{moto_s3.bucket}/runs/ref"})
    for proc, log in nodes:
        assert proc.wait(timeout=540) == 0, log.read_text()[-6000:]
    steps_ref, steps_resumed = per_step(read_metrics(reference[0])), per_step(read_metrics(folders[0]))
    assert sorted(steps_resumed) == [1, 2, 3, 4, 5, 6]
    worst = {key: max(abs(steps_ref[s][key] - steps_resumed[s][key]) for s in range(step + 1, 7)) for key in COMPARED}
    assert all(diff <= 1e-6 for diff in worst.values()), worst

    # One process asked to resume the two machines' checkpoint: one error line, before the model loads.
    single = run_cli([*exact_run_flags(tmp_path / "no-model", tmp_path / "single"), "--s3_save_path", save_uri,
                      "--report_to", "none", "--resume_from_checkpoint"], tmp_path)
    assert single.returncode == 1, failure(single)
    last = single.stderr.rstrip().splitlines()[-1]
    assert last == (f"error: --resume_from_checkpoint: {save_uri}/checkpoint-6/ was saved by 2 processes on 2 machines "
                    "(ddp-cpu), this run has 1 process on 1 machine (single): restart with the same number of "
                    "processes and machines and the same accelerate config, or start a new run (another "
                    "--output_dir and --s3_save_path)"), last


# ---------------------------------------------------------------------------------------------
# the manifest rules, without training (fast)


def write_checkpoint(folder: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


class NodeState:
    """The TrainerState fields S3SyncCallback reads, on the local main process of some machine."""

    def __init__(self, step: int, world_main: bool):
        self.global_step, self.is_world_process_zero, self.is_local_process_zero = step, world_main, True


class Args:
    save_total_limit = 1


TWO_NODES = dict(world_size=2, num_machines=2, engine="ddp-cpu")


def test_checkpoint_problem_needs_every_node_and_every_listed_file():
    from olmocr_rl.storage import checkpoint_problem

    whole = {"trainer_state.json": 10, "model.safetensors": 100, "rng_state_0.pth": 5, "rng_state_1.pth": 5}
    node0 = {"node_rank": 0, "num_machines": 2, "world_size": 2,
             "files": {"trainer_state.json": 10, "model.safetensors": 100, "rng_state_0.pth": 5}}
    node1 = {"node_rank": 1, "num_machines": 2, "world_size": 2, "files": {"rng_state_1.pth": 5}}
    assert checkpoint_problem(whole, [node0, node1]) is None
    assert checkpoint_problem(whole, []) is None  # a checkpoint from before manifests: the old rule
    assert "no node manifest" in checkpoint_problem(whole, [], need_manifests=True)
    assert checkpoint_problem(whole, [node0]) == (
        "no manifest from node(s) [1] of 2: their files may not have reached S3")
    without_shard = {k: v for k, v in whole.items() if k != "rng_state_1.pth"}
    assert checkpoint_problem(without_shard, [node0, node1]) == "rng_state_1.pth is missing"
    assert checkpoint_problem({**whole, "rng_state_1.pth": 4}, [node0, node1]) == (
        "rng_state_1.pth has 4 bytes, its manifest says 5")


def test_each_node_mirrors_its_own_files_and_its_manifest_last(moto_s3, tmp_path):
    from olmocr_rl.storage import S3SyncCallback, Topology

    uri = f"s3://{moto_s3.bucket}/run"
    disk0, disk1 = tmp_path / "node0", tmp_path / "node1"
    write_checkpoint(disk0 / "checkpoint-2", {"trainer_state.json": b"{}", "model.safetensors": b"w" * 8,
                                               "rng_state_0.pth": b"r0"})
    write_checkpoint(disk1 / "checkpoint-1", {"rng_state_1.pth": b"old"})
    write_checkpoint(disk1 / "checkpoint-2", {"rng_state_1.pth": b"r1"})
    node0 = S3SyncCallback(uri, disk0, background=False, topology=Topology(node_rank=0, **TWO_NODES))
    node1 = S3SyncCallback(uri, disk1, background=False, topology=Topology(node_rank=1, **TWO_NODES))
    node1.on_train_begin(Args(), NodeState(2, False), None)
    node0.on_save(Args(), NodeState(2, True), None)
    node1.on_save(Args(), NodeState(2, False), None)
    remote = remote_files(moto_s3, "run")
    assert {"checkpoint-2/rng_state_0.pth", "checkpoint-2/rng_state_1.pth", "checkpoint-2/trainer_state.json",
            "checkpoint-2/olmocr_rl_manifest/node-0.json", "checkpoint-2/olmocr_rl_manifest/node-1.json"} <= remote
    # Machine 1's disk is not pruned by the Trainer: the callback keeps save_total_limit there, and on S3.
    assert not (disk1 / "checkpoint-1").exists() and not any(r.startswith("checkpoint-1/") for r in remote)
    manifest = json.loads((disk1 / "checkpoint-2" / "olmocr_rl_manifest" / "node-1.json").read_text())
    assert manifest["files"] == {"rng_state_1.pth": 2} and manifest["engine"] == "ddp-cpu"


def test_resume_on_two_machines_skips_a_checkpoint_missing_a_node_and_refuses_another_layout(moto_s3, tmp_path):
    from olmocr_rl.storage import CheckpointMismatchError, S3SyncCallback, Topology, resolve_resume_checkpoint

    uri = f"s3://{moto_s3.bucket}/run"
    for step, nodes in ((2, (0, 1)), (4, (0,))):  # checkpoint-4: machine 1's upload never finished
        for node in nodes:
            disk = tmp_path / f"saved{node}"
            files = {"rng_state_1.pth": b"r1"} if node else {
                "trainer_state.json": json.dumps({"global_step": step}).encode(),
                "model.safetensors": safetensors_bytes(b"w")}
            write_checkpoint(disk / f"checkpoint-{step}", files)
            S3SyncCallback(uri, disk, background=False, topology=Topology(node_rank=node, **TWO_NODES)).on_save(
                None, NodeState(step, node == 0), None)
    fresh = tmp_path / "fresh"
    write_checkpoint(fresh / "checkpoint-6", {"trainer_state.json": json.dumps({"global_step": 6}).encode(),
                                              "model.safetensors": safetensors_bytes(b"w")})  # local only
    resumed = resolve_resume_checkpoint(fresh, uri, Topology(node_rank=1, **TWO_NODES))
    assert resumed == fresh / "checkpoint-2"  # S3 decides for every machine; checkpoint-4 lacks node 1
    assert (resumed / "rng_state_1.pth").read_bytes() == b"r1" and (resumed / "trainer_state.json").is_file()
    with pytest.raises(CheckpointMismatchError) as error:
        resolve_resume_checkpoint(tmp_path / "empty", uri, Topology(world_size=4, num_machines=2, engine="ddp"))
    assert str(error.value).startswith(f"{uri}/checkpoint-2/ was saved by 2 processes on 2 machines (ddp-cpu), this "
                                       "run has 4 processes on 2 machines (ddp): restart with the same number")


@pytest.mark.slow
def test_resume_in_the_second_epoch_sees_that_epochs_page_order(tmp_path, tiny_model_dir):
    """The 10 sample pages, one a step: a checkpoint at step 11 sits in epoch 1. Resuming there must give
    epoch 1's pages (TRL's sampler draws each epoch's order from one running generator, so a fresh process
    would replay epoch 0's order); steps 12-13 equal the uninterrupted run's."""
    def flags(out, steps):
        return [*exact_run_flags(tiny_model_dir, out), "--max_steps", steps, "--save_steps", 11,
                "--lr_schedule", "constant", "--warmup_steps", 0, "--report_to", "none"]

    run_a = tmp_path / "a"
    a = run_cli(flags(run_a, 13), tmp_path, fresh=True)
    assert a.returncode == 0, failure(a)
    run_b = tmp_path / "b"
    first = run_cli(flags(run_b, 11), tmp_path)
    assert first.returncode == 0, failure(first)
    resumed = run_cli([*flags(run_b, 13), "--resume_from_checkpoint"], tmp_path)
    assert resumed.returncode == 0, failure(resumed)
    assert "resuming from" in resumed.stdout + resumed.stderr
    steps_a, steps_b = per_step(read_metrics(run_a)), per_step(read_metrics(run_b))
    assert sorted(steps_b) == list(range(1, 14))
    worst = {key: max(abs(steps_a[s][key] - steps_b[s][key]) for s in (12, 13)) for key in COMPARED}
    assert all(diff <= 1e-6 for diff in worst.values()), worst


def test_resuming_a_checkpoint_of_another_architecture_is_one_error_line(tmp_path, tiny_model_dir):
    from olmocr_rl.tiny_model import build_tiny_model

    out = tmp_path / "out"
    first = run_cli([*tiny_run_flags(tiny_model_dir, out, 2), "--report_to", "none"], tmp_path)
    assert first.returncode == 0, failure(first)
    other = build_tiny_model(tmp_path / "other", seed=0, vocab_size=512)  # a smaller embedding and head (710 -> 512)
    resumed = run_cli([*tiny_run_flags(other, out, 4), "--report_to", "none", "--resume_from_checkpoint"], tmp_path)
    assert resumed.returncode == 1, failure(resumed)
    assert "Traceback" not in resumed.stderr
    errors = [line for line in resumed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: --resume_from_checkpoint: {out / 'checkpoint-2'} does "
                                                     "not fit the model (size mismatch")
    assert "--model_name the run started from" in errors[0]
