"""S3 storage against a real S3 server on loopback (moto's standalone server, see s3_server.py)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest
from fault_helpers import safetensors_bytes
from s3_server import moto_s3  # noqa: F401  (pytest fixture)

from olmocr_rl import storage
from olmocr_rl.storage import mirror as storage_mirror
from olmocr_rl.storage import s3 as storage_s3
from olmocr_rl.storage import (
    RemoteObject,
    LocalFile,
    S3Mirror,
    S3SyncCallback,
    StorageError,
    download_s3_prefix,
    find_latest_checkpoint,
    is_complete_checkpoint,
    needs_upload,
    parse_s3_uri,
    pull_latest_checkpoint_from_s3,
    resolve_resume_checkpoint,
    resume_checkpoint,
    sync_dir_to_s3,
)

# ---- helpers ---------------------------------------------------------------------------------------


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def fake_checkpoint(root: Path, step: int, complete: bool = True) -> Path:
    """A checkpoint-<step> folder; incomplete = weights without trainer_state.json (a killed save)."""
    files = {"model.safetensors": safetensors_bytes(f"weights {step}".encode()), "optimizer.pt": b"opt" * step}
    if complete:
        files["trainer_state.json"] = json.dumps({"global_step": step}).encode()
    write_files(root / f"checkpoint-{step}", files)
    return root / f"checkpoint-{step}"


def remote_keys(server, prefix: str = "") -> set[str]:
    client = server.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix)
    return {item["Key"][len(prefix) :] for page in pages for item in page.get("Contents", [])}


def put(server, key: str, body: bytes) -> None:
    server.client().put_object(Bucket=server.bucket, Key=key, Body=body)


class WorldState:
    """The TrainerState fields the callback reads (one machine: its main process is the world's)."""

    def __init__(self, main: bool = True):
        self.is_world_process_zero = self.is_local_process_zero = main
        self.global_step = 0


@pytest.fixture
def s3_calls(monkeypatch):
    """Names of every S3 API call storage makes (GetObject, PutObject, ...), in order."""
    calls: list[str] = []
    real = storage_s3.make_s3_client

    def counting_client():
        client = real()
        # The client is shared between calls: register the counter once per client.
        client.meta.events.register(
            "before-call.s3.*", lambda model, **_: calls.append(model.name), unique_id="test-call-counter"
        )
        return client

    monkeypatch.setattr(storage_s3, "make_s3_client", counting_client)
    return calls


# ---- URIs and checkpoint rules (pure) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket/models/qwen", ("bucket", "models/qwen")),
        ("s3://bucket/run/", ("bucket", "run/")),
        ("s3://my.bucket-1", ("my.bucket-1", "")),
        ("s3://bucket/", ("bucket", "")),
    ],
)
def test_parse_s3_uri_splits_bucket_and_prefix(uri, expected):
    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("bucket/prefix", "expected s3://BUCKET/PREFIX"),
        ("s3:/bucket/prefix", "single slash"),
        ("gs://bucket/prefix", "not an S3 URI"),
        ("s3:///prefix", "has no bucket"),
        ("s3://b/prefix", "not a valid bucket name"),
        ("s3://bucket/pre fix", "whitespace"),
        ("s3://bucket/prefix\n", "whitespace"),
    ],
)
def test_parse_s3_uri_rejects_malformed_uris(uri, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_s3_uri(uri)
    assert repr(uri) in str(info.value)


@pytest.mark.parametrize(
    ("files", "complete"),
    [
        ({"trainer_state.json", "model.safetensors"}, True),
        ({"trainer_state.json", "adapter_model.safetensors"}, True),
        ({"model.safetensors", "optimizer.pt"}, False),  # killed before trainer_state.json
        ({"trainer_state.json", "optimizer.pt"}, False),  # no weights
        (
            {"trainer_state.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors"},
            True,
        ),
        ({"trainer_state.json", "model.safetensors.index.json", "model-00002-of-00002.safetensors"}, False),
        ({"trainer_state.json", "latest", "global_step7/mp_rank_00_model_states.pt"}, True),
    ],
)
def test_is_complete_checkpoint(files, complete):
    assert is_complete_checkpoint(files) is complete


def test_find_latest_checkpoint_orders_by_step_and_skips_incomplete(tmp_path):
    assert find_latest_checkpoint(tmp_path / "missing") is None
    assert find_latest_checkpoint(tmp_path) is None
    fake_checkpoint(tmp_path, 2)
    fake_checkpoint(tmp_path, 10)  # "checkpoint-10" < "checkpoint-2" as strings
    fake_checkpoint(tmp_path, 12, complete=False)
    (tmp_path / "checkpoint-final").mkdir()
    (tmp_path / "checkpoint-99").write_text("a file, not a folder")
    assert find_latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"


def test_needs_upload_compares_size_and_whole_second_mtime():
    remote = RemoteObject(key="k", size=5, etag="e", last_modified=1000.0)
    assert needs_upload(LocalFile(Path("f"), 5, 999.4), None)
    assert not needs_upload(LocalFile(Path("f"), 5, 999.4), remote)
    assert not needs_upload(LocalFile(Path("f"), 5, 1000.7), remote)  # written in the upload's second
    assert needs_upload(LocalFile(Path("f"), 5, 1001.0), remote)  # rewritten later
    assert needs_upload(LocalFile(Path("f"), 6, 10.0), remote)


# ---- model download --------------------------------------------------------------------------------

MODEL_FILES = {
    "config.json": b'{"model_type": "qwen2_5_vl"}',
    "model.safetensors": os.urandom(3000),
    "tokenizer/tokenizer.json": b"{}",
}


def upload_model(server, prefix: str = "models/tiny/") -> str:
    for rel, data in MODEL_FILES.items():
        put(server, prefix + rel, data)
    put(server, "models/tiny-other/config.json", b"must not be downloaded")  # shares the string prefix
    return f"s3://{server.bucket}/{prefix.rstrip('/')}"


def test_download_s3_prefix_downloads_folder_then_reuses_cache(moto_s3, tmp_path, s3_calls):
    uri = upload_model(moto_s3)
    folder = download_s3_prefix(uri, cache_dir=tmp_path / "cache")
    assert folder == tmp_path / "cache" / moto_s3.bucket / "models" / "tiny"
    for rel, data in MODEL_FILES.items():
        assert (folder / rel).read_bytes() == data
    assert not (folder.parent / "tiny-other").exists()
    downloaded = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert downloaded == sorted([*MODEL_FILES, storage.CACHE_MARKER])
    assert s3_calls.count("GetObject") == len(MODEL_FILES)

    mtimes = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    s3_calls.clear()
    assert download_s3_prefix(uri, cache_dir=tmp_path / "cache") == folder
    assert s3_calls == ["ListObjectsV2"]  # one listing, no object fetched
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == mtimes


def test_download_s3_prefix_default_cache_follows_env(moto_s3, tmp_path, monkeypatch):
    uri = upload_model(moto_s3)
    monkeypatch.setenv("OLMOCR_RL_CACHE", str(tmp_path / "c"))
    assert download_s3_prefix(uri + "/") == tmp_path / "c" / "s3" / moto_s3.bucket / "models" / "tiny"


def test_download_s3_prefix_refetches_changed_keys_and_drops_deleted_ones(moto_s3, tmp_path, s3_calls):
    uri = upload_model(moto_s3)
    folder = download_s3_prefix(uri, cache_dir=tmp_path)
    put(moto_s3, "models/tiny/config.json", b'{"model_type": "qwen2_vl"}')
    moto_s3.client().delete_object(Bucket=moto_s3.bucket, Key="models/tiny/tokenizer/tokenizer.json")
    s3_calls.clear()
    download_s3_prefix(uri, cache_dir=tmp_path)
    assert s3_calls.count("GetObject") == 1
    assert (folder / "config.json").read_bytes() == b'{"model_type": "qwen2_vl"}'
    assert not (folder / "tokenizer" / "tokenizer.json").exists()


def test_interrupted_download_never_looks_complete_and_resumes(moto_s3, tmp_path, monkeypatch, s3_calls):
    uri = upload_model(moto_s3)
    real_download = storage_s3.download_object
    done = []

    def dies_on_second_file(client, bucket, key, destination):
        if len(done) == 1:
            raise KeyboardInterrupt  # a killed process: nothing of ours gets to clean up more than `finally`
        real_download(client, bucket, key, destination)
        done.append(key)

    monkeypatch.setattr(storage_s3, "download_object", dies_on_second_file)
    with pytest.raises(KeyboardInterrupt):
        download_s3_prefix(uri, cache_dir=tmp_path)
    folder = tmp_path / moto_s3.bucket / "models" / "tiny"
    marker = json.loads((folder / storage.CACHE_MARKER).read_text())
    assert marker["complete"] is False and list(marker["objects"]) == ["config.json"]
    assert not [p for p in folder.rglob("*") if p.name.endswith(storage.PARTIAL_SUFFIX)]

    monkeypatch.setattr(storage_s3, "download_object", real_download)
    s3_calls.clear()
    download_s3_prefix(uri, cache_dir=tmp_path)
    assert s3_calls.count("GetObject") == len(MODEL_FILES) - 1  # the whole first file is kept
    assert json.loads((folder / storage.CACHE_MARKER).read_text())["complete"] is True
    assert (folder / "model.safetensors").read_bytes() == MODEL_FILES["model.safetensors"]


def test_download_s3_prefix_errors_name_the_uri_and_the_fix(moto_s3, tmp_path, monkeypatch):
    empty = f"s3://{moto_s3.bucket}/models/nothing-here"
    with pytest.raises(StorageError, match="nothing to download under s3://olmocr-rl-test/models/nothing-here"):
        download_s3_prefix(empty, cache_dir=tmp_path)
    with pytest.raises(StorageError, match="bucket does not exist") as info:
        download_s3_prefix("s3://no-such-bucket/m", cache_dir=tmp_path)
    assert "AWS_ENDPOINT_URL" in str(info.value)

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StorageError, match="no AWS credentials found: set AWS_ACCESS_KEY_ID"):
        download_s3_prefix(empty, cache_dir=tmp_path)

    moto_s3.stop()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    started = time.monotonic()
    with pytest.raises(StorageError, match="cannot reach the S3 endpoint http://127.0.0.1") as info:
        download_s3_prefix(empty, cache_dir=tmp_path)
    assert empty in str(info.value) and "AWS_ENDPOINT_URL" in str(info.value)
    assert time.monotonic() - started < 5


def test_download_s3_prefix_uses_complete_cache_when_s3_is_unreachable(moto_s3, tmp_path, caplog):
    uri = upload_model(moto_s3)
    folder = download_s3_prefix(uri, cache_dir=tmp_path)
    moto_s3.stop()
    with caplog.at_level(logging.WARNING, logger="olmocr_rl.storage"):
        assert download_s3_prefix(uri, cache_dir=tmp_path) == folder
    assert "using the complete cached copy" in caplog.text and "cannot reach" in caplog.text


# ---- mirroring -------------------------------------------------------------------------------------


def test_sync_dir_to_s3_uploads_new_and_changed_files_and_deletes_vanished_ones(moto_s3, tmp_path):
    out = tmp_path / "out"
    fake_checkpoint(out, 1)
    fake_checkpoint(out, 2)
    write_files(out, {"run.lock": b"", ".git/HEAD": b"ref", "checkpoint-2/x.lock": b""})
    uri = f"s3://{moto_s3.bucket}/runs/a"  # no trailing slash: still a folder

    first = sync_dir_to_s3(out, uri)
    assert sorted(first.uploaded) == sorted(
        f"checkpoint-{n}/{f}" for n in (1, 2) for f in ("model.safetensors", "optimizer.pt", "trainer_state.json")
    )
    assert first.uploaded[-2:] == ["checkpoint-1/trainer_state.json", "checkpoint-2/trainer_state.json"]
    assert remote_keys(moto_s3, "runs/a/") == set(first.uploaded)  # excludes honoured
    assert remote_keys(moto_s3, "runs/") == {"a/" + k for k in first.uploaded}

    again = sync_dir_to_s3(out, uri)
    assert (again.uploaded, again.deleted, again.unchanged) == ([], [], 6)

    (out / "checkpoint-2" / "optimizer.pt").write_bytes(b"optimizer, changed size")
    future = time.time() + 5
    os.utime(out / "checkpoint-2" / "model.safetensors", (future, future))  # same size, newer
    import shutil

    shutil.rmtree(out / "checkpoint-1")  # what save_total_limit pruning does
    put(moto_s3, "runs/a/stray.txt", b"only remote")
    put(moto_s3, "runs/a/keep.lock", b"excluded on both sides")
    third = sync_dir_to_s3(out, uri)
    assert sorted(third.uploaded) == ["checkpoint-2/model.safetensors", "checkpoint-2/optimizer.pt"]
    assert sorted(third.deleted) == sorted(
        ["stray.txt"] + [f"checkpoint-1/{f}" for f in ("model.safetensors", "optimizer.pt", "trainer_state.json")]
    )
    assert remote_keys(moto_s3, "runs/a/") == {
        "keep.lock", "checkpoint-2/model.safetensors", "checkpoint-2/optimizer.pt", "checkpoint-2/trainer_state.json"
    }
    body = moto_s3.client().get_object(Bucket=moto_s3.bucket, Key="runs/a/checkpoint-2/optimizer.pt")["Body"].read()
    assert body == b"optimizer, changed size"


def test_sync_without_delete_keeps_remote_extras(moto_s3, tmp_path):
    out = tmp_path / "out"
    write_files(out, {"a.txt": b"a"})
    put(moto_s3, "r/b.txt", b"b")
    result = sync_dir_to_s3(out, f"s3://{moto_s3.bucket}/r/", delete=False)
    assert (result.uploaded, result.deleted) == (["a.txt"], [])
    assert remote_keys(moto_s3, "r/") == {"a.txt", "b.txt"}


def test_mirror_keep_remote_only_deletes_only_what_it_saw_locally(moto_s3, tmp_path):
    """A run resumed on a fresh machine must not wipe the older checkpoints it never pulled."""
    uri = f"s3://{moto_s3.bucket}/run/"
    for step in (1, 2):
        for rel in ("model.safetensors", "trainer_state.json"):
            put(moto_s3, f"run/checkpoint-{step}/{rel}", b"old")
    out = tmp_path / "out"
    fake_checkpoint(out, 3)
    mirror = S3Mirror(out, uri, keep_remote_only=True)
    mirror.remember_local()
    fake_checkpoint(out, 4)
    assert mirror.sync().deleted == []
    import shutil

    shutil.rmtree(out / "checkpoint-3")
    result = mirror.sync()
    files = ("model.safetensors", "optimizer.pt", "trainer_state.json")
    assert sorted(result.deleted) == [f"checkpoint-3/{f}" for f in files]
    assert {k.split("/")[0] for k in remote_keys(moto_s3, "run/")} == {"checkpoint-1", "checkpoint-2", "checkpoint-4"}


def test_mirror_skips_files_deleted_during_the_pass_and_remembers_what_it_sent(moto_s3, tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_files(out, {"checkpoint-1/model.safetensors": b"w", "checkpoint-1/trainer_state.json": b"{}"})
    ahead = time.time() + 100  # a local clock running ahead of the server's
    os.utime(out / "checkpoint-1" / "model.safetensors", (ahead, ahead))
    real_scan = storage_mirror.scan_local

    def scan_with_a_ghost(local_dir, exclude):
        files = real_scan(local_dir, exclude)
        files["checkpoint-0/optimizer.pt"] = LocalFile(Path(local_dir) / "checkpoint-0" / "optimizer.pt", 3, 1.0)
        return files  # as if rotation removed it between the listing and its upload

    monkeypatch.setattr(storage_mirror, "scan_local", scan_with_a_ghost)
    mirror = S3Mirror(out, f"s3://{moto_s3.bucket}/r")
    first = mirror.sync()
    assert (sorted(first.uploaded), first.vanished) == (
        ["checkpoint-1/model.safetensors", "checkpoint-1/trainer_state.json"], 1
    )
    assert "[checkpoint-1]" in first.summary()
    second = mirror.sync()
    assert (second.uploaded, second.unchanged) == ([], 2)  # the future mtime alone does not re-send


def test_mirror_retries_transient_failures_then_succeeds(moto_s3, tmp_path, monkeypatch, caplog):
    from botocore.exceptions import EndpointConnectionError

    out = tmp_path / "out"
    write_files(out, {"a.txt": b"a"})
    real = storage_s3.make_s3_client
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise EndpointConnectionError(endpoint_url=moto_s3.endpoint_url)
        return real()

    monkeypatch.setattr(storage_s3, "make_s3_client", flaky)
    with caplog.at_level(logging.WARNING, logger="olmocr_rl.storage"):
        result = S3Mirror(out, f"s3://{moto_s3.bucket}/r", retries=3, backoff_s=0.01).sync()
    assert (result.attempts, result.uploaded) == (2, ["a.txt"])
    assert "retrying in 0.0 s (attempt 1 of 3)" in caplog.text


def test_mirror_gives_up_at_once_on_refused_credentials_and_after_retries_on_dead_server(moto_s3, tmp_path):
    out = tmp_path / "out"
    write_files(out, {"a.txt": b"a"})
    with pytest.raises(StorageError, match=r"bucket does not exist.*gave up after 1 attempt"):
        S3Mirror(out, "s3://missing-bucket/r", retries=3, backoff_s=0.01).sync()
    moto_s3.stop()
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"cannot reach the S3 endpoint.*gave up after 3 attempt"):
        S3Mirror(out, f"s3://{moto_s3.bucket}/r", retries=3, backoff_s=0.01).sync()
    assert time.monotonic() - started < 5


# ---- the callback ----------------------------------------------------------------------------------


@pytest.mark.parametrize("background", [False, True])
def test_callback_mirrors_on_save_and_train_end_on_world_main_only(moto_s3, tmp_path, background):
    out = tmp_path / "out"
    callback = S3SyncCallback(f"s3://{moto_s3.bucket}/run//", out, background=background)
    assert callback.s3_save_path == f"s3://{moto_s3.bucket}/run/"
    other_rank = WorldState(main=False)
    fake_checkpoint(out, 1)
    callback.on_train_begin(None, other_rank, None)
    callback.on_save(None, other_rank, None)
    callback.on_train_end(None, other_rank, None)
    assert remote_keys(moto_s3) == set()

    main = WorldState()
    callback.on_train_begin(None, main, None)
    callback.on_save(None, main, None)
    fake_checkpoint(out, 2)
    import shutil

    shutil.rmtree(out / "checkpoint-1")
    callback.on_save(None, main, None)
    callback.on_train_end(None, main, None)  # waits for the background passes
    assert {k.split("/")[1] for k in remote_keys(moto_s3)} == {"checkpoint-2"}
    assert callback.last_error is None and callback.last_result is not None


def test_callback_logs_and_goes_on_when_the_server_is_gone(moto_s3, tmp_path, caplog):
    out = tmp_path / "out"
    fake_checkpoint(out, 1)
    callback = S3SyncCallback(f"s3://{moto_s3.bucket}/run", out, retries=2, backoff_s=0.01, background=False)
    moto_s3.stop()
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="olmocr_rl.storage"):
        callback.on_save(None, WorldState(), None)  # no exception
        callback.on_train_end(None, WorldState(), None)
    assert time.monotonic() - started < 5
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # both passes failed, each logged once
    assert "training goes on" in errors[0].getMessage()
    assert f"s3://{moto_s3.bucket}/run/" in errors[0].getMessage()
    assert "cannot reach the S3 endpoint" in callback.last_error


def test_callback_with_nothing_saved_yet_logs_no_error(moto_s3, tmp_path, caplog):
    callback = S3SyncCallback(f"s3://{moto_s3.bucket}/run", tmp_path / "never-created")
    with caplog.at_level(logging.INFO, logger="olmocr_rl.storage"):
        callback.on_train_end(None, WorldState(), None)
    assert "does not exist yet" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_check_s3_access_is_a_preflight_for_the_save_path(moto_s3):
    storage.check_s3_access(f"s3://{moto_s3.bucket}/runs/new/")  # an empty prefix in a real bucket is fine
    with pytest.raises(StorageError, match="listing s3://typo-bucket/runs failed: the bucket does not exist"):
        storage.check_s3_access("s3://typo-bucket/runs")


def test_without_boto3_s3_fails_with_an_install_hint_and_training_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(__import__("sys").modules, "boto3", None)  # import boto3 -> ImportError
    monkeypatch.setattr(storage_s3, "_CLIENTS", {})
    with pytest.raises(StorageError, match="pip install boto3"):
        download_s3_prefix("s3://bucket/model", cache_dir=tmp_path)
    fake_checkpoint(tmp_path / "out", 1)
    callback = S3SyncCallback("s3://bucket/run", tmp_path / "out", retries=3, background=False)
    callback.on_save(None, WorldState(), None)
    assert "pip install boto3" in callback.last_error and "gave up after 1 attempt" in callback.last_error
    assert "pip install boto3" in caplog.text


def test_callback_rejects_a_malformed_destination_at_once(tmp_path):
    with pytest.raises(ValueError, match="single slash"):
        S3SyncCallback("s3:/bucket/run", tmp_path)


# ---- resume ----------------------------------------------------------------------------------------


def test_pull_latest_checkpoint_downloads_only_the_newest_complete_one(moto_s3, tmp_path, s3_calls):
    remote_root = tmp_path / "elsewhere"
    for step in (1, 20, 3):
        fake_checkpoint(remote_root, step)
    fake_checkpoint(remote_root, 25, complete=False)  # a save cut short by preemption
    write_files(remote_root, {"config.json": b"{}", "checkpoint-x/model.safetensors": b"?"})
    uri = f"s3://{moto_s3.bucket}/run"
    sync_dir_to_s3(remote_root, uri)

    out = tmp_path / "fresh-machine-output"
    s3_calls.clear()
    pulled = pull_latest_checkpoint_from_s3(uri, out)
    assert pulled == out / "checkpoint-20"
    assert [p.name for p in out.iterdir() if not p.name.endswith(".lock")] == ["checkpoint-20"]
    assert json.loads((pulled / "trainer_state.json").read_text()) == {"global_step": 20}
    assert (pulled / "model.safetensors").read_bytes() == safetensors_bytes(b"weights 20")
    assert s3_calls.count("GetObject") == 3
    assert find_latest_checkpoint(out) == pulled

    s3_calls.clear()
    assert pull_latest_checkpoint_from_s3(uri, out) == pulled  # already local: S3 untouched
    assert s3_calls == []


def test_pull_returns_none_when_s3_has_no_complete_checkpoint(moto_s3, tmp_path):
    put(moto_s3, "run/checkpoint-5/model.safetensors", b"w")
    assert pull_latest_checkpoint_from_s3(f"s3://{moto_s3.bucket}/run/", tmp_path / "out") is None


def test_resolve_resume_checkpoint_prefers_local_then_s3_then_none(moto_s3, tmp_path):
    uri = f"s3://{moto_s3.bucket}/run/"
    out = tmp_path / "out"
    assert resolve_resume_checkpoint(out) is None
    assert resolve_resume_checkpoint(out, uri) is None  # S3 reachable but empty: start fresh

    fake_checkpoint(tmp_path / "remote", 7)
    sync_dir_to_s3(tmp_path / "remote", uri)
    assert resolve_resume_checkpoint(out, uri) == out / "checkpoint-7"

    moto_s3.stop()
    assert resolve_resume_checkpoint(out, uri) == out / "checkpoint-7"  # local wins, S3 not needed
    with pytest.raises(StorageError, match=r"listing checkpoints in s3://olmocr-rl-test/run/ failed: cannot reach"):
        resolve_resume_checkpoint(tmp_path / "other", uri)


@pytest.mark.parametrize("save_path", ["run", "run/", "run//"])  # the mirror writes run// as run/
def test_resume_checkpoint_restores_the_history_from_s3_up_to_the_checkpoint(moto_s3, tmp_path, save_path):
    uri = f"s3://{moto_s3.bucket}/{save_path}"
    remote = tmp_path / "remote"
    fake_checkpoint(remote, 3)
    write_files(remote, {"metrics.jsonl": "".join(json.dumps({"step": n}) + "\n" for n in range(1, 6)).encode()})
    sync_dir_to_s3(remote, f"s3://{moto_s3.bucket}/run/")
    out = tmp_path / "out"
    assert resume_checkpoint(True, out, uri) == str(out / "checkpoint-3")
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert resume_checkpoint(False, out, uri) is None
    assert resume_checkpoint(str(remote / "checkpoint-3"), tmp_path / "other") == str(remote / "checkpoint-3")


def test_an_explicit_resume_path_saved_by_another_layout_is_refused(tmp_path, monkeypatch):
    """--resume_from_checkpoint PATH gets the same one-line layout check as a checkpoint found by itself."""
    from olmocr_rl.storage import CheckpointMismatchError, resume_checkpoint

    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        monkeypatch.delenv(name, raising=False)
    checkpoint = fake_checkpoint(tmp_path / "run", 4)
    manifest = {"checkpoint": "checkpoint-4", "node_rank": 0, "num_machines": 2, "world_size": 4, "engine": "ddp",
                "files": {}}
    write_files(checkpoint, {"olmocr_rl_manifest/node-0.json": json.dumps(manifest).encode()})
    with pytest.raises(CheckpointMismatchError, match="was saved by .*restart with the same number of processes"):
        resume_checkpoint(str(checkpoint), tmp_path / "other")
    assert not (tmp_path / "other" / "metrics.jsonl").exists()


def test_resume_checkpoint_without_a_history_on_s3_warns_and_goes_on(moto_s3, tmp_path, caplog):
    uri = f"s3://{moto_s3.bucket}/run/"
    fake_checkpoint(tmp_path / "remote", 2)
    sync_dir_to_s3(tmp_path / "remote", uri)
    with caplog.at_level(logging.WARNING, logger="olmocr_rl.storage"):
        assert resume_checkpoint(True, tmp_path / "out", uri) == str(tmp_path / "out" / "checkpoint-2")
    assert "could not restore the run history from s3://olmocr-rl-test/run/metrics.jsonl" in caplog.text
    assert not list((tmp_path / "out").glob("metrics.jsonl*"))  # no partial file left behind


def test_importing_storage_loads_neither_transformers_nor_boto3(monkeypatch):
    """Only storage.callback needs transformers, and it loads on first use of S3SyncCallback."""
    import subprocess
    import sys

    import olmocr_rl.storage as storage

    code = ("import sys, olmocr_rl.storage, olmocr_rl.storage.s3, olmocr_rl.storage.cache, olmocr_rl.storage.mirror, "
            "olmocr_rl.storage.checkpoints\n"
            "heavy = sorted({'transformers', 'torch', 'boto3', 'olmocr_rl.storage.callback'} & set(sys.modules))\n"
            "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # The first use loads it (here, where transformers is already imported: a fresh interpreter would spend ~6 s on
    # it): the module forgotten, the name loads it again.
    monkeypatch.delitem(sys.modules, "olmocr_rl.storage.callback", raising=False)
    monkeypatch.delattr(storage, "callback", raising=False)
    callback_class = storage.S3SyncCallback
    from transformers import TrainerCallback

    assert sys.modules["olmocr_rl.storage.callback"].S3SyncCallback is callback_class
    assert issubclass(callback_class, TrainerCallback)


# ---- a real Trainer --------------------------------------------------------------------------------


def tiny_trainer(output_dir: Path, max_steps: int, callbacks):
    """A real transformers.Trainer on a 3-parameter regression: saves every step, keeps the last 2."""
    import torch
    from transformers import Trainer, TrainingArguments

    class Line(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, x, y):
            return {"loss": ((self.linear(x).squeeze(-1) - y) ** 2).mean()}

    torch.manual_seed(0)
    data = [{"x": torch.randn(2), "y": torch.randn(())} for _ in range(16)]
    args = TrainingArguments(
        output_dir=str(output_dir), max_steps=max_steps, save_steps=1, save_total_limit=2,
        per_device_train_batch_size=2, learning_rate=0.1, report_to=[], use_cpu=True,
        disable_tqdm=True, logging_steps=1, dataloader_num_workers=0,
    )
    return Trainer(model=Line(), args=args, train_dataset=data, callbacks=callbacks)


def test_trainer_checkpoints_mirror_to_s3_and_resume_on_a_fresh_machine(moto_s3, tmp_path):
    uri = f"s3://{moto_s3.bucket}/run/"
    first_dir = tmp_path / "machine-a"
    tiny_trainer(first_dir, 3, [S3SyncCallback(uri, first_dir, backoff_s=0.01)]).train()
    checkpoints = {k.split("/")[0] for k in remote_keys(moto_s3, "run/")}
    assert checkpoints == {"checkpoint-2", "checkpoint-3"}  # checkpoint-1 pruned locally, then remotely

    second_dir = tmp_path / "machine-b"
    resume = resolve_resume_checkpoint(second_dir, uri)
    assert resume == second_dir / "checkpoint-3"
    trainer = tiny_trainer(second_dir, 5, [S3SyncCallback(uri, second_dir, backoff_s=0.01)])
    trainer.train(resume_from_checkpoint=str(resume))
    assert trainer.state.global_step == 5
    assert json.loads((second_dir / "checkpoint-5" / "trainer_state.json").read_text())["global_step"] == 5
    # checkpoint-3 was this run's own (pulled) and got pruned; checkpoint-2 was never local here: kept.
    checkpoints = {k.split("/")[0] for k in remote_keys(moto_s3, "run/")}
    assert checkpoints == {"checkpoint-2", "checkpoint-4", "checkpoint-5"}


def test_training_finishes_when_the_s3_server_goes_away_mid_run(moto_s3, tmp_path, caplog):
    from transformers import TrainerCallback

    class StopServerAtStep2(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                sync.wait()  # step 1's upload has finished: the server dies between two syncs
                moto_s3.stop()

    uri = f"s3://{moto_s3.bucket}/run/"
    out = tmp_path / "out"
    sync = S3SyncCallback(uri, out, retries=2, backoff_s=0.01)
    trainer = tiny_trainer(out, 3, [StopServerAtStep2(), sync])
    with caplog.at_level(logging.INFO, logger="olmocr_rl.storage"):
        trainer.train()
    assert trainer.state.global_step == 3
    assert find_latest_checkpoint(out) == out / "checkpoint-3"
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("olmocr_rl.storage")]
    assert any(m.startswith("S3 sync") and "uploaded" in m for m in messages), messages  # step 1 went up
    failures = [m for m in messages if "failed; training goes on" in m]
    assert failures and all(uri in m and "cannot reach the S3 endpoint" in m for m in failures)


def test_tiny_model_loads_from_an_s3_uri(moto_s3, tmp_path, tiny_model_dir, s3_calls):
    """--model_name s3://...: the folder comes down once and loads like the local one."""
    from olmocr_rl.model.loading import load_model_and_processor

    sync_dir_to_s3(tiny_model_dir, f"s3://{moto_s3.bucket}/models/tiny")
    s3_calls.clear()
    model, processor = load_model_and_processor(f"s3://{moto_s3.bucket}/models/tiny", cache_dir=str(tmp_path))
    local_model, _ = load_model_and_processor(str(tiny_model_dir))
    assert type(model) is type(local_model)
    assert all(
        (a == b).all() for a, b in zip(model.state_dict().values(), local_model.state_dict().values(), strict=True)
    )
    assert processor is not None
    fetched = s3_calls.count("GetObject")
    assert fetched >= sum(1 for p in tiny_model_dir.rglob("*") if p.is_file())
    load_model_and_processor(f"s3://{moto_s3.bucket}/models/tiny", cache_dir=str(tmp_path), load_model=False)
    assert s3_calls.count("GetObject") == fetched  # second load: cache reused


def test_both_trainers_load_checkpoints_through_the_trainer_class_whoever_builds_them():
    """The weights/optimizer fix is in the trainer classes, not patched on by grpo_train's builder."""
    import inspect

    from trl import GRPOTrainer

    from olmocr_rl.trainer.plain import PlainGRPOTrainer
    from olmocr_rl.trainer.olmorl import OlmoRLGRPOTrainer

    for cls in (PlainGRPOTrainer, OlmoRLGRPOTrainer):
        assert cls._load_from_checkpoint is PlainGRPOTrainer._load_from_checkpoint
        assert cls._load_optimizer_and_scheduler is PlainGRPOTrainer._load_optimizer_and_scheduler
        assert PlainGRPOTrainer._load_from_checkpoint is not GRPOTrainer._load_from_checkpoint
    assert "load_checkpoint_weights" in inspect.getsource(PlainGRPOTrainer._load_from_checkpoint)
    assert "load_optimizer_and_scheduler" in inspect.getsource(PlainGRPOTrainer._load_optimizer_and_scheduler)


def test_storage_errors_and_their_subclasses_are_permanent():
    from olmocr_rl.storage import CheckpointMismatchError

    assert storage_s3.is_permanent(storage_s3.StorageError("x"))
    assert storage_s3.is_permanent(CheckpointMismatchError("another layout"))  # a subclass: was retried by name
    assert not storage_s3.is_permanent(OSError("connection reset"))


def test_write_json_atomic_replaces_whole_files_and_leaves_no_partial(tmp_path):
    from olmocr_rl.storage.files import write_json_atomic

    target = tmp_path / "deep" / "record.json"
    write_json_atomic(target, {"b": 1, "a": [2]}, indent=1, sort_keys=True)
    write_json_atomic(target, {"b": 3})
    assert json.loads(target.read_text()) == {"b": 3} and target.read_text().endswith("\n")
    assert [p.name for p in target.parent.iterdir()] == ["record.json"]


def test_a_file_noted_as_uploaded_is_not_sent_again(moto_s3, tmp_path):
    out = tmp_path / "out"
    write_files(out, {"checkpoint-1/extra.json": b"{}"})
    mirror = storage_mirror.S3Mirror(out, f"s3://{moto_s3.bucket}/noted/", delete=True, keep_remote_only=True)
    storage_s3.make_s3_client().upload_file(str(out / "checkpoint-1/extra.json"), moto_s3.bucket,
                                            "noted/checkpoint-1/extra.json")
    mirror.note_uploaded("checkpoint-1/extra.json", out / "checkpoint-1" / "extra.json")
    assert mirror.sync().uploaded == []
    (out / "checkpoint-1" / "extra.json").unlink()
    mirror.sync()
    assert "noted/checkpoint-1/extra.json" not in remote_keys(moto_s3, "noted/")  # ours: deleted remotely too


# ---- errors that keep bugs visible -------------------------------------------------------------------


def test_only_io_and_boto_families_become_storage_errors():
    from botocore.exceptions import ClientError, EndpointConnectionError
    from boto3.exceptions import S3UploadFailedError

    families = storage_s3.storage_errors()
    for error in (OSError("disk"), EndpointConnectionError(endpoint_url="http://x"), S3UploadFailedError("x"),
                  ClientError({"Error": {"Code": "NoSuchBucket"}}, "ListObjectsV2"), StorageError("x")):
        assert isinstance(error, families), error
    for bug in (KeyError("etag"), TypeError("x"), AttributeError("x"), ValueError("x")):
        assert not isinstance(bug, families), bug


def test_a_bug_in_the_mirror_is_raised_at_once_with_its_traceback(moto_s3, tmp_path, monkeypatch):
    """A KeyError inside a pass was turned into a StorageError, retried, and logged at every save."""
    out = tmp_path / "out"
    write_files(out, {"a.txt": b"a"})
    passes = []

    def buggy_pass(self, client, result):
        passes.append(1)
        return {}["etag"]

    monkeypatch.setattr(S3Mirror, "_sync_once", buggy_pass)
    with pytest.raises(KeyError, match="etag"):
        S3Mirror(out, f"s3://{moto_s3.bucket}/r", retries=3, backoff_s=0.01).sync()
    assert passes == [1]  # not retried


def test_the_callback_logs_a_bug_with_its_traceback_and_training_goes_on(moto_s3, tmp_path, monkeypatch, caplog):
    out = tmp_path / "out"
    fake_checkpoint(out, 1)
    monkeypatch.setattr(S3Mirror, "_sync_once", lambda self, client, result: {}["etag"])
    callback = S3SyncCallback(f"s3://{moto_s3.bucket}/run", out, retries=2, backoff_s=0.01, background=False)
    with caplog.at_level(logging.ERROR, logger="olmocr_rl.storage"):
        callback.on_save(None, WorldState(), None)  # no exception: the mirror never stops training
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "unexpected error (a bug in olmocr_rl, not an S3 failure" in record.getMessage()
    assert record.exc_info and record.exc_info[0] is KeyError  # the traceback is in the log
    assert callback.last_error == "KeyError: 'etag'"


def test_a_bug_on_the_resume_path_keeps_its_traceback(moto_s3, tmp_path, monkeypatch, capsys):
    """resume_checkpoint and grpo_train let an unexpected error through as it is (it was a StorageError, and
    grpo_train's one-line message dropped its traceback)."""
    from conftest import BENCH_DATA_SAMPLE
    from olmocr_rl import grpo_train
    from olmocr_rl.storage import resume

    def buggy(*args, **kwargs):
        raise KeyError("LastModified")

    real = resume.newest_remote_checkpoint
    monkeypatch.setattr(resume, "newest_remote_checkpoint", buggy)
    uri = f"s3://{moto_s3.bucket}/run/"
    with pytest.raises(KeyError, match="LastModified"):
        resume_checkpoint(True, tmp_path / "out", uri)
    with pytest.raises(KeyError, match="LastModified"):
        grpo_train.main(["--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--reward_bench", "--report_to", "none",
                         "--num_generations", "2", "--per_device_train_batch_size", "2",
                         "--gradient_accumulation_steps", "1", "--output_dir", str(tmp_path / "out2"),
                         "--resume_from_checkpoint", "--s3_save_path", uri])
    monkeypatch.setattr(resume, "newest_remote_checkpoint", real)
    moto_s3.stop()  # an S3 failure is still one line
    code = grpo_train.main(["--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--reward_bench", "--report_to",
                            "none", "--num_generations", "2", "--per_device_train_batch_size", "2",
                            "--gradient_accumulation_steps", "1", "--output_dir", str(tmp_path / "out3"),
                            "--resume_from_checkpoint", "--s3_save_path", uri])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(err) == 1 and err[0].startswith("error: --resume_from_checkpoint: ")


def test_the_cpu_index_fix_is_scoped_to_the_one_load_and_thread(tmp_path):
    """torch cannot restore map_location cpu:0 (the Trainer's device for several CPU processes). The optimizer load
    may, on its own thread and for that call only; torch.load is never replaced (it was, process-wide)."""
    import threading
    from types import SimpleNamespace

    import torch

    from olmocr_rl.trainer.checkpoint_load import load_optimizer_and_scheduler

    path = tmp_path / "optimizer.pt"
    torch.save({"step": torch.ones(2)}, path)
    cpu0 = torch.device("cpu", 0)
    real_load = torch.load
    with pytest.raises(RuntimeError, match="don't know how to restore data location"):
        torch.load(path, map_location=cpu0, weights_only=True)
    seen = {}

    def other_thread():
        try:
            torch.load(path, map_location=cpu0, weights_only=True)
        except RuntimeError as exc:
            seen["other thread"] = str(exc)

    def trainers_load(checkpoint):  # what the Trainer's _load_optimizer_and_scheduler does with cpu:0
        assert torch.load is real_load
        seen["loaded"] = torch.load(path, map_location=cpu0, weights_only=True)["step"].tolist()
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()

    trainer = SimpleNamespace(args=SimpleNamespace(device=cpu0))
    load_optimizer_and_scheduler(trainer, str(tmp_path), trainers_load)
    assert seen["loaded"] == [1.0, 1.0]
    assert "don't know how to restore" in seen["other thread"]  # another thread, same moment: torch's own rules
    with pytest.raises(RuntimeError, match="don't know how to restore data location"):
        torch.load(path, map_location=cpu0, weights_only=True)  # and after the call


def test_history_from_s3_never_shows_the_steps_trained_again(tmp_path, monkeypatch):
    """A resume on a fresh machine fetches S3's metrics.jsonl (here with steps 1-4 of a run killed after saving
    checkpoint-2): OUTPUT_DIR/metrics.jsonl appears already ending at step 2, never with steps 3-4 in it (a test or a
    watcher waiting for step 3 would otherwise read the killed run's)."""
    from olmocr_rl.storage import checkpoints

    checkpoint = tmp_path / "out" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    metrics = tmp_path / "out" / "metrics.jsonl"
    seen = []

    def fetch(uri, destination):
        assert uri == "s3://bucket/run" and destination != metrics
        destination.write_text("".join(json.dumps({"step": step, "reward": 0.5}) + "\n" for step in (1, 2, 3, 4)))
        seen.append(metrics.exists())

    monkeypatch.setattr(checkpoints, "_fetch_history", fetch)
    checkpoints.restore_history(checkpoint, tmp_path / "out", "s3://bucket/run")
    assert seen == [False]
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2]
    assert not list((tmp_path / "out").glob("*.pulled"))
