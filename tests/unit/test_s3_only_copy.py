"""When S3 is the only copy (Beaker: the disk goes with the job), in-process against the real S3 server on
loopback: a requeued finished run completes its mirror, a prefix has one run at a time (its lease), a prefix
whose checkpoints are all damaged never starts a run over, and the CLI's start-up refusals are one line each."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_helpers import safetensors_bytes
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from fault_helpers import real_checkpoint

from olmocr_rl import grpo_train
from olmocr_rl.storage import sync_dir_to_s3
from olmocr_rl.storage.lease import LEASE_NAME, LeaseHeldError, acquire_lease, release_held

REPO = Path(__file__).resolve().parents[2]


def cli(output_dir: Path, *extra) -> list[str]:
    """Flags of a short run on the bench sample; the model is never loaded by the paths tested here."""
    return [str(a) for a in ("--config", REPO / "configs" / "tiny-cpu.yaml", "--model_name", output_dir / "no-model",
                             "--output_dir", output_dir, "--train_bench_data_folder", REPO / "bench_data_sample",
                             "--max_steps", 8, "--save_steps", 2, "--vllm_mode", "none", "--report_to", "none",
                             *extra)]


def keys(server, prefix: str) -> set[str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix)
    return {o["Key"][len(prefix):] for page in pages for o in page.get("Contents", [])}


def finished_run(out: Path) -> set[str]:
    """A run that trained to its last step (8) on this disk: two checkpoints, the final model, its summary."""
    real_checkpoint(out, 6)
    real_checkpoint(out, 8)
    (out / "model.safetensors").write_bytes(safetensors_bytes(b"final" * 100))
    (out / "config.json").write_text("{}")
    (out / "run_summary.json").write_text(json.dumps({"global_step": 8}))
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}


def test_a_requeued_finished_run_completes_its_mirror_then_exits_0(moto_s3, tmp_path, capsys):
    uri = f"s3://{moto_s3.bucket}/runs/r1"
    out = tmp_path / "out"
    local = finished_run(out)
    sync_dir_to_s3(out / "checkpoint-6", f"{uri}/checkpoint-6")  # S3 went down after checkpoint-6 (exit 74)
    assert "model.safetensors" not in keys(moto_s3, "runs/r1/")
    assert grpo_train.main(cli(out, "--s3_save_path", uri, "--resume_from_checkpoint")) == 0
    assert keys(moto_s3, "runs/r1/") == local  # the final model, checkpoint-8 and the summary went up
    log = capsys.readouterr().err  # setup_logging's handler writes to stderr
    assert f"already finished at step 8 ({out / 'checkpoint-8'}): nothing to train; completed its mirror to {uri}: " \
           "uploaded 10 files" in log and "error" not in log
    assert grpo_train.main(cli(out, "--s3_save_path", uri, "--resume_from_checkpoint")) == 0  # requeued once more
    assert "nothing to train, nothing written" in capsys.readouterr().err  # S3 is whole: nothing went up


def test_a_requeued_finished_run_with_s3_still_down_exits_74_in_one_line(moto_s3, tmp_path, capsys, monkeypatch):
    uri = f"s3://{moto_s3.bucket}/runs/r1"
    out = tmp_path / "out"
    finished_run(out)
    moto_s3.stop()
    from olmocr_rl.storage import mirror

    monkeypatch.setattr(mirror.time, "sleep", lambda s: None)
    assert grpo_train.main(cli(out, "--s3_save_path", uri, "--resume_from_checkpoint")) == 74
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith(f"error: already finished at step 8 ({out / 'checkpoint-8'}), but "
                                               f"completing its mirror to {uri} failed: ")


# ---- one run at a time on a prefix: the lease ------------------------------------------------------------------

HOLDER = """
import sys, time
from olmocr_rl.storage.lease import acquire_lease
acquire_lease(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def start_holder(uri: str, env: dict) -> subprocess.Popen:
    """Another run's process on this machine holding the prefix's lease (renewed by its thread)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, uri], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env, "OLMOCR_RL_JOB_ID": "another-job"})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_lease_of_another_run_stops_a_start_in_one_line_and_a_dead_ones_is_taken_over(
        moto_s3, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OLMOCR_RL_JOB_ID", "this-job")  # whatever scheduler runs the suite
    uri = f"s3://{moto_s3.bucket}/runs/shared"
    holder = start_holder(uri, moto_s3.env)
    try:
        lease = json.loads(moto_s3.client().get_object(Bucket=moto_s3.bucket, Key="runs/shared/" + LEASE_NAME)
                           ["Body"].read())
        assert lease["pid"] == holder.pid
        assert grpo_train.main(cli(tmp_path / "second", "--s3_save_path", uri, "--resume_from_checkpoint",
                                   "--seed", 7)) == 1
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(err) == 1 and err[0].startswith(
            f"error: --s3_save_path {uri}/ is in use by another run (run {lease['run']}: pid {holder.pid} on "
            f"{socket.gethostname()}, started {lease['started']}: ")
        assert "wait for it to end, or choose another --s3_save_path" in err[0]
        assert not (tmp_path / "second" / "checkpoint-2").exists()
    finally:
        holder.kill()
        holder.wait()
    logs = []
    handler = logging.Handler()
    handler.emit = logs.append
    logging.getLogger("olmocr_rl.storage.lease").addHandler(handler)
    try:
        taken = acquire_lease(uri, keep_alive=False)  # its process is gone: stale at once, taken over in one line
    finally:
        logging.getLogger("olmocr_rl.storage.lease").removeHandler(handler)
    assert [r.getMessage() for r in logs] == [
        f"taking over the stale S3 lease on {uri}/ of run {lease['run']}: pid {holder.pid} on {socket.gethostname()}, "
        f"started {lease['started']}: {lease['command']}: its process {holder.pid} on this machine is gone"]
    taken.release()
    assert LEASE_NAME not in keys(moto_s3, "runs/shared/")


@pytest.mark.slow  # waits 2 s for a lease to go stale on S3's one-second clock
def test_a_lease_is_renewed_at_each_save_and_goes_stale_when_not_renewed(moto_s3, tmp_path, monkeypatch):
    from olmocr_rl.storage import S3SyncCallback

    monkeypatch.setenv("OLMOCR_RL_JOB_ID", "this-job")  # whatever scheduler runs the suite

    uri = f"s3://{moto_s3.bucket}/runs/r"
    key = "runs/r/" + LEASE_NAME
    other = {"run": "elsewhere", "host": "node7", "pid": 4242, "started": "2026-01-02 10:00:00", "command": "x"}
    moto_s3.client().put_object(Bucket=moto_s3.bucket, Key=key, Body=json.dumps(other).encode())
    with pytest.raises(LeaseHeldError, match="run elsewhere: pid 4242 on node7"):
        acquire_lease(uri, keep_alive=False)  # another machine's, renewed just now: live
    monkeypatch.setenv("OLMOCR_RL_S3_LEASE_SECONDS", "1")
    time.sleep(2.1)  # S3's LastModified has one-second resolution
    lease = acquire_lease(uri, keep_alive=False)
    assert json.loads(moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=key)["Body"].read())["run"] == \
        lease.body["run"]
    before = lease.etag
    callback = S3SyncCallback(uri, tmp_path / "out", background=False)
    (tmp_path / "out" / "checkpoint-2").mkdir(parents=True)
    state = type("State", (), {"is_local_process_zero": True, "is_world_process_zero": True, "global_step": 2})()
    callback.on_save(None, state, None)  # a save renews it (in the background)
    deadline = time.monotonic() + 20
    while lease.etag == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lease.etag != before and not lease.lost
    assert moto_s3.client().head_object(Bucket=moto_s3.bucket, Key=key)["ETag"] == lease.etag
    moto_s3.client().put_object(Bucket=moto_s3.bucket, Key=key, Body=b"{}")  # taken over by another run meanwhile
    assert lease.renew() is False and lease.lost
    lease.release()
    assert LEASE_NAME in keys(moto_s3, "runs/r/")  # not ours any more: left alone
    release_held()


# ---- a prefix whose checkpoints are all damaged ----------------------------------------------------------------


def test_a_prefix_whose_checkpoints_all_fail_verification_stops_the_start_in_one_line(moto_s3, tmp_path, capsys):
    uri = f"s3://{moto_s3.bucket}/runs/broken"
    source = tmp_path / "lost-disk"
    finished_run(source)
    (source / "model.safetensors").unlink()
    sync_dir_to_s3(source, uri)
    client = moto_s3.client()
    client.put_object(Bucket=moto_s3.bucket, Key="runs/broken/checkpoint-8/model.safetensors", Body=b"x" * 40)
    client.delete_object(Bucket=moto_s3.bucket, Key="runs/broken/checkpoint-6/optimizer.pt")
    before = keys(moto_s3, "runs/broken/")
    out = tmp_path / "fresh-machine"
    assert grpo_train.main(cli(out, "--s3_save_path", uri, "--resume_from_checkpoint")) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err == [
        f"error: --resume_from_checkpoint: no checkpoint in {out} (nor on {uri}) can be resumed from (checkpoint-8 on "
        "S3: model.safetensors has 40 bytes, its manifest says "
        f"{(source / 'checkpoint-8' / 'model.safetensors').stat().st_size}; checkpoint-6 on S3: optimizer.pt is "
        "missing): resume from one you restored (--resume_from_checkpoint PATH), or start "
        "over elsewhere (another --s3_save_path and --output_dir; nothing on S3 is written over)"]
    assert keys(moto_s3, "runs/broken/") == before and not any(out.glob("checkpoint-*"))


# ---- start-up refusals: one line each, before the model loads --------------------------------------------------


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path, capsys, monkeypatch):
    a_file = tmp_path / "taken"
    a_file.write_text("not a folder")
    cases = [(a_file, f"error: --output_dir {a_file} is a file, not a folder: choose a folder (or move the file "
                      "away)"),
             (a_file / "out", f"error: --output_dir {a_file / 'out'}: {a_file} is a file, so no folder can be made "
                              "under it: choose another --output_dir")]
    for out, line in cases:
        assert grpo_train.main(cli(out)) == 1
        assert [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")] == [line]

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(grpo_train.os, "makedirs", read_only)
    out = tmp_path / "new"
    assert grpo_train.main(cli(out)) == 1
    assert [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")] == [
        f"error: --output_dir {out}: cannot create it (the file system is read-only ({tmp_path})); choose a folder "
        "this run can write in"]


@pytest.mark.parametrize("uri, words", [
    ("s3://bucket/run ", "contains whitespace; write it as s3://BUCKET/PREFIX with no spaces"),
    ("s3://bad!bucket/run", "'bad!bucket' is not a valid bucket name"),
])
def test_a_malformed_s3_save_path_is_one_line_before_anything_loads(tmp_path, capsys, uri, words):
    assert grpo_train.main(cli(tmp_path / "out", "--s3_save_path", uri)) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: --s3_save_path: S3 URI") and words in lines[0], err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_requeued_finished_run_does_not_upload_into_a_prefix_another_live_run_holds(moto_s3, tmp_path, capsys,
                                                                                     monkeypatch):
    monkeypatch.setenv("OLMOCR_RL_JOB_ID", "this-job")  # whatever scheduler runs the suite
    uri = f"s3://{moto_s3.bucket}/runs/r1"
    out = tmp_path / "out"
    finished_run(out)
    holder = start_holder(uri, moto_s3.env)
    try:
        assert grpo_train.main(cli(out, "--s3_save_path", uri, "--resume_from_checkpoint")) == 1
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(err) == 1 and err[0].startswith(f"error: --s3_save_path {uri}/ is in use by another run (run ")
        assert keys(moto_s3, "runs/r1/") == {LEASE_NAME}  # nothing uploaded
    finally:
        holder.kill()
        holder.wait()


def test_a_requeued_jobs_own_earlier_lease_is_taken_over_and_another_jobs_is_not(moto_s3, monkeypatch):
    """A job killed hard on another machine left its lease: the scheduler's next attempt of that job (same job id, a
    higher SLURM_RESTART_COUNT: Slurm starts it once the earlier one ended) takes it over at once; a duplicated
    submission (another job id), or a start of the same attempt (the earlier one may be alive), is refused."""
    uri = f"s3://{moto_s3.bucket}/runs/r"
    earlier = {"run": "killed", "job": "SLURM_JOB_ID=4242", "attempt": 0, "host": "node7", "pid": 99,
               "started": "then", "command": "x"}
    moto_s3.client().put_object(Bucket=moto_s3.bucket, Key="runs/r/" + LEASE_NAME, Body=json.dumps(earlier).encode())
    monkeypatch.delenv("OLMOCR_RL_JOB_ID", raising=False)  # the scheduler's own id decides
    monkeypatch.delenv("OLMOCR_RL_JOB_ATTEMPT", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4243")
    with pytest.raises(LeaseHeldError, match="run killed: pid 99 on node7"):
        acquire_lease(uri, keep_alive=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    with pytest.raises(LeaseHeldError, match="an earlier start of this job .SLURM_JOB_ID=4242. that may still be "):
        acquire_lease(uri, keep_alive=False)  # attempt 0 again: no proof that the holder is dead
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    lease = acquire_lease(uri, keep_alive=False)
    assert lease.body["job"] == "SLURM_JOB_ID=4242" and lease.body["attempt"] == 1
    lease.release()
    release_held()
