"""Preemption and faults lose nothing, in real runs of the CLI on the tiny model (CPU, 2 completions a step,
8 steps, a checkpoint every 2): a real SIGTERM / SIGUSR1 / SIGINT to a real run saves the step it arrived in
and the resumed run equals the uninterrupted one bit for bit (also under torchrun with 2 gloo processes);
damaged checkpoints are skipped for the newest one that verifies (here or on S3) or refused in one line; a
finished run resumed twice writes nothing and leaves S3 as it was; a full disk, a second run in the same folder,
a new run into a used folder, a PDF that vanishes, and a SIGKILL (no reward worker outlives it) each end in
one line with nothing corrupted. The same rules without training: tests/unit/test_fault_handling.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_python
from fault_helpers import descendants, survivors, wait_for_record
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from test_cli_e2e import BENCH, REPO, cli_env, failure, read_metrics, run_cli, tiny_run_flags

from olmocr_rl.storage import local_checkpoint_problem, sync_dir_to_s3

# Every per-step number that depends on the pages, the sampled completions and the weights.
COMPARED = ("reward", "reward_std", "loss", "grad_norm", "entropy", "learning_rate", "completions/mean_length")


def flags(model: Path, out: Path, steps: int = 8, bench: Path = BENCH) -> list:
    """8 steps over every sample page, a checkpoint every 2 (kept: 3); the edit-distance reward gives every step
    a learning signal."""
    args = [*tiny_run_flags(model, out, steps), "--pages", ".", "--reward_bench_edit_distance", 1.0,
            "--report_to", "none"]
    args[args.index("--train_bench_data_folder") + 1] = bench
    return args


def start_cli(args: list, tmp_path: Path, log: Path, env: dict | None = None, launcher: list | None = None,
              fresh: bool = False):
    """The CLI (under ``launcher``, e.g. torchrun), forked from the preloaded interpreter unless ``fresh``."""
    with log.open("w") as handle:
        return warm_python.popen([*(launcher or [sys.executable]), "-m", "olmocr_rl.grpo_train", *map(str, args)],
                                 fresh=fresh, cwd=REPO, env=env or cli_env(tmp_path), stdout=handle,
                                 stderr=subprocess.STDOUT)


def per_step(records: list[dict]) -> dict[int, dict]:
    return {r["step"]: r for r in records if "reward" in r}


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def saved_step(log: str) -> int:
    """N of the trainer's "stopped by SIG... after step N" line (there must be exactly one)."""
    lines = [line for line in log.splitlines() if "stopped by SIG" in line]
    assert len(lines) == 1, log[-4000:]
    return int(lines[0].split(" after step ")[1].split(":")[0])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model_dir) -> Path:
    """The reference: 8 steps, never interrupted (checkpoints 4, 6 and 8 kept)."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    result = run_cli(flags(tiny_model_dir, tmp / "out"), tmp, fresh=True)  # the reference: a process of its own
    assert result.returncode == 0, failure(result)
    return tmp / "out"


def assert_same_steps(reference: Path, resumed: Path, steps) -> None:
    a, b = per_step(read_metrics(reference)), per_step(read_metrics(resumed))
    assert sorted(b) == list(range(1, 9)), sorted(b)  # every step once: none lost, none twice
    different = {(s, key): (a[s][key], b[s][key]) for s in steps for key in COMPARED if a[s][key] != b[s][key]}
    assert not different, different  # bit for bit
    assert all(a[s]["grad_norm"] > 0 for s in steps)


# ---- stop signals ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_mid_run_saves_that_step_and_the_resumed_run_equals_the_uninterrupted_one(
        tmp_path, tiny_model_dir, uninterrupted):
    out = tmp_path / "out"
    log = tmp_path / "first.log"
    proc = start_cli(flags(tiny_model_dir, out), tmp_path, log)
    try:
        # After checkpoint-2 is whole (its manifest is its last file), so the signal lands in step 3.
        assert wait_for_record(proc, out / "metrics.jsonl", 2), log.read_text()[-4000:]
        while proc.poll() is None and not (out / "checkpoint-2" / "olmocr_rl_manifest" / "node-0.json").exists():
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 75, log.read_text()[-6000:]
    finally:
        proc.kill()
    text = log.read_text()
    assert "Traceback" not in text
    assert [line for line in text.splitlines() if "SIGTERM received" in line], text[-3000:]
    step = saved_step(text)
    assert step >= 3
    assert local_checkpoint_problem(out / f"checkpoint-{step}") is None  # whole, and verified
    assert max(per_step(read_metrics(out))) == step  # every step trained is in the checkpoint: none lost
    assert not (out / "model.safetensors").exists() and not (out / "run_summary.json").exists()  # not finished

    resumed = run_cli([*flags(tiny_model_dir, out), "--resume_from_checkpoint"], tmp_path)
    assert resumed.returncode == 0, failure(resumed)
    assert f"resuming from {out / f'checkpoint-{step}'}" in resumed.stdout + resumed.stderr
    assert_same_steps(uninterrupted, out, range(step + 1, 9))
    from safetensors.torch import load_file

    final_a, final_b = load_file(uninterrupted / "model.safetensors"), load_file(out / "model.safetensors")
    assert all((final_a[k] == final_b[k]).all() for k in final_a)


@pytest.mark.slow
def test_sigterm_to_torchrun_saves_every_ranks_step_and_the_resume_equals_the_uninterrupted_run(
        tmp_path, tiny_model_dir):
    """torchrun passes the signal to both gloo processes; they agree on the step, save it (each rank's RNG state)
    and exit 75; resumed under torchrun, steps after it equal the uninterrupted 2-process run's."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]  # = torchrun

    def two_process_flags(out: Path) -> list:
        args = flags(tiny_model_dir, out)
        args[args.index("--per_device_train_batch_size") + 1] = 1  # 2 processes x 1 = one page's 2 completions
        return args

    reference = tmp_path / "reference"
    done = start_cli(two_process_flags(reference), tmp_path, tmp_path / "reference.log", launcher=torchrun,
                     fresh=True)  # the reference: torchrun and its workers processes of their own
    assert done.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-6000:]

    out, log = tmp_path / "out", tmp_path / "first.log"
    proc = start_cli(two_process_flags(out), tmp_path, log, launcher=torchrun)
    try:
        assert wait_for_record(proc, out / "metrics.jsonl", 2), log.read_text()[-4000:]
        processes = [proc.pid, *descendants(proc.pid)]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
    finally:
        proc.kill()
    text = log.read_text()
    assert survivors(processes) == []
    step = saved_step(text)  # logged once, by rank 0
    assert "exiting with status 75" in text
    checkpoint = out / f"checkpoint-{step}"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in checkpoint.iterdir()}
    assert local_checkpoint_problem(checkpoint) is None
    assert max(per_step(read_metrics(out))) == step

    resumed = start_cli([*two_process_flags(out), "--resume_from_checkpoint"], tmp_path, tmp_path / "resumed.log",
                        launcher=torchrun)
    assert resumed.wait(timeout=600) == 0, (tmp_path / "resumed.log").read_text()[-6000:]
    assert_same_steps(reference, out, range(step + 1, 9))


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGUSR1, signal.SIGINT], ids=["SIGUSR1", "SIGINT"])
def test_usr1_and_ctrl_c_save_upload_and_stop_in_one_line(moto_s3, tmp_path, tiny_model_dir, stop):
    """Slurm's USR1 before the time limit, and Ctrl-C: a checkpoint of the step, uploaded to --s3_save_path
    (within --preempt_upload_timeout), a line, status 75, no traceback."""
    uri = f"s3://{moto_s3.bucket}/runs/stop"
    out, log = tmp_path / "out", tmp_path / "run.log"
    proc = start_cli([*flags(tiny_model_dir, out, 200), "--s3_save_path", uri, "--cache_dir", tmp_path / "cache"],
                     tmp_path, log)
    try:
        assert wait_for_record(proc, out / "metrics.jsonl", 1), log.read_text()[-4000:]
        proc.send_signal(stop)
        assert proc.wait(timeout=300) == 75, log.read_text()[-6000:]
    finally:
        proc.kill()
    text = log.read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert len([line for line in text.splitlines() if f"{signal.Signals(stop).name} received" in line]) == 1
    step = saved_step(text)
    assert f"checkpoint-{step} saved in {out} and uploaded to {uri}; exiting with status 75" in text
    assert local_checkpoint_problem(out / f"checkpoint-{step}") is None
    remote = moto_s3.client().list_objects_v2(Bucket=moto_s3.bucket, Prefix=f"runs/stop/checkpoint-{step}/")
    assert f"runs/stop/checkpoint-{step}/olmocr_rl_manifest/node-0.json" in {o["Key"] for o in remote["Contents"]}


def test_sigterm_before_training_began_is_one_line(tmp_path, tiny_model_dir):
    out, log = tmp_path / "out", tmp_path / "run.log"
    proc = start_cli(flags(tiny_model_dir, out), tmp_path, log)
    try:
        deadline = time.monotonic() + 300
        while "train pages:" not in log.read_text():  # the datasets are built; the model loads next
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 75
    finally:
        proc.kill()
    text = log.read_text()
    assert "Traceback" not in text
    assert text.rstrip().splitlines()[-1] == "SIGTERM before training began: nothing to save yet; exiting with status 75"


# ---- damaged checkpoints ---------------------------------------------------------------------------------------


def killed_after_step_6(uninterrupted: Path, folder: Path) -> Path:
    """The reference run's folder as if it had been killed right after checkpoint-6."""
    shutil.copytree(uninterrupted, folder)
    shutil.rmtree(folder / "checkpoint-8")
    for name in ("model.safetensors", "run_summary.json"):
        (folder / name).unlink()
    metrics = folder / "metrics.jsonl"
    metrics.write_text("".join(line + "\n" for line in metrics.read_text().splitlines() if json.loads(line)["step"] <= 6))
    return folder


def truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


DAMAGE = {
    "truncated weights": (lambda c: truncate(c / "model.safetensors", 1000),
                          "model.safetensors has 1000 bytes, its manifest says"),
    "half-written trainer state": (lambda c: (shutil.rmtree(c / "olmocr_rl_manifest"),  # as before manifests
                                             truncate(c / "trainer_state.json", (c / "trainer_state.json").stat().st_size - 99)),
                                   "trainer_state.json is not valid JSON"),
}  # a file its manifest lists but that is missing, or another checksum: tests/unit/test_fault_handling.py


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(tmp_path, tiny_model_dir, uninterrupted, case):
    damage, reason = DAMAGE[case]
    out = killed_after_step_6(uninterrupted, tmp_path / "out")
    damage(out / "checkpoint-6")
    resumed = run_cli([*flags(tiny_model_dir, out), "--resume_from_checkpoint"], tmp_path)
    assert resumed.returncode == 0, failure(resumed)
    log = resumed.stdout + resumed.stderr
    assert "Traceback" not in log
    assert f"skipping checkpoint {out / 'checkpoint-6'}: {reason}" in log
    assert f"resuming from {out / 'checkpoint-4'}" in log
    assert_same_steps(uninterrupted, out, range(5, 9))


@pytest.mark.slow
def test_a_good_copy_on_s3_replaces_a_damaged_local_checkpoint(moto_s3, tmp_path, tiny_model_dir, uninterrupted):
    """checkpoint-6 is damaged here (its own manifest has the right sizes) but whole on S3: S3's copy is pulled."""
    uri = f"s3://{moto_s3.bucket}/run"
    out = killed_after_step_6(uninterrupted, tmp_path / "out")
    sync_dir_to_s3(out, uri)
    truncate(out / "checkpoint-6" / "model.safetensors", 1000)
    resumed = run_cli([*flags(tiny_model_dir, out), "--resume_from_checkpoint", "--s3_save_path", uri,
                       "--cache_dir", tmp_path / "cache"], tmp_path)
    assert resumed.returncode == 0, failure(resumed)
    log = resumed.stdout + resumed.stderr
    assert "Traceback" not in log
    assert f"skipping checkpoint {out / 'checkpoint-6'}: model.safetensors has 1000 bytes" in log
    assert f"pulled {uri}/checkpoint-6/" in log and f"resuming from {out / 'checkpoint-6'}" in log
    assert_same_steps(uninterrupted, out, range(7, 9))


@pytest.mark.slow
def test_a_checkpoint_without_optimizer_state_is_one_line_or_with_the_flag_a_warning(
        tmp_path, tiny_model_dir, uninterrupted):
    out = killed_after_step_6(uninterrupted, tmp_path / "out")
    for name in ("optimizer.pt", "scheduler.pt"):
        (out / "checkpoint-6" / name).unlink()
    shutil.rmtree(out / "checkpoint-6" / "olmocr_rl_manifest")  # saved that way (save_only_model): nothing missing
    refused = run_cli([*flags(tiny_model_dir, out), "--resume_from_checkpoint"], tmp_path)
    assert refused.returncode == 1, failure(refused)
    assert "Traceback" not in refused.stderr
    assert errors(refused.stderr) == [
        f"error: --resume_from_checkpoint: {out / 'checkpoint-6'} has no optimizer.pt or scheduler.pt (saved with "
        "save_only_model, or deleted): resuming from it would restart the optimizer's state and the learning-rate "
        "schedule; pass --allow_partial_resume to resume the weights anyway, or resume from another checkpoint "
        "(--resume_from_checkpoint PATH)"]

    allowed = run_cli([*flags(tiny_model_dir, out), "--resume_from_checkpoint", "--allow_partial_resume"], tmp_path)
    assert allowed.returncode == 0, failure(allowed)
    log = allowed.stdout + allowed.stderr
    assert "--allow_partial_resume: " in log and "the learning-rate schedule was moved on to step 6" in log
    a, b = per_step(read_metrics(uninterrupted)), per_step(read_metrics(out))
    assert [b[s]["learning_rate"] for s in (7, 8)] == [a[s]["learning_rate"] for s in (7, 8)]  # not restarted


def test_an_explicit_damaged_checkpoint_is_one_error_line(tmp_path, uninterrupted):
    out = killed_after_step_6(uninterrupted, tmp_path / "out")
    truncate(out / "checkpoint-6" / "model.safetensors", 1000)
    # A model folder that does not exist: the check comes before the model loads.
    result = run_cli([*flags(tmp_path / "no-model", out), "--resume_from_checkpoint", out / "checkpoint-6"], tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, failure(result)
    assert errors(result.stderr) == [
        f"error: --resume_from_checkpoint: {out / 'checkpoint-6'} cannot be resumed from: model.safetensors has 1000 "
        "bytes, its manifest says 2946424; pick another checkpoint, or pass the bare flag to take the newest one that "
        "verifies"]


def test_resuming_with_other_trained_parameters_is_one_error_line(tmp_path, tiny_model_dir, uninterrupted):
    """A checkpoint of a run that trained the vision tower, resumed with it frozen: the optimizer state cannot fit;
    one line naming the flag, from the flags the checkpoint was saved with (before the model loads), the
    checkpoint left as it was."""
    out = killed_after_step_6(uninterrupted, tmp_path / "out")
    result = run_cli([*flags(tiny_model_dir, out), "--resume_from_checkpoint", "--freeze_vision_tower"], tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, failure(result)
    [line] = errors(result.stderr)
    assert line == (f"error: --resume_from_checkpoint: {out / 'checkpoint-6'}: --freeze_vision_tower on (the "
                    "checkpoint was saved with off): its optimizer state is for another set of trained parameters; "
                    "resume with --no-freeze_vision_tower, or start a new run in another --output_dir")
    assert local_checkpoint_problem(out / "checkpoint-6") is None
    assert max(per_step(read_metrics(out))) == 6  # nothing trained


# ---- a finished run stays finished -----------------------------------------------------------------------------


def objects(server, prefix: str) -> dict[str, tuple[str, float]]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix)
    return {o["Key"]: (o["ETag"], o["LastModified"].timestamp()) for page in pages for o in page.get("Contents", [])}


def files(folder: Path) -> dict[str, tuple[int, float]]:
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime)
            for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_finished_run_resumed_twice_trains_nothing_writes_nothing_and_leaves_s3_as_it_was(
        moto_s3, tmp_path, tiny_model_dir):
    uri = f"s3://{moto_s3.bucket}/runs/done"
    out = tmp_path / "out"
    run = [*flags(tiny_model_dir, out, 4), "--s3_save_path", uri, "--cache_dir", tmp_path / "cache",
           "--resume_from_checkpoint"]
    first = run_cli(run, tmp_path)
    assert first.returncode == 0, failure(first)
    before_s3, before_local = objects(moto_s3, "runs/done/"), files(out)
    assert "runs/done/checkpoint-4/trainer_state.json" in before_s3
    for attempt in range(2):  # a requeued job that had finished, twice
        again = run_cli(run, tmp_path)
        assert again.returncode == 0, failure(again)
        log = again.stdout + again.stderr
        assert f"already finished at step 4 ({out / 'checkpoint-4'})" in log, log[-3000:]
        assert "Traceback" not in log and "resuming from" not in log
        assert objects(moto_s3, "runs/done/") == before_s3  # keys, ETags, times
        assert files(out) == before_local  # sizes and times: nothing written
    fresh = tmp_path / "fresh-machine"
    again = run_cli([*flags(tiny_model_dir, fresh, 4), *run[-5:]], tmp_path)  # S3 knows it is finished: no pull
    assert again.returncode == 0, failure(again)
    assert f"already finished at step 4 ({uri}/checkpoint-4/)" in again.stdout + again.stderr
    assert list(fresh.iterdir()) == [] and objects(moto_s3, "runs/done/") == before_s3


# ---- disk and folders ------------------------------------------------------------------------------------------

# The CLI with torch.save failing as on a full disk while it writes checkpoint-4's optimizer.pt (half written).
FULL_DISK_AT_CHECKPOINT_4 = """
import errno, sys, torch
real_save = torch.save
def save(obj, f, *args, **kwargs):
    if str(f).endswith("checkpoint-4/optimizer.pt"):
        open(f, "wb").write(b"PK" + b"x" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device", str(f))
    return real_save(obj, f, *args, **kwargs)
torch.save = save
from olmocr_rl.grpo_train import main
sys.exit(main(sys.argv[1:]))
"""


def assert_full_disk_line(result: subprocess.CompletedProcess, out: Path) -> None:
    assert result.returncode == 1, failure(result)
    assert "Traceback" not in result.stderr
    (line,) = errors(result.stderr)
    assert line.startswith(f"error: saving {out / 'checkpoint-4'} failed: no space left on device: it needs about "), line
    assert line.endswith("; checkpoint-2 is intact: make room (or point --output_dir at a disk with room) and resume "
                         "with --resume_from_checkpoint"), line
    assert not (out / "checkpoint-4").exists()  # the half-written folder is gone
    assert local_checkpoint_problem(out / "checkpoint-2") is None


def test_a_full_disk_at_a_save_is_one_line_and_the_checkpoint_before_is_intact(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    result = warm_python.run([sys.executable, "-c", FULL_DISK_AT_CHECKPOINT_4, *map(str, flags(tiny_model_dir, out))],
                            cwd=REPO, env=cli_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert_full_disk_line(result, out)


@pytest.mark.slow
def test_a_real_full_disk_a_12_mb_tmpfs(tmp_path, tiny_model_dir):
    """The same on a real full file system (needs the right to mount a tmpfs: root in a container)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()[:100]})")
    try:
        out = disk / "out"
        result = run_cli(flags(tiny_model_dir, out), tmp_path)
        assert_full_disk_line(result, out)
        assert "file system of " + str(disk) in result.stderr
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.slow
def test_one_folder_one_run_and_a_new_run_needs_resume_or_overwrite(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    first = start_cli(flags(tiny_model_dir, out, 200), tmp_path, tmp_path / "first.log")
    try:
        assert wait_for_record(first, out / "metrics.jsonl", 1), (tmp_path / "first.log").read_text()[-4000:]
        second = run_cli(flags(tmp_path / "no-model", out), tmp_path)  # stops before its model would load
        assert second.returncode == 1 and "Traceback" not in second.stderr, failure(second)
        (line,) = errors(second.stderr)
        assert line.startswith(f"error: --output_dir {out} is in use by another run (pid {first.pid} on "), line
        assert line.endswith("): wait for it to end, or choose another --output_dir")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=300) == 75
    finally:
        first.kill()
    steps = [r["step"] for r in read_metrics(out) if "reward" in r]
    assert steps == list(range(1, len(steps) + 1))  # one run's history, not two interleaved

    again = run_cli(flags(tmp_path / "no-model", out), tmp_path)  # a new run, not resuming
    assert again.returncode == 1 and "Traceback" not in again.stderr, failure(again)
    (line,) = errors(again.stderr)
    assert line.startswith(f"error: --output_dir {out} already holds an earlier run's checkpoint-") and line.endswith(
        ": pass --resume_from_checkpoint to continue it, choose another --output_dir, or pass --overwrite_output_dir "
        "to start over"), line

    over = run_cli([*flags(tiny_model_dir, out, 2), "--overwrite_output_dir"], tmp_path)
    assert over.returncode == 0, failure(over)
    assert "--overwrite_output_dir: removed checkpoint-" in over.stdout + over.stderr
    assert [r["step"] for r in read_metrics(out) if "reward" in r] == [1, 2]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]


@pytest.mark.slow
def test_a_pdf_that_vanishes_mid_run_is_one_line_and_a_save(tmp_path, tiny_model_dir):
    bench = tmp_path / "bench"
    shutil.copytree(BENCH, bench)
    out, log = tmp_path / "out", tmp_path / "run.log"
    proc = start_cli(flags(tiny_model_dir, out, 30, bench=bench), tmp_path, log)
    try:
        assert wait_for_record(proc, out / "metrics.jsonl", 3), log.read_text()[-4000:]
        (bench / "pdfs").rename(bench / "pdfs-gone")
        assert proc.wait(timeout=300) == 1
    finally:
        proc.kill()
    text = log.read_text()
    assert "Traceback" not in text
    (line,) = errors(text)
    assert "PDF file not found" in line and "resume with --resume_from_checkpoint" in line, line
    step = max(per_step(read_metrics(out)))
    assert f"saved checkpoint-{step}:" in line or f"checkpoint-{step} (saved before) holds every step done" in line
    assert local_checkpoint_problem(out / f"checkpoint-{step}") is None


@pytest.mark.slow
def test_no_reward_worker_outlives_a_sigkilled_trainer(tmp_path, tiny_model_dir):
    out, log = tmp_path / "out", tmp_path / "run.log"
    proc = start_cli(flags(tiny_model_dir, out, 200), tmp_path, log,
                     env={**cli_env(tmp_path), "OLMOCR_RL_REWARD_WORKERS": "2"})
    try:
        assert wait_for_record(proc, out / "metrics.jsonl", 2), log.read_text()[-4000:]
        workers = descendants(proc.pid)
        assert len(workers) >= 2, workers  # the reward pool
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert survivors(workers) == []
