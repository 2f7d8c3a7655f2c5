"""The training CLI against a real S3 server on loopback (moto's standalone server, tests/s3_server.py).

A run on a "first machine" loads the tiny model from ``s3://``, mirrors its checkpoints and final model
to ``--s3_save_path``; a "second machine" (a new, empty output dir) resumes from what S3 holds; and a
run whose S3 server disappears after the first checkpoint upload still trains to the end, with the failures
logged, and exits 74 naming what is only on local disk.
The CLI runs as a subprocess; the moto fixture points both this process and the child at the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from test_cli_e2e import REPO, cli_env, failure, read_metrics, run_cli, tiny_run_flags, training_steps
import warm_python


def upload_folder(server, folder: Path, prefix: str) -> set[str]:
    """Put every file of ``folder`` under ``prefix`` with the test's own client; returns the keys."""
    keys = set()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        server.client().upload_file(str(path), server.bucket, key)
        keys.add(key)
    return keys


def remote_files(server, prefix: str) -> set[str]:
    """Relative names of the objects under ``prefix/``."""
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix + "/")
    return {item["Key"][len(prefix) + 1:] for page in pages for item in page.get("Contents", [])}


def s3_flags(model: str | Path, output_dir: Path, save_uri: str, max_steps: int, cache_dir: Path) -> list:
    """The e2e test's tiny run, mirrored to ``save_uri``; ``model`` may be an ``s3://`` URI."""
    return [*tiny_run_flags(model, output_dir, max_steps), "--s3_save_path", save_uri, "--cache_dir", cache_dir,
            "--report_to", "none"]


@pytest.mark.slow
def test_model_from_s3_checkpoints_mirrored_then_resumed_on_a_fresh_machine(moto_s3, tmp_path, tiny_model_dir):
    model_uri = f"s3://{moto_s3.bucket}/models/tiny"
    uploaded = upload_folder(moto_s3, tiny_model_dir, "models/tiny")
    save_uri = f"s3://{moto_s3.bucket}/runs/r1"
    cache = tmp_path / "cache"

    # First machine: model downloaded from S3, checkpoint-2 and the final model mirrored to S3.
    first_dir = tmp_path / "machine1"
    first = run_cli(s3_flags(model_uri, first_dir, save_uri, 2, cache), tmp_path)
    assert first.returncode == 0, failure(first)
    log = first.stderr + first.stdout
    assert f"from {model_uri} (torch.float32" in log  # models.py's "loaded <class> from <name> (...)" line
    cached = cache / moto_s3.bucket / "models" / "tiny"
    assert {f"models/tiny/{p.relative_to(cached).as_posix()}" for p in cached.rglob("*") if p.is_file()} >= uploaded
    assert "S3 sync" in log and "failed" not in log
    remote = remote_files(moto_s3, "runs/r1")
    for name in ("model.safetensors", "trainer_state.json", "optimizer.pt", "config.json", "tokenizer.json",
                 "chat_template.jinja"):
        assert f"checkpoint-2/{name}" in remote, sorted(remote)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "metrics.jsonl", "run_summary.json"):
        assert name in remote, sorted(remote)  # the final model and the run's history, mirrored at the end
    body = moto_s3.client().get_object(Bucket=moto_s3.bucket, Key="runs/r1/run_summary.json")["Body"].read()
    assert json.loads(body)["global_step"] == 2

    # Second machine: empty output dir, same --s3_save_path; the bare flag pulls checkpoint-2 and runs 3-4.
    second_dir = tmp_path / "machine2"
    second = run_cli([*s3_flags(model_uri, second_dir, save_uri, 4, cache), "--resume_from_checkpoint"], tmp_path)
    assert second.returncode == 0, failure(second)
    log = second.stderr + second.stdout
    assert f"pulled {save_uri}/checkpoint-2/" in log
    assert f"resuming from {second_dir / 'checkpoint-2'}" in log
    state = json.loads((second_dir / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert [h["step"] for h in state["log_history"] if "reward" in h] == [1, 2, 3, 4]
    # The history restarts where the checkpoint left it: steps 1-2 from S3's metrics.jsonl, 3-4 new.
    assert training_steps(read_metrics(second_dir)) == [1, 2, 3, 4]
    remote = remote_files(moto_s3, "runs/r1")
    assert {"checkpoint-2/trainer_state.json", "checkpoint-4/trainer_state.json"} <= remote
    body = moto_s3.client().get_object(Bucket=moto_s3.bucket, Key="runs/r1/run_summary.json")["Body"].read()
    assert json.loads(body)["global_step"] == 4
    remote_history = moto_s3.client().get_object(Bucket=moto_s3.bucket, Key="runs/r1/metrics.jsonl")["Body"].read()
    assert training_steps([json.loads(line) for line in remote_history.decode().splitlines()]) == [1, 2, 3, 4]


@pytest.mark.slow
def test_training_finishes_when_the_s3_server_goes_away_mid_run_and_exits_74(moto_s3, tmp_path, tiny_model_dir):
    save_uri = f"s3://{moto_s3.bucket}/runs/gone"
    out = tmp_path / "out"
    # A checkpoint every step: checkpoint-1's upload succeeds, the server stops as soon as it has stored that
    # checkpoint's last file (trainer_state.json), and the uploads of checkpoints 2-4 and of the final model cannot.
    # Every checkpoint is kept (the config's save_total_limit is 3): with checkpoint-1 rotated out at checkpoint-4's
    # save, a machine that trains faster than the first upload pass runs saw checkpoint-1/trainer_state.json (sent
    # last) vanish before its upload, and the server never stopped (a fresh-clone CI run, 2026-12-04).
    flags = [*s3_flags(tiny_model_dir, out, save_uri, 4, tmp_path / "cache"), "--save_total_limit", 10]
    flags[flags.index("--save_steps") + 1] = 1
    marker = "runs/gone/checkpoint-1/trainer_state.json"
    moto_s3.stop_after_put(marker)
    log_path = tmp_path / "cli.log"
    with log_path.open("w") as log_file:
        proc = warm_python.popen([sys.executable, "-m", "olmocr_rl.grpo_train", *map(str, flags)], cwd=REPO,
                                 env=cli_env(tmp_path), stdout=log_file, stderr=subprocess.STDOUT, text=True)
        try:
            returncode = proc.wait(timeout=540)
        finally:
            if proc.poll() is None:
                proc.kill()
    log = log_path.read_text()
    assert moto_s3.stopped_after == marker, (f"the server never stopped after {marker}; the PUTs it saw: "
                                             f"{moto_s3.puts}\n" + log[-6000:])
    assert returncode == 74, log[-8000:]  # trained, but the final model never reached S3: not a success
    assert f"to {save_uri}/ failed; training goes on, checkpoints stay on local disk" in log
    assert "cannot reach the S3 endpoint" in log
    assert "Traceback" not in log
    (line,) = [line for line in log.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: the final mirror of {out} to {save_uri} failed after its retries (")
    only_local = line.split("only on local disk: ")[1]
    for name in ("checkpoint-4/", "model.safetensors", "run_summary.json", "metrics.jsonl"):
        assert name in only_local, line
    assert "checkpoint-1/" not in only_local  # it reached S3 before the server went
    assert f"`aws s3 sync {out} {save_uri}`" in line
    # Training went on to the end, everything on local disk.
    assert json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    assert (out / "model.safetensors").is_file()
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 4


def test_resume_from_an_unreachable_s3_stops_before_the_model_loads(moto_s3, tmp_path):
    save_uri = f"s3://{moto_s3.bucket}/runs/r1"
    moto_s3.stop()  # the output dir is empty, so the checkpoint would have to come from S3
    out = tmp_path / "out"
    # A model folder that does not exist: reaching the model-loading phase would fail differently.
    result = run_cli([*s3_flags(tmp_path / "no-model", out, save_uri, 2, tmp_path / "cache"), "--resume_from_checkpoint"],
                     tmp_path)
    assert result.returncode == 1, failure(result)
    assert "Traceback" not in result.stderr
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith(f"error: --resume_from_checkpoint: listing checkpoints in {save_uri} failed")
    assert "cannot reach the S3 endpoint" in last


def test_a_model_on_an_unreachable_s3_is_one_error_line(moto_s3, tmp_path):
    model_uri = f"s3://{moto_s3.bucket}/models/tiny"
    moto_s3.stop()
    result = run_cli([*tiny_run_flags(model_uri, tmp_path / "out", 2), "--cache_dir", tmp_path / "cache",
                      "--report_to", "none"], tmp_path)
    assert result.returncode == 1, failure(result)
    assert "Traceback" not in result.stderr
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith(f"error: --model_name: listing {model_uri} failed") and "cannot reach the S3 endpoint" in last


def test_a_wrong_bucket_in_s3_save_path_stops_before_the_model_loads(moto_s3, tmp_path):
    out = tmp_path / "out"
    start = time.monotonic()
    # A model folder that does not exist: reaching the model-loading phase would fail differently.
    result = run_cli(s3_flags(tmp_path / "no-model", out, "s3://typo-bucket/runs/r1", 2, tmp_path / "cache"), tmp_path)
    elapsed = time.monotonic() - start
    assert result.returncode == 1, failure(result)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert errors[0].startswith("error: --s3_save_path: ") and "typo-bucket" in errors[0]
    assert "no-model" not in result.stderr
    assert elapsed < 30  # seconds, imports included (under 10 on an idle machine)
