"""S3 storage for training runs: ``s3://`` model download, checkpoint mirroring, resume.

Split by client (docs/storage.md), all through boto3 (no ``s5cmd`` binary; docs/design.md, "Where
olmocr_rl differs", items 6-7):

* ``s3`` -- URIs, the shared client, explained errors (``StorageError``), listings, the one object download;
* ``cache`` -- ``download_s3_prefix("s3://bucket/models/qwen")`` -> a local folder, cached and reused once
  complete (``--model_name s3://...``);
* ``mirror`` -- ``sync_dir_to_s3(local_dir, "s3://bucket/run/")`` / ``S3Mirror``, like ``s5cmd sync --delete``;
* ``verify`` -- the node manifest (files, sizes, checksums) written last, and what a checkpoint on disk must pass;
* ``checkpoints`` -- complete checkpoints, node manifests, layouts, S3's checkpoints and pulls, the metrics history;
* ``resume`` -- what a run resumes from (the newest checkpoint that verifies, here or on S3), whether it is
  already finished, and whether its output folder holds another run's files (``resolve_resume_checkpoint`` /
  ``resume_checkpoint`` decide it all in one call);
* ``files`` -- atomic JSON writes, the download and run locks, what a failed write says about the disk;
* ``callback`` -- ``S3SyncCallback``, the ``TrainerCallback`` that mirrors ``output_dir`` after each
  checkpoint and at the end, on each machine's main process, and never stops training.

Every public name is importable from here. Only ``callback`` imports transformers, and it is loaded on
first use of ``S3SyncCallback``: ``import olmocr_rl.storage`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from olmocr_rl.storage.cache import CACHE_MARKER, default_cache_root, download_s3_prefix
from olmocr_rl.storage.checkpoints import (
    MANIFEST_DIR,
    TRAINER_STATE,
    CheckpointMismatchError,
    Topology,
    RemoteCheckpoint,
    check_layout,
    checkpoint_problem,
    checkpoint_step,
    current_engine,
    current_topology,
    find_latest_checkpoint,
    has_model_weights,
    is_complete_checkpoint,
    local_checkpoint_problem,
    manifest_name,
    missing_training_state,
    pull_latest_checkpoint_from_s3,
    restore_history,
)
from olmocr_rl.storage.files import FolderInUseError, describe_write_failure, hold_run_lock, write_json_atomic
from olmocr_rl.storage.mirror import (
    DEFAULT_EXCLUDE,
    LocalFile,
    S3Mirror,
    SyncResult,
    is_excluded,
    needs_upload,
    scan_local,
    sync_dir_to_s3,
)
from olmocr_rl.storage.resume import (
    ResumeChoice,
    choose_checkpoint,
    clear_previous_run,
    finished_at,
    plan_resume,
    previous_run,
    resolve_resume_checkpoint,
    resume_checkpoint,
)
from olmocr_rl.storage.s3 import (
    PARTIAL_SUFFIX,
    RemoteObject,
    StorageError,
    check_s3_access,
    make_s3_client,
    parse_s3_uri,
)

if TYPE_CHECKING:
    from olmocr_rl.storage.callback import S3SyncCallback

__all__ = [
    "CACHE_MARKER",
    "DEFAULT_EXCLUDE",
    "MANIFEST_DIR",
    "PARTIAL_SUFFIX",
    "TRAINER_STATE",
    "CheckpointMismatchError",
    "FolderInUseError",
    "LocalFile",
    "RemoteCheckpoint",
    "RemoteObject",
    "ResumeChoice",
    "S3Mirror",
    "S3SyncCallback",
    "StorageError",
    "SyncResult",
    "Topology",
    "check_layout",
    "check_s3_access",
    "checkpoint_problem",
    "checkpoint_step",
    "choose_checkpoint",
    "clear_previous_run",
    "current_engine",
    "current_topology",
    "default_cache_root",
    "describe_write_failure",
    "download_s3_prefix",
    "find_latest_checkpoint",
    "finished_at",
    "has_model_weights",
    "hold_run_lock",
    "is_complete_checkpoint",
    "is_excluded",
    "local_checkpoint_problem",
    "make_s3_client",
    "manifest_name",
    "missing_training_state",
    "needs_upload",
    "parse_s3_uri",
    "plan_resume",
    "previous_run",
    "pull_latest_checkpoint_from_s3",
    "resolve_resume_checkpoint",
    "restore_history",
    "resume_checkpoint",
    "scan_local",
    "sync_dir_to_s3",
    "write_json_atomic",
]


def __getattr__(name: str):
    if name == "S3SyncCallback":  # the one name that needs transformers
        from olmocr_rl.storage.callback import S3SyncCallback

        return S3SyncCallback
    raise AttributeError(f"module 'olmocr_rl.storage' has no attribute {name!r}")
