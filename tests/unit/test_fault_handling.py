"""Faults without training (fast): checkpoint verification and the choice of checkpoint, a finished run, disk
errors in words, the run lock, stop signals, uploads bounded by a deadline. Signals to processes that take
seconds (reward workers that die with the trainer, the launchers passing stop signals on, a late second SIGTERM):
tests/integration/test_signal_processes.py; the same faults in real training runs:
tests/integration/test_fault_runs.py."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_helpers import real_checkpoint, run_python, survivors
from s3_server import moto_s3  # noqa: F401  (pytest fixture)

from olmocr_rl import storage
from olmocr_rl.storage import Topology, choose_checkpoint, finished_at, missing_training_state, sync_dir_to_s3
from olmocr_rl.storage import verify

REPO = Path(__file__).resolve().parents[2]
SINGLE = Topology()


# ---- verification --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage, reason", [
    (lambda f: os.truncate(f / "model.safetensors", 40), "model.safetensors has 40 bytes, its manifest says"),
    (lambda f: (f / "optimizer.pt").unlink(), "optimizer.pt is missing (its manifest lists it)"),
    (lambda f: (f / "rng_state.pth").write_bytes(b"x" * (f / "rng_state.pth").stat().st_size),
     "rng_state.pth does not match its manifest's checksum"),
    (lambda f: (f / "olmocr_rl_manifest" / "node-0.json").write_text("{\"files\": "),
     "its manifest olmocr_rl_manifest/node-0.json is unreadable"),
])
def test_a_checkpoint_whose_files_disagree_with_its_manifest_does_not_verify(tmp_path, damage, reason):
    folder = real_checkpoint(tmp_path, 4)
    assert storage.local_checkpoint_problem(folder) is None
    damage(folder)
    assert reason in storage.local_checkpoint_problem(folder)


def test_stray_files_in_a_checkpoint_with_a_manifest_do_not_count(tmp_path):
    """A file dropped into a good checkpoint after its save (an editor's swap, a half-copied extra): only the files
    its manifest lists say whether it is whole; a listed file cut short still fails."""
    folder = real_checkpoint(tmp_path, 4)
    (folder / "notes.json").write_text("{\"half\": ")
    (folder / "probe.safetensors").write_bytes(b"\x10\x00")
    assert storage.local_checkpoint_problem(folder) is None
    assert choose_checkpoint(tmp_path).folder == folder
    os.truncate(folder / "trainer_state.json", 30)
    assert "trainer_state.json" in storage.local_checkpoint_problem(folder)
    unlisted = real_checkpoint(tmp_path / "old", 4, manifest=False)  # no manifest: every file is checked
    (unlisted / "notes.json").write_text("{\"half\": ")
    assert "notes.json is not valid JSON" in storage.local_checkpoint_problem(unlisted)


@pytest.mark.parametrize("damage, reason", [
    (lambda f: os.truncate(f / "model.safetensors", 300), "has 300 bytes, its safetensors header says"),
    (lambda f: os.truncate(f / "model.safetensors", 5), "too few for a safetensors header"),
    (lambda f: os.truncate(f / "trainer_state.json", 30), "trainer_state.json is not valid JSON"),
    (lambda f: os.truncate(f / "optimizer.pt", 30), "optimizer.pt is not a whole torch archive"),
    (lambda f: (f / "trainer_state.json").write_text("{\"epoch\": 1}"), "trainer_state.json has no global_step"),
    (lambda f: (f / "model.safetensors").unlink(), "needs trainer_state.json and model weights"),
])
def test_without_a_manifest_each_files_own_format_is_checked(tmp_path, damage, reason):
    """A checkpoint from before manifests (or cut off before its manifest): a file cut short is still caught."""
    folder = real_checkpoint(tmp_path, 4, manifest=False)
    assert storage.local_checkpoint_problem(folder) is None
    damage(folder)
    assert reason in storage.local_checkpoint_problem(folder)


def test_big_files_are_checksummed_by_their_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(verify, "FULL_CHECKSUM_BYTES", 1000)
    monkeypatch.setattr(verify, "EDGE_BYTES", 100)
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(range(256)) * 10)
    first = verify.checksum(path)
    assert first.startswith("crc32-ends:")
    data = bytearray(path.read_bytes())
    data[1000] ^= 1  # the middle: not read
    path.write_bytes(bytes(data))
    assert verify.checksum(path) == first
    data[-1] ^= 1  # the end: read
    path.write_bytes(bytes(data))
    assert verify.checksum(path) != first


def test_the_newest_checkpoint_that_verifies_is_chosen_and_each_skip_says_why(tmp_path, caplog):
    for step in (2, 4, 6):
        real_checkpoint(tmp_path, step)
    os.truncate(tmp_path / "checkpoint-6" / "model.safetensors", 100)
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text("{\"global_step\": 4, ")  # half-written
    with caplog.at_level(logging.WARNING, logger="olmocr_rl.storage"):
        choice = choose_checkpoint(tmp_path, topology=SINGLE)
    assert choice.folder == tmp_path / "checkpoint-2" and choice.step == 2 and choice.remote is None
    skipped = [r.getMessage() for r in caplog.records]
    assert any("checkpoint-6: model.safetensors has 100 bytes, its manifest says" in m for m in skipped), skipped
    assert any("checkpoint-4: trainer_state.json has" in m for m in skipped), skipped  # size differs from manifest


def test_only_damaged_checkpoints_is_an_error_not_a_fresh_start(tmp_path):
    real_checkpoint(tmp_path, 2)
    os.truncate(tmp_path / "checkpoint-2" / "model.safetensors", 10)
    with pytest.raises(storage.StorageError, match=r"no checkpoint in .* can be resumed from \(checkpoint-2: model"):
        choose_checkpoint(tmp_path, topology=SINGLE)
    assert choose_checkpoint(tmp_path / "empty", topology=SINGLE) is None  # nothing at all: start fresh
    cut = real_checkpoint(tmp_path / "first-save-killed", 2, manifest=False)
    (cut / "trainer_state.json").unlink()  # killed during the very first save: nothing was lost, start fresh
    assert choose_checkpoint(cut.parent, topology=SINGLE) is None


def test_s3_wins_when_newer_the_local_copy_when_as_new_and_a_damaged_local_copy_is_repaired(moto_s3, tmp_path,
                                                                                         caplog):
    uri = f"s3://{moto_s3.bucket}/run"
    remote = tmp_path / "remote"
    for step in (4, 6):
        real_checkpoint(remote, step)
    sync_dir_to_s3(remote, uri)
    out = tmp_path / "out"
    real_checkpoint(out, 4)
    choice = choose_checkpoint(out, uri, SINGLE)
    assert choice.step == 6 and choice.remote is not None and not (out / "checkpoint-6").exists()  # read only
    real_checkpoint(out, 6)
    assert choose_checkpoint(out, uri, SINGLE).remote is None  # the same step here: nothing to download

    # The local checkpoint-6 is damaged (its own manifest gives the right sizes): S3's good copy is pulled.
    os.truncate(out / "checkpoint-6" / "model.safetensors", 100)
    choice = choose_checkpoint(out, uri, SINGLE)
    assert choice.step == 6 and choice.remote is not None
    assert storage.resume.fetch(choice) == out / "checkpoint-6"
    assert storage.local_checkpoint_problem(out / "checkpoint-6") is None

    moto_s3.stop()  # S3 gone: the local checkpoint, with a warning; none here: an error
    with caplog.at_level(logging.WARNING, logger="olmocr_rl.storage"):
        assert choose_checkpoint(out, uri, SINGLE).folder == out / "checkpoint-6"
    assert "S3 may hold a newer checkpoint" in caplog.text
    with pytest.raises(storage.StorageError, match="cannot reach the S3 endpoint"):
        choose_checkpoint(tmp_path / "fresh", uri, SINGLE)


def test_a_half_written_trainer_state_on_s3_is_skipped(moto_s3, tmp_path, caplog):
    uri = f"s3://{moto_s3.bucket}/run"
    remote = tmp_path / "remote"
    real_checkpoint(remote, 2, manifest=False)
    real_checkpoint(remote, 4, manifest=False)
    os.truncate(remote / "checkpoint-4" / "trainer_state.json", 20)
    sync_dir_to_s3(remote, uri)
    with caplog.at_level(logging.WARNING, logger="olmocr_rl.storage"):
        choice = choose_checkpoint(tmp_path / "out", uri, SINGLE)
    assert choice.step == 2
    assert f"skipping checkpoint {uri}/checkpoint-4 on S3: trainer_state.json is not valid JSON" in caplog.text


def test_an_explicit_damaged_checkpoint_is_refused_with_the_reason(tmp_path):
    folder = real_checkpoint(tmp_path, 4)
    os.truncate(folder / "model.safetensors", 50)
    with pytest.raises(storage.StorageError, match=rf"{folder} cannot be resumed from: model.safetensors has 50 bytes"):
        storage.plan_resume(str(folder), tmp_path)


@pytest.mark.parametrize("files, missing", [
    ({"optimizer.pt", "scheduler.pt", "model.safetensors"}, []),
    ({"scheduler.pt", "model.safetensors"}, ["optimizer.pt"]),
    ({"model.safetensors"}, ["optimizer.pt", "scheduler.pt"]),
    ({"latest", "global_step8/mp_rank_00_model_states.pt"}, []),  # DeepSpeed keeps them in its own folder
    ({"pytorch_model_fsdp_0/x", "optimizer_0/y", "scheduler.pt"}, []),  # FSDP
])
def test_missing_training_state(files, missing):
    assert missing_training_state(files) == missing


def test_a_checkpoint_at_the_runs_end_is_finished_and_one_before_it_is_not():
    assert finished_at({"global_step": 8, "max_steps": 8, "epoch": 0.8}, max_steps=8, num_train_epochs=1)
    assert not finished_at({"global_step": 8, "max_steps": 8}, max_steps=10, num_train_epochs=1)  # raised: go on
    # Epochs: the checkpoint's own step count reached and the last epoch done.
    assert finished_at({"global_step": 10, "max_steps": 10, "epoch": 1.0}, max_steps=-1, num_train_epochs=1)
    assert not finished_at({"global_step": 10, "max_steps": 10, "epoch": 1.0}, max_steps=-1, num_train_epochs=2)
    assert not finished_at({"global_step": 7, "max_steps": 10, "epoch": 0.7}, max_steps=-1, num_train_epochs=1)


# ---- disk errors, the folder -------------------------------------------------------------------------------


@pytest.mark.parametrize("exc, words", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on device: it needs about 1.0 GB, "),
    (OSError(errno.EROFS, "Read-only file system"), "the file system is read-only"),
    (PermissionError(errno.EACCES, "Permission denied"), "permission denied: user id"),
    (RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on "
                  "device\" })"), "no space left on device"),
])
def test_disk_errors_are_said_in_words(tmp_path, exc, words):
    line = storage.describe_write_failure(exc, tmp_path / "checkpoint-4", 1 << 30)
    assert line is not None and line.startswith(words), line


def test_torchs_bare_runtime_error_is_a_full_disk_only_when_the_disk_is_full(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    error = RuntimeError("basic_ios::clear: iostream error")
    assert storage.describe_write_failure(error, tmp_path / "checkpoint-4", 1 << 20) is None  # room to spare
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(12 << 20, 12 << 20, 4096))
    line = storage.describe_write_failure(error, tmp_path / "checkpoint-4", 9 << 20)
    assert line == f"no space left on device: it needs about 9.0 MB, 4.0 KB free on the file system of {tmp_path}"
    assert storage.describe_write_failure(KeyError("x"), tmp_path, 9 << 20) is None  # not the disk's doing


def test_the_run_lock_names_its_holder_and_dies_with_it(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from olmocr_rl.storage import hold_run_lock; "
         f"hold_run_lock({str(tmp_path)!r}); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(storage.FolderInUseError, match=rf"is in use by another run \(pid {holder.pid} on "):
            storage.hold_run_lock(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert storage.hold_run_lock(tmp_path) == tmp_path / ".olmocr_rl-run.lock"  # the kernel dropped a killed holder's


def test_an_earlier_runs_files_are_found_and_cleared(tmp_path):
    assert storage.previous_run(tmp_path) is None
    real_checkpoint(tmp_path, 2)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    (tmp_path / "notes.txt").write_text("mine")
    assert storage.previous_run(tmp_path) == f"--output_dir {tmp_path} already holds an earlier run's checkpoint-2, " \
                                             "metrics.jsonl"
    assert storage.clear_previous_run(tmp_path) == ["checkpoint-2", "metrics.jsonl"]
    assert storage.previous_run(tmp_path) is None and (tmp_path / "notes.txt").is_file()


def test_an_s3_prefix_with_checkpoints_is_an_earlier_run(moto_s3, tmp_path):
    uri = f"s3://{moto_s3.bucket}/run"
    assert storage.previous_run(tmp_path, uri) is None
    real_checkpoint(tmp_path / "remote", 3)
    sync_dir_to_s3(tmp_path / "remote", uri)
    assert storage.previous_run(tmp_path / "out", uri) == f"--s3_save_path {uri} already holds an earlier run's " \
                                                          "checkpoint-3"


# ---- stop signals ----------------------------------------------------------------------------------------------


def test_stop_signals_before_and_during_training():
    """Before training SIGTERM raises Preempted; during it a repeated SIGTERM counts once (the cluster and the
    launcher both pass it on) and a second, different signal exits at once without a traceback."""
    result = run_python("""
        import os, signal, time
        from olmocr_rl.trainer.stop_signals import Preempted, StopRequest, install_early
        install_early()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Preempted as stop:
            print("before training:", stop, flush=True)
        request = StopRequest()
        request.install()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        print("still here:", request.signal_name, flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        print("not reached")
    """)
    assert result.returncode == 128 + signal.SIGINT, result.stderr
    assert result.stdout.splitlines() == ["before training: SIGTERM", "still here: SIGTERM"]
    assert "SIGTERM received after step 0" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == "second stop signal (SIGINT): exiting at once, without saving"
    assert "Traceback" not in result.stderr


def test_upload_waits_end_at_the_deadline(tmp_path, monkeypatch):
    import threading

    from olmocr_rl.storage import S3SyncCallback, SyncResult
    from olmocr_rl.storage import mirror as storage_mirror

    (tmp_path / "model.safetensors").write_bytes(b"w")
    callback = S3SyncCallback("s3://bucket/run", tmp_path, backoff_s=0.01)
    release = threading.Event()

    def hung_server(self):
        release.wait(30)
        return SyncResult()

    monkeypatch.setattr(storage_mirror.S3Mirror, "sync", hung_server)
    callback.sync(wait=False)
    callback.set_deadline(0.3)
    started = time.monotonic()
    try:
        assert callback.wait() is False
        assert time.monotonic() - started < 5
        assert callback.only_local() == ["model.safetensors"]  # never reached S3
    finally:
        release.set()
        callback._deadline = None
        callback.wait()


def test_the_suites_last_check_finds_an_orphaned_olmocr_rl_process():
    """conftest's session-end check: a process this session started that outlived its parent is found."""
    from conftest import leftover_processes

    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                    "'import time; time.sleep(60)', 'olmocr_rl-orphan'])"], check=True)  # the parent exits at once
    deadline = time.monotonic() + 10
    found = []
    while not found and time.monotonic() < deadline:
        found = [pid for pid, command in leftover_processes() if "olmocr_rl-orphan" in command]
        time.sleep(0.1)
    assert len(found) == 1
    assert survivors(found, timeout=0) == found  # killed here, so the session itself ends clean


def test_the_reaper_kills_at_once_a_process_that_ignores_sigterm(monkeypatch):
    """What ignores SIGTERM (multiprocessing's resource tracker does) is SIGKILLed without waiting out the grace
    period; the others get SIGTERM."""
    import reaper

    name, value = "OLMOCR_RL_REAPER_PROBE", f"{os.getpid()}-{time.time_ns()}"
    ready = "import signal, time; {}; print(flush=True); time.sleep(60)"
    stubborn, plain = (subprocess.Popen([sys.executable, "-c", ready.format(setup)], stdout=subprocess.PIPE,
                                        env={**os.environ, name: value})
                       for setup in ("signal.signal(signal.SIGTERM, signal.SIG_IGN)", "pass"))
    try:
        for process in (stubborn, plain):
            process.stdout.readline()  # its handlers are in place
        assert reaper.ignores(stubborn.pid, signal.SIGTERM) and not reaper.ignores(plain.pid, signal.SIGTERM)
        monkeypatch.setattr(reaper, "GRACE_S", 60.0)
        started = time.monotonic()
        assert sorted(reaper.reap(f"{name}={value}".encode())) == sorted([stubborn.pid, plain.pid])
        assert time.monotonic() - started < 30  # not the grace period
        assert (stubborn.wait(10), plain.wait(10)) == (-signal.SIGKILL, -signal.SIGTERM)
    finally:
        for process in (stubborn, plain):
            process.kill()
            process.wait()


def test_trainer_state_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A write cut off half-way (a full disk) leaves the previous trainer_state.json as it was, and no partial."""
    import transformers.trainer_callback as trainer_callback
    from transformers import TrainerState

    from olmocr_rl.trainer.checkpoint_save import atomic_state_json

    path = tmp_path / "trainer_state.json"
    state = TrainerState(global_step=4)
    with atomic_state_json(state):
        state.save_to_json(str(path))
    before = path.read_text()
    assert json.loads(before)["global_step"] == 4 and "save_to_json" not in vars(state)

    def full_disk_open(file, mode="r", **kwargs):
        handle = open(file, mode, **kwargs)
        if "w" in mode:
            real_write = handle.write

            def write(text):
                real_write(text[: len(text) // 2])
                raise OSError(errno.ENOSPC, "No space left on device")

            handle.write = write
        return handle

    monkeypatch.setattr(trainer_callback, "open", full_disk_open, raising=False)
    state.global_step = 6
    with atomic_state_json(state), pytest.raises(OSError):
        state.save_to_json(str(path))
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["trainer_state.json"]
    with pytest.raises(OSError):
        state.save_to_json(str(path))  # transformers' own write, in place: what happened before
    assert path.read_text() != before


def test_an_output_folder_this_run_cannot_write_in_is_one_line(tmp_path, monkeypatch):
    from olmocr_rl.storage import files as storage_files
    from olmocr_rl.storage.resume import StartError, prepare_start

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(storage_files, "open", read_only, raising=False)
    with pytest.raises(StartError) as error:
        prepare_start(None, tmp_path / "out")
    assert str(error.value) == (f"--output_dir {tmp_path / 'out'}: cannot write there (the file system is read-only "
                                f"({tmp_path / 'out'})); choose a folder this run can write in")


def test_a_full_disk_at_the_history_append_is_the_one_line_of_a_full_disk_at_a_save(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from olmocr_rl import grpo_train
    from olmocr_rl.telemetry.history import MetricsFileCallback

    class FullDisk(type(tmp_path)):
        """metrics.jsonl on a disk that fills up halfway through the next record."""

        def open(self, mode="r", *args, **kwargs):
            handle = super().open(mode, *args, **kwargs)
            if mode != "a":
                return handle
            write = handle.write

            def half_then_full(text):
                write(text[: len(text) // 2])
                handle.flush()
                raise OSError(errno.ENOSPC, "No space left on device")

            handle.write = half_then_full
            return handle

    out = tmp_path / "out"
    real_checkpoint(out, 4)
    history = out / "metrics.jsonl"
    history.write_text('{"step": 1}\n{"step": 2}\n')
    before = history.read_text()
    callback = MetricsFileCallback(history)
    callback.path = FullDisk(history)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(12 << 20, 12 << 20, 0))
    state = type("State", (), {"is_world_process_zero": True, "global_step": 5, "epoch": 0.6})()

    class Trainer:  # a run whose step 5 logs
        def train(self, resume_from_checkpoint=None):
            callback.on_log(None, state, None, logs={"loss": 0.5, "reward": 0.25})

    with pytest.raises(grpo_train._Stop) as stop:
        grpo_train._train_and_save(None, Trainer(), None, None)
    assert stop.value.message.startswith(
        f"appending to {history} failed: no space left on device: it needs about ")
    assert stop.value.message.endswith(f", 0 B free on the file system of {out}; checkpoint-4 is intact: make room (or "
                                       "point --output_dir at a disk with room) and resume with --resume_from_checkpoint")
    assert history.read_text() == before  # the half record was cut off


def test_a_signal_after_the_last_step_names_no_step_beyond_it(caplog):
    """SIGTERM during the final save and upload of an 8-step run: the line names step 8 of 8, not a step 9."""
    from olmocr_rl.trainer.stop_signals import StopRequest

    said = []
    for step, in_step in ((8, False), (5, False), (5, True)):
        request = StopRequest()
        request.state = type("State", (), {"global_step": step, "max_steps": 8})()
        request.in_step = in_step
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="olmocr_rl.trainer.stop_signals"):
            request._handle(signal.SIGTERM, None)
        said.append(caplog.records[-1].getMessage())
    assert said == [
        "SIGTERM received after the last step (8 of 8): finishing the final save and its upload (bounded by "
        "--preempt_upload_timeout), then stopping (a second signal exits at once, without saving)",
        "SIGTERM received after step 5: saving checkpoint-5 if that save is under way, else finishing step 6 and "
        "saving it, then stopping (a second signal exits at once, without saving)",
        "SIGTERM received during step 6: finishing it, then saving checkpoint-6, then stopping (a second signal "
        "exits at once, without saving)"]
