"""When S3 is the only copy (Beaker: the disk goes with the job), in-process against the real S3 server on
loopback: a requeued finished run completes its mirror, a prefix has one run at a time (its lease), a prefix
whose checkpoints are all damaged never starts a run over, and the CLI's start-up refusals are one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_helpers import safetensors_bytes
from s3_server import moto_s3  # noqa: F401  (pytest fixture)
from test_fault_handling import real_checkpoint

from olmocr_rl import grpo_train
from olmocr_rl.storage import sync_dir_to_s3

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
