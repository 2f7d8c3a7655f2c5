"""The failures left once S3 became the truth, in-process against the real S3 server on loopback (moto): a run that
loses its lease stops writing to the prefix; a same-job start does not take a live lease; lease objects and the
lease setting are validated; a final save the disk refuses is one line, and a requeue writes a missing final model
from the last checkpoint and mirrors it; server mode without a server is one line (a late second SIGTERM during the interpreter's
teardown: tests/integration/test_signal_processes.py). The same through the real CLI: tests/integration/test_lease_loss_cli.py."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pytest
from fault_helpers import safetensors_bytes
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from fault_helpers import real_checkpoint
from test_s3_only_copy import cli, keys

from olmocr_rl import grpo_train
from olmocr_rl.storage import sync_dir_to_s3
from olmocr_rl.storage.lease import (
    LEASE_NAME,
    LeaseHeldError,
    LeaseUnreadableError,
    acquire_lease,
    lost_lease,
    release_held,
)

REPO = Path(__file__).resolve().parents[2]
OTHER = {"run": "other", "job": None, "attempt": None, "host": "node7", "pid": 4242, "started": "2026-01-02 10:00:00",
         "command": "python -m olmocr_rl.grpo_train ..."}


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


@pytest.fixture
def clean_lease():
    """No lease of this process outlives the test (a lost one is forgotten too); the stop-signal handlers a
    PreemptionCallback installs are put back."""
    from olmocr_rl.storage import lease

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    yield
    release_held()
    lease._LOST.clear()
    lease.ON_LOST.clear()
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


# ---- lease objects and the lease setting ---------------------------------------------------------------------


@pytest.mark.parametrize("body, detail", [
    (b"[1, 2, 3]", "JSON list, not an object"), (b"\x8f\x02random bytes\xff", "not JSON"),
    (b"{}", "a JSON object naming no run"), (b"", "empty"),
])
def test_a_lease_object_that_is_no_lease_is_one_line_naming_it(moto_s3, clean_lease, body, detail):
    uri = f"s3://{moto_s3.bucket}/runs/odd"
    key = "runs/odd/" + LEASE_NAME
    moto_s3.client().put_object(Bucket=moto_s3.bucket, Key=key, Body=body)
    with pytest.raises(LeaseUnreadableError) as caught:
        acquire_lease(uri, keep_alive=False)
    assert str(caught.value) == (
        f"s3://{moto_s3.bucket}/{key} is not an olmocr_rl lease ({detail}, {len(body)} bytes): if no run writes to "
        f"this prefix, delete it (`aws s3 rm s3://{moto_s3.bucket}/{key}`) and start again")
    assert moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=key)["Body"].read() == body  # left as it was


def test_the_cli_says_a_bad_lease_object_in_one_line(moto_s3, tmp_path, capsys, clean_lease):
    uri = f"s3://{moto_s3.bucket}/runs/odd"
    moto_s3.client().put_object(Bucket=moto_s3.bucket, Key="runs/odd/" + LEASE_NAME, Body=b"[1, 2, 3]")
    assert grpo_train.main(cli(tmp_path / "out", "--s3_save_path", uri)) == 1
    err = capsys.readouterr().err
    assert errors(err) == [f"error: --s3_save_path: s3://{moto_s3.bucket}/runs/odd/{LEASE_NAME} is not an olmocr_rl "
                           f"lease (JSON list, not an object, 9 bytes): if no run writes to this prefix, delete it "
                           f"(`aws s3 rm s3://{moto_s3.bucket}/runs/odd/{LEASE_NAME}`) and start again"]
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["abc", "-5", "0", "nan", "inf"])
def test_a_bad_lease_seconds_setting_is_one_line_before_anything_loads(moto_s3, tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv("OLMOCR_RL_S3_LEASE_SECONDS", value)
    assert grpo_train.main(cli(tmp_path / "out", "--s3_save_path", f"s3://{moto_s3.bucket}/runs/x")) == 2
    err = capsys.readouterr().err
    assert errors(err) == [f"error: OLMOCR_RL_S3_LEASE_SECONDS={value!r} is not a positive number of seconds: set it "
                           "to how long an S3 lease lives without renewal (default 900), or unset it"]
    assert "Traceback" not in err and keys(moto_s3, "runs/x/") == set()


# ---- a second start of the same job ----------------------------------------------------------------------------

HOLDER = """
import sys, time
from olmocr_rl.storage.lease import acquire_lease
acquire_lease(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_start_of_the_same_job_does_not_take_a_live_lease(moto_s3, tmp_path, capsys, monkeypatch,
                                                                   clean_lease):
    """A scheduler starts a requeued task while the old one is still alive (same OLMOCR_RL_JOB_ID): the lease it
    renewed just now wins; a later attempt number is the scheduler's proof that the old one ended."""
    uri = f"s3://{moto_s3.bucket}/runs/job"
    key = "runs/job/" + LEASE_NAME
    env = {**os.environ, **moto_s3.env, "OLMOCR_RL_JOB_ID": "job-7", "OLMOCR_RL_JOB_ATTEMPT": "0"}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, uri], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        held = json.loads(moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=key)["Body"].read())
        monkeypatch.setenv("OLMOCR_RL_JOB_ID", "job-7")
        monkeypatch.setenv("OLMOCR_RL_JOB_ATTEMPT", "0")
        assert grpo_train.main(cli(tmp_path / "out", "--s3_save_path", uri, "--resume_from_checkpoint")) == 1
        (line,) = errors(capsys.readouterr().err)
        assert line.startswith(f"error: --s3_save_path {uri}/ is in use by another run (run {held['run']}: pid "
                               f"{holder.pid} on {socket.gethostname()}, ")
        assert line.endswith(f", an earlier start of this job (OLMOCR_RL_JOB_ID=job-7) that may still be running: wait "
                             "until it has ended (a lease not renewed for 900 s is stale and taken over); if it is "
                             f"dead, delete its lease (`aws s3 rm {uri}/{LEASE_NAME}`) or start this one with a "
                             "higher OLMOCR_RL_JOB_ATTEMPT, then start again")
        assert json.loads(moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=key)["Body"].read()) == held
        assert not (tmp_path / "out" / "checkpoint-2").exists()
        monkeypatch.setenv("OLMOCR_RL_JOB_ATTEMPT", "1")  # the scheduler's next attempt: the earlier one ended
        lease = acquire_lease(uri, keep_alive=False)
        assert lease.body["attempt"] == 1
    finally:
        holder.kill()
        holder.wait()


# ---- losing the lease while training ----------------------------------------------------------------------------


def test_a_run_that_loses_its_lease_uploads_nothing_more_and_stops_at_the_next_step(moto_s3, tmp_path, clean_lease):
    """Another run takes the lease over after checkpoint-2 went up: the pass of checkpoint-3 renews first, finds it
    lost and uploads nothing; every rank agrees at the next step's end, saves it locally and stops."""
    from test_storage import tiny_trainer
    from transformers import TrainerCallback

    from olmocr_rl.storage import S3SyncCallback
    from olmocr_rl.trainer.preemption import PreemptionCallback, finish_lease_lost, lease_lost_everywhere

    uri = f"s3://{moto_s3.bucket}/runs/lost"
    key = "runs/lost/" + LEASE_NAME
    out = tmp_path / "out"
    acquire_lease(uri, keep_alive=False)

    class TakenOverAfter2(TrainerCallback):  # after checkpoint-2's pass (sync runs inline: background=False)
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 2:
                moto_s3.client().put_object(Bucket=moto_s3.bucket, Key=key, Body=json.dumps(OTHER).encode())

    sync = S3SyncCallback(uri, out, background=False, backoff_s=0.01)
    preemption = PreemptionCallback(uploads=[sync])
    trainer = tiny_trainer(out, 6, [preemption, sync, TakenOverAfter2()])
    trainer.train()
    assert trainer.state.global_step == 4  # checkpoint-3's pass found it lost; step 4 ended the run
    assert (out / "checkpoint-4" / "trainer_state.json").is_file()  # saved locally
    remote = {k.split("/")[0] for k in keys(moto_s3, "runs/lost/")}
    assert remote == {"checkpoint-1", "checkpoint-2", LEASE_NAME}  # nothing after the loss, nothing deleted
    assert json.loads(moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=key)["Body"].read()) == OTHER
    lost = lease_lost_everywhere(trainer, preemption.request)
    assert lost.startswith(f"the S3 lease on {uri}/ is no longer this run's: it is held by run other: pid 4242 on "
                           "node7, started 2026-01-02 10:00:00: python -m olmocr_rl.grpo_train ... (renewed ")
    code, line = finish_lease_lost(trainer, lost, uri, 77)
    assert code == 77 and line.startswith(f"{lost}: this run stopped after step 4 and wrote nothing more to {uri}; "
                                          f"checkpoint-4 is saved in {out} (checkpoint-3, checkpoint-4 only there), "
                                          "no final model was written. If that run is live, leave the prefix to it")
    assert lost_lease() is not None and remote == {k.split("/")[0] for k in keys(moto_s3, "runs/lost/")}


def test_an_upload_cut_at_the_stop_deadline_releases_the_lease(moto_s3, tmp_path, monkeypatch, caplog, clean_lease):
    """A run whose upload outlived --preempt_upload_timeout ends with os._exit (the upload thread would hold it):
    the lease is released first, so the requeued start neither waits for it nor takes it over as stale."""
    import threading

    from olmocr_rl.storage import S3SyncCallback, SyncResult, mirror
    from olmocr_rl.trainer import preemption
    from olmocr_rl.trainer.stop_signals import StopRequest

    uri = f"s3://{moto_s3.bucket}/runs/cut"
    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    acquire_lease(uri, keep_alive=False)
    hung = threading.Event()
    monkeypatch.setattr(mirror.S3Mirror, "sync", lambda self: (hung.wait(60), SyncResult())[1])  # outlives the deadline

    class Exited(BaseException):
        pass

    def exit_now(code):
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", exit_now)
    monkeypatch.setattr(logging, "shutdown", lambda: None)
    callback = S3SyncCallback(uri, out)
    state = SimpleNamespace(is_local_process_zero=True, is_world_process_zero=True, global_step=3, max_steps=8)
    trainer = SimpleNamespace(state=state, args=SimpleNamespace(output_dir=str(out)),
                              callback_handler=SimpleNamespace(callbacks=[callback]))
    request = StopRequest()
    request.agreed_step, request.signal_name = 3, "SIGTERM"
    callback.set_deadline(0.3)
    try:
        with caplog.at_level(logging.WARNING, logger="olmocr_rl.trainer.preemption"), pytest.raises(Exited) as exited:
            preemption.finish_preempted(trainer, request, uri, 0.3, 75)
        assert exited.value.args == (75,)
        assert LEASE_NAME not in keys(moto_s3, "runs/cut/")  # released before the exit
        assert "did not finish within --preempt_upload_timeout 0.3 s, so it is only on local disk; exiting with " \
               "status 75" in caplog.text
    finally:
        hung.set()
        callback._deadline = None
        callback.wait()


# ---- the final model -------------------------------------------------------------------------------------------


def trained_to_the_end(out: Path) -> Path:
    """A run killed between its last checkpoint (8, the last step) and the final save: no final model."""
    real_checkpoint(out, 6)
    last = real_checkpoint(out, 8)
    for name, text in (("tokenizer.json", '{"model": {}}'), ("chat_template.jinja", "{{ messages }}")):
        (last / name).write_text(text)
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.5}) + "\n" for s in range(1, 9)))
    return last


MODEL_FILES = {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"}


def test_a_final_save_the_disk_refuses_is_one_line_with_sizes_and_the_half_file_goes(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    from olmocr_rl.trainer import final_model

    out = tmp_path / "out"
    last = trained_to_the_end(out)

    class Trainer:
        state = SimpleNamespace(global_step=8, is_world_process_zero=True)

        def save_model(self, output_dir):  # safetensors' writer, cut short by a full disk
            (Path(output_dir) / "model.safetensors").write_bytes(safetensors_bytes(b"x" * 999)[:300])
            raise SafetensorError('Error while serializing: I/O error: No space left on device (os error 28)')

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(12 << 20, (12 << 20) - 1234, 1234))
    cfg = SimpleNamespace(output_dir=str(out), use_peft=False)
    with pytest.raises(final_model.FinalSaveError) as caught:
        final_model.save_final(cfg, Trainer(), None)
    needed = sum((last / n).stat().st_size for n in ("model.safetensors", "config.json", "tokenizer.json",
                                                     "chat_template.jinja"))
    from olmocr_rl.storage.s3 import human_bytes

    assert str(caught.value) == (
        f"saving the final model in {out} failed: no space left on device: it needs about {human_bytes(needed)}, "
        f"{human_bytes(1234)} free on the file system of {out}; checkpoint-8 is whole: make room (or point "
        "--output_dir at a disk with room) and rerun with --resume_from_checkpoint, which writes the final model "
        "from it")
    assert not (out / "model.safetensors").exists()  # the half-written weights are gone


def test_a_requeue_writes_the_missing_final_model_from_the_last_checkpoint_and_mirrors_it(
        moto_s3, tmp_path, capsys, clean_lease):
    uri = f"s3://{moto_s3.bucket}/runs/final"
    out = tmp_path / "out"
    last = trained_to_the_end(out)
    (out / "model.safetensors").write_bytes(safetensors_bytes(b"cut" * 300)[:200])  # a final save cut short
    sync_dir_to_s3(out, uri)  # the mirror of the run so far (no final model, nothing whole of it)
    assert grpo_train.main(cli(out, "--s3_save_path", uri, "--resume_from_checkpoint")) == 0
    log = capsys.readouterr().err
    assert not errors(log) and "Traceback" not in log
    assert (f"trained to its last step 8 ({out / 'checkpoint-8'}), but its final model in {out} is incomplete "
            f"(model.safetensors") in log
    assert (f"trained to its last step 8 ({out / 'checkpoint-8'}): its final model was missing, written from "
            f"{out / 'checkpoint-8'} (5 files); mirrored to {uri}: uploaded ") in log
    for name in MODEL_FILES:
        assert (out / name).read_bytes() == (last / name).read_bytes(), name
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 8
    assert MODEL_FILES | {"run_summary.json"} <= keys(moto_s3, "runs/final/")
    assert grpo_train.main(cli(out, "--s3_save_path", uri, "--resume_from_checkpoint")) == 0  # requeued again
    assert "already finished at step 8" in capsys.readouterr().err

    fresh = tmp_path / "fresh-machine"  # S3 holds a whole final model: nothing is pulled, nothing written
    assert grpo_train.main(cli(fresh, "--s3_save_path", uri, "--resume_from_checkpoint")) == 0
    assert "already finished at step 8" in capsys.readouterr().err
    assert not (fresh / "model.safetensors").exists()


def test_a_fresh_machine_writes_the_final_model_s3_lacks_from_the_pulled_checkpoint(moto_s3, tmp_path, capsys,
                                                                                   clean_lease):
    uri = f"s3://{moto_s3.bucket}/runs/gone"
    lost_disk = tmp_path / "lost-disk"
    last = trained_to_the_end(lost_disk)
    sync_dir_to_s3(lost_disk, uri)  # the machine went away before its final save
    fresh = tmp_path / "fresh"
    assert grpo_train.main(cli(fresh, "--s3_save_path", uri, "--resume_from_checkpoint")) == 0
    assert not errors(capsys.readouterr().err)
    assert (fresh / "model.safetensors").read_bytes() == (last / "model.safetensors").read_bytes()
    assert MODEL_FILES | {"run_summary.json"} <= keys(moto_s3, "runs/gone/")


def test_without_s3_a_requeue_writes_the_final_model_and_a_whole_one_is_left_alone(tmp_path, capsys):
    out = tmp_path / "out"
    trained_to_the_end(out)
    assert grpo_train.main(cli(out, "--resume_from_checkpoint")) == 0
    assert (out / "run_summary.json").is_file() and "its final model was missing" in capsys.readouterr().err
    before = {p: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()}
    assert grpo_train.main(cli(out, "--resume_from_checkpoint")) == 0
    assert "already finished at step 8" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()} == before


def test_a_full_disk_during_an_s3_pull_is_one_line_with_sizes_and_advice(moto_s3, tmp_path, capsys, monkeypatch,
                                                                         clean_lease):
    import errno

    from olmocr_rl.storage import s3
    from olmocr_rl.storage.s3 import human_bytes

    uri = f"s3://{moto_s3.bucket}/runs/pull"
    source = tmp_path / "lost-disk"
    checkpoint = real_checkpoint(source, 6)
    sync_dir_to_s3(source, uri)
    size = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())

    def full_disk(client, bucket, key, destination):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(s3, "download_object", full_disk)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 20, (1 << 20) - 100, 100))
    fresh = tmp_path / "fresh"
    assert grpo_train.main(cli(fresh, "--s3_save_path", uri, "--resume_from_checkpoint")) == 1
    assert errors(capsys.readouterr().err) == [
        f"error: --resume_from_checkpoint: pulling {uri}/checkpoint-6/ into {fresh / 'checkpoint-6'} failed: no "
        f"space left on device: it needs about {human_bytes(size)}, 100 B free on the file system of {fresh}: make "
        "room (or point --output_dir at a disk with room) and rerun; what was pulled is kept and not fetched again"]


# ---- server mode without a server; a late second SIGTERM ---------------------------------------------------------


def test_server_mode_without_a_server_is_one_line_within_seconds():
    from olmocr_rl.config.environment import server_not_listening

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = SimpleNamespace(vllm_server_host="127.0.0.1", vllm_server_port=port, model_name="Qwen/Qwen2.5-VL-7B-Instruct")
    started = time.monotonic()
    with pytest.raises(grpo_train._Stop) as stop:
        grpo_train._check_server(cfg)
    assert time.monotonic() - started < 5
    assert stop.value.message.startswith(
        f"--vllm_server_host/--vllm_server_port: no vLLM server at http://127.0.0.1:{port} (connection refused: "
        f"nothing listens on that port): start it first (`trl vllm-serve --model Qwen/Qwen2.5-VL-7B-Instruct --host "
        f"127.0.0.1 --port {port}")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert server_not_listening("127.0.0.1", server.getsockname()[1]) is None
