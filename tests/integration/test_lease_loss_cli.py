"""A real run of the CLI that loses its S3 lease (another run takes it over after checkpoint-2 went up): it uploads
nothing more, saves its step locally, writes no final model and exits 77 with one line naming the new holder.
The mechanism without the CLI: tests/unit/test_lease_loss_and_final_model.py."""

from __future__ import annotations

import json
import threading

import pytest
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from test_cli_e2e import cli_env
from test_fault_runs import errors, flags, start_cli

from olmocr_rl.storage import local_checkpoint_problem
from olmocr_rl.storage.lease import LEASE_NAME

OTHER = {"run": "other", "job": None, "attempt": None, "host": "node7", "pid": 4242, "started": "2026-01-02 10:00:00",
         "command": "python -m olmocr_rl.grpo_train ..."}


@pytest.mark.slow
def test_a_run_whose_lease_is_taken_over_stops_writing_and_exits_77_in_one_line(moto_s3, tmp_path, tiny_model_dir):
    uri = f"s3://{moto_s3.bucket}/runs/L2"
    out, log = tmp_path / "out", tmp_path / "run.log"
    client = moto_s3.client()
    taken = threading.Event()

    def take_over():  # as another run taking the lease over as stale would
        client.put_object(Bucket=moto_s3.bucket, Key="runs/L2/" + LEASE_NAME, Body=json.dumps(OTHER).encode())
        taken.set()

    # Inside the request that stores checkpoint-2's last object, before it is answered: every upload pass after the
    # one carrying checkpoint-2 (at the latest the pass at the end of training) renews the lease first and finds it
    # taken, however the steps and the uploads interleave on a busy machine. (A test thread that polled for that
    # object raced the uploader: its next pass could renew, upload checkpoints 4 and 6 and end the training first.)
    moto_s3.after_put("runs/L2/checkpoint-2/olmocr_rl_manifest/node-0.json", take_over)
    proc = start_cli([*flags(tiny_model_dir, out, 6), "--s3_save_path", uri, "--cache_dir", tmp_path / "cache"], tmp_path,
                     log, env={**cli_env(tmp_path), **moto_s3.env})
    try:
        assert proc.wait(timeout=600) == 77, log.read_text()[-6000:]
    finally:
        proc.kill()
    text = log.read_text()
    assert taken.is_set() and "Traceback" not in text
    (line,) = errors(text)
    assert line.startswith(f"error: the S3 lease on {uri}/ is no longer this run's: it is held by run other: pid 4242 "
                           "on node7, started 2026-01-02 10:00:00: python -m olmocr_rl.grpo_train ... (renewed "), line
    step = int(line.split("this run stopped after step ")[1].split(" ")[0])
    # Stopped at the step after it saw the loss: at the next upload pass's renewal (checkpoint-4's, or the one at the
    # end of training when the steps outran the mirror on a busy machine), before any final model.
    assert 2 < step <= 6, line
    assert f"; checkpoint-{step} is saved in {out}" in line and "no final model was written" in line
    assert local_checkpoint_problem(out / f"checkpoint-{step}") is None  # whole, locally
    assert not (out / "model.safetensors").exists() and not (out / "run_summary.json").exists()
    remote = {o["Key"][len("runs/L2/"):] for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=moto_s3.bucket, Prefix="runs/L2/") for o in page.get("Contents", [])}
    # The loss is seen at an upload pass's renewal; a pass that began before the takeover may still carry checkpoint-4
    # (fast steps on a busy machine: checkpoints 2 and 4 in one pass). Nothing saved at or after the stop went up.
    uploaded = {int(key.split("/")[0].split("-")[1]) for key in remote if key.startswith("checkpoint-")}
    assert 2 in uploaded and all(s < step for s in uploaded), (uploaded, step)
    assert "model.safetensors" not in remote and "run_summary.json" not in remote
    assert json.loads(client.get_object(Bucket=moto_s3.bucket, Key="runs/L2/" + LEASE_NAME)["Body"].read()) == OTHER
