"""What a run resumes from, whether it has anything left to do, and whether its output folder is its own.

* ``choose_checkpoint(output_dir, s3_save_path)`` -> the newest checkpoint that verifies, on this disk or on
  S3, whichever is newer (read only: nothing is downloaded yet); ``fetch(choice)`` pulls it when it is on S3;
* ``plan_resume(flag, ...)`` -> what ``--resume_from_checkpoint`` (bare, or a path) points at, checked;
* ``finished_at(state, max_steps, num_train_epochs)`` -> whether that checkpoint already ends the run;
* ``missing_state_problem(choice)`` -> a checkpoint without optimizer or scheduler state, said in one line;
* ``previous_run(output_dir)`` / ``clear_previous_run(output_dir)`` -> another run's files in the folder;
* ``final_model_problem(output_dir)`` / ``remote_final_model_problem(s3)`` -> whether the run's final model is whole;
* ``prepare_start(...)`` -> all of it for the training CLI, in order, with the run's lock on its folder;
* ``resolve_resume_checkpoint`` / ``resume_checkpoint``: the choice in one call (the library's API).

Verification is storage.checkpoints' (``local_checkpoint_problem``: manifests with sizes and checksums, each
file's own format) and, on S3, ``check_remote_checkpoint`` (manifests and sizes, a trainer_state.json that
parses). Every checkpoint skipped on the way is logged with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from olmocr_rl.ranks import is_main_process
from olmocr_rl.storage import s3
from olmocr_rl.storage.checkpoints import (
    HISTORY_FILE,
    TRAINER_STATE,
    RemoteCheckpoint,
    Topology,
    check_layout,
    checkpoint_step,
    current_topology,
    local_checkpoint_files,
    local_checkpoint_problem,
    local_checkpoints,
    missing_training_state,
    newest_remote_checkpoint,
    pull_checkpoint,
    restore_history,
    trim_history,
)
from olmocr_rl.storage.files import RUN_LOCK, FolderInUseError, describe_write_failure, hold_run_lock
from olmocr_rl.storage.s3 import StorageError, explain, folder_prefix, parse_s3_uri, storage_errors
from olmocr_rl.storage.verify import read_manifests

logger = logging.getLogger(__name__)

#: What a run leaves in its output folder besides checkpoint-<N>/ (what --overwrite_output_dir removes).
RUN_FILES = (HISTORY_FILE, "run_summary.json", "completions")


@dataclass(frozen=True)
class ResumeChoice:
    """The checkpoint a run resumes from: where it is (or will be, once pulled) here, its step and trainer state,
    its files, and the S3 checkpoint to pull (None when it is on this disk)."""

    folder: Path
    step: int
    state: dict
    files: frozenset[str]
    remote: RemoteCheckpoint | None = None

    def where(self) -> str:
        return self.remote.uri if self.remote is not None else str(self.folder)


def _local_choice(folder: Path) -> ResumeChoice:
    state = json.loads((folder / TRAINER_STATE).read_text())
    return ResumeChoice(folder, int(state["global_step"]), state, frozenset(local_checkpoint_files(folder)))


def _newest_local(output_dir: Path) -> tuple[ResumeChoice | None, list[str]]:
    """The newest local checkpoint that verifies, and a line for each newer damaged one skipped (every skip is
    logged). Damaged: it has the trainer_state.json that only a whole save writes (last), yet fails; a folder
    without one is a save cut short (or another machine's share of a checkpoint), not damage."""
    damaged = []
    for _step, path in local_checkpoints(output_dir):
        problem = local_checkpoint_problem(path)
        if problem is None:
            return _local_choice(path), damaged
        if (path / TRAINER_STATE).is_file():
            damaged.append(f"{path.name}: {problem}")
        logger.warning("skipping checkpoint %s: %s", path, problem)
    return None, damaged


def choose_checkpoint(output_dir: str | os.PathLike, s3_save_path: str | None = None,
                      topology: Topology | None = None) -> ResumeChoice | None:
    """The newest checkpoint that verifies, here or on S3, or None (nothing to resume: start fresh).

    One machine: the newest local checkpoint that verifies, unless S3 holds a newer one that is whole (then
    that one; at the same step the local copy, nothing to download). When S3 cannot be read it is the local
    checkpoint, with a warning, and a StorageError when there is none. Several machines with ``s3_save_path``:
    S3's newest whole checkpoint (every node's manifest and files there), so all machines take the same
    one whatever their disks hold, else the local disk's. Raises CheckpointMismatchError for a checkpoint
    saved by another world size or engine, and StorageError when the local checkpoints that were saved whole
    are all damaged and S3 has none either (starting over would silently throw the run away).
    """
    output, topology = Path(output_dir), topology or current_topology()
    local, skipped = _newest_local(output)
    remote = None
    if s3_save_path:
        several = topology.num_machines > 1
        newer_than = -1 if several or local is None else local.step
        try:
            remote = newest_remote_checkpoint(s3_save_path, topology, newer_than=newer_than, damaged=skipped)
        except StorageError as exc:
            if local is None or several:
                raise
            logger.warning("%s; resuming from the local %s (S3 may hold a newer checkpoint)", exc, local.folder)
    if remote is not None:
        check_layout(remote.uri, remote.manifests, topology)
        return ResumeChoice(output / remote.name, remote.step, remote.state, frozenset(remote.files), remote)
    if local is not None:
        check_layout(str(local.folder), read_manifests(local.folder)[0], topology)
        return local
    if skipped:
        where = f"{output}" + (f" (nor on {s3_save_path})" if s3_save_path else "")
        fix = ("restore one, or start over with --overwrite_output_dir" if not s3_save_path else
               "resume from one you restored (--resume_from_checkpoint PATH), or start over elsewhere (another "
               "--s3_save_path and --output_dir; nothing on S3 is written over)")
        raise StorageError(f"no checkpoint in {where} can be resumed from ({'; '.join(skipped)}): {fix}")
    return None


def complete_mirror(output_dir: str | os.PathLike, s3_save_path: str):
    """A finished run requeued on its disk: upload to ``s3_save_path`` what this disk holds and S3 lacks (or holds
    older or of another size) -- the final model, summary and checkpoints the last mirror could not send --, never
    deleting anything there; the ``SyncResult``. StorageError when S3 still cannot take them (after retries)."""
    from olmocr_rl.storage.mirror import S3Mirror

    if not Path(output_dir).is_dir():
        from olmocr_rl.storage.mirror import SyncResult

        return SyncResult()
    return S3Mirror(output_dir, s3_save_path, delete=False).sync()


def fetch(choice: ResumeChoice) -> Path:
    """The chosen checkpoint on this disk: pulled from S3 first when it is there (then verified here)."""
    if choice.remote is None:
        return choice.folder
    path = pull_checkpoint(choice.remote, choice.folder.parent)
    problem = local_checkpoint_problem(path)
    if problem:
        raise StorageError(f"{choice.remote.uri} was pulled into {path} but does not verify there ({problem}); "
                           "pull it again (rerun), or resume from another checkpoint (--resume_from_checkpoint PATH)")
    return path


def plan_resume(flag, output_dir: str | os.PathLike, s3_save_path: str | None = None,
                topology: Topology | None = None) -> ResumeChoice | None:
    """What ``--resume_from_checkpoint`` points at: None (falsy flag, or nothing found), the choice of
    :func:`choose_checkpoint` (bare flag), or the checkpoint PATH given, verified and its layout checked
    (StorageError with the reason when it does not verify)."""
    if not flag:
        return None
    if flag is True:
        return choose_checkpoint(output_dir, s3_save_path, topology)
    folder = Path(flag)
    # Another world size or engine: one line here, not a failure deep inside the Trainer's load.
    check_layout(str(folder), read_manifests(folder)[0], topology or current_topology())
    problem = local_checkpoint_problem(folder)
    if problem:
        raise StorageError(f"{folder} cannot be resumed from: {problem}; pick another checkpoint, or pass the bare "
                           "flag to take the newest one that verifies")
    return _local_choice(folder)


def finished_at(state: dict, max_steps: int, num_train_epochs: float) -> bool:
    """Whether a checkpoint's trainer state already ends this run: ``max_steps`` reached (when > 0), else the last
    of ``num_train_epochs`` epochs done (the checkpoint's own step count for them reached)."""
    step = int(state.get("global_step", 0))
    if max_steps > 0:
        return step >= max_steps
    epoch = float(state.get("epoch") or 0.0)
    planned = int(state.get("max_steps") or 0)
    return planned > 0 and step >= planned and epoch + 1e-6 >= num_train_epochs


def missing_state_problem(choice: ResumeChoice) -> str | None:
    """One line when the checkpoint has no optimizer or scheduler state (a resume would restart Adam's moments and
    the learning-rate schedule), else None."""
    missing = missing_training_state(choice.files)
    if not missing:
        return None
    return (f"{choice.where()} has no {' or '.join(missing)} (saved with save_only_model, or deleted): resuming "
            "from it would restart the optimizer's state" + (" and the learning-rate schedule" if
                                                               "scheduler.pt" in missing else ""))


def start(choice: ResumeChoice, output_dir: str | os.PathLike, s3_save_path: str | None = None) -> str:
    """Pull the chosen checkpoint when it is on S3, make the run's history end at its step (main process); its path."""
    path = fetch(choice)
    logger.info("resuming from %s", path)
    if is_main_process():
        restore_history(path, output_dir, s3_save_path)
    return str(path)


def previous_run(output_dir: str | os.PathLike, s3_save_path: str | None = None) -> str | None:
    """What an earlier run left where a new run (not resuming) would write, in words; None when nothing.

    Locally: checkpoint-<N>/ folders, or the run's history and summary. On S3: checkpoint-<N>/ prefixes under
    ``s3_save_path`` (a later resume would take them for this run's). StorageError when S3 cannot be listed.
    """
    output = Path(output_dir)
    found = [path.name for _step, path in local_checkpoints(output)]
    found += [name for name in RUN_FILES[:2] if (output / name).is_file()]
    if found:
        return f"--output_dir {output} already holds an earlier run's {_names(found)}"
    if s3_save_path:
        names = remote_checkpoint_names(s3_save_path)
        if names:
            return f"--s3_save_path {s3_save_path} already holds an earlier run's {_names(names)}"
    return None


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _list_top(s3_save_path: str) -> tuple[str, dict]:
    """(the prefix as a folder, one ``list_objects_v2`` page of what sits right under it); StorageError naming the
    URI and the fix when S3 cannot be read."""
    bucket, prefix = parse_s3_uri(s3_save_path)
    folder = folder_prefix(prefix)
    client = None
    try:
        client = s3.make_s3_client()
        return folder, client.list_objects_v2(Bucket=bucket, Prefix=folder, Delimiter="/")
    except storage_errors() as exc:
        raise explain(exc, "listing", s3_save_path, client) from exc


def remote_checkpoint_names(s3_save_path: str) -> list[str]:
    """The ``checkpoint-<N>`` prefixes right under ``s3_save_path``, newest first (one listing request)."""
    folder, response = _list_top(s3_save_path)
    names = [entry["Prefix"][len(folder):].rstrip("/") for entry in response.get("CommonPrefixes", [])]
    return sorted((n for n in names if checkpoint_step(n) is not None), key=checkpoint_step, reverse=True)


def clear_previous_run(output_dir: str | os.PathLike) -> list[str]:
    """Remove an earlier run's checkpoints, history, summary and completions from ``output_dir``; what went."""
    output = Path(output_dir)
    removed = []
    for _step, path in local_checkpoints(output):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path.name)
    for name in RUN_FILES:
        path = output / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()
        else:
            continue
        removed.append(name)
    return removed


def drop_stale_history(output_dir: str | os.PathLike) -> int:
    """A fresh start after ``--resume_from_checkpoint`` found nothing: records an earlier start logged before it
    saved any checkpoint are trained again now, so they go (else each step would appear twice)."""
    _kept, dropped = trim_history(Path(output_dir) / HISTORY_FILE, 0)
    if dropped:
        logger.info("%s: dropped %d records of an earlier start that saved no checkpoint", HISTORY_FILE, dropped)
    return dropped


# ---- a training run's start -----------------------------------------------------------------------------


class AlreadyFinished(Exception):
    """The checkpoint to resume from already ends the run: ``head`` says where, the message adds that nothing
    was written."""

    def __init__(self, head: str):
        super().__init__(f"{head}: nothing to train, nothing written; raise --max_steps (or --num_train_epochs) to "
                         "train further")
        self.head = head


class FinalModelMissing(Exception):
    """The run trained to its last step (``checkpoint``, on this disk, pulled when it was on S3) but its final model
    is missing or incomplete (``problem``): it is to be written from that checkpoint, then mirrored."""

    def __init__(self, head: str, checkpoint: str, step: int, problem: str):
        super().__init__(f"{head}, but {problem}")
        self.head, self.checkpoint, self.step, self.problem = head, checkpoint, step, problem


#: What the final save writes last (after the model and processor): a run whose summary is there finished.
SUMMARY = "run_summary.json"


def final_model_problem(output_dir: str | os.PathLike) -> str | None:
    """Why ``output_dir`` holds no whole final model (None when it does): its summary, written last, missing or not
    JSON; no weights at its top (a model, shards, or an adapter); a weights file that its own format says was cut
    short."""
    from olmocr_rl.storage.checkpoints import has_model_weights
    from olmocr_rl.storage.verify import format_problem

    output = Path(output_dir)
    names = sorted(path.name for path in output.iterdir() if path.is_file()) if output.is_dir() else []
    for name in names:
        problem = format_problem(output / name, name) if name.endswith((".safetensors", ".json")) else None
        if problem:
            return f"its final model in {output} is incomplete ({problem})"
    if SUMMARY not in names:
        what = "its final model in {} is incomplete" if has_model_weights(names) else "{} has no final model"
        return f"{what.format(output)} ({SUMMARY}, which the final save writes last, is missing)"
    if not has_model_weights(names):
        return f"its final model in {output} is incomplete (no weights beside {SUMMARY})"
    return None


def remote_final_model_problem(s3_save_path: str) -> str | None:
    """The same on S3: ``s3_save_path`` holds the summary and whole weights at its top (None), or why not (S3 that
    cannot be read is a reason too: the final model is then written here and mirrored)."""
    from olmocr_rl.storage.checkpoints import has_model_weights

    try:
        folder, response = _list_top(s3_save_path)
    except StorageError as exc:
        return f"S3 cannot be read ({exc})"
    names = {entry["Key"][len(folder):] for entry in response.get("Contents", [])}
    if SUMMARY not in names or not has_model_weights(names):
        return f"{s3_save_path} has no whole final model"
    return None


class StartError(StorageError):
    """A run cannot start as asked; the message is the whole line (it names the flag and the fix)."""


def prepare_start(flag, output_dir: str | os.PathLike, s3_save_path: str | None = None, *, max_steps: int = -1,
                  num_train_epochs: float = 1.0, allow_partial_resume: bool = False,
                  overwrite_output_dir: bool = False) -> str | None:
    """Everything a training run checks before it loads anything, in order; the checkpoint to resume from or None.

    1. what ``--resume_from_checkpoint`` points at (:func:`plan_resume`); AlreadyFinished when that checkpoint
       ends the run (:func:`finished_at`) and its final model is whole (:func:`final_model_problem`, here or on
       S3): nothing is written, locally or on S3. When the final model is not whole, the steps below run and
       FinalModelMissing (with the checkpoint, pulled) comes at the end instead of the checkpoint;
    2. the run's lock on ``output_dir`` and, with ``s3_save_path``, its lease on that prefix (global main process,
       storage.lease): another live run in either is a StartError naming it;
    3. nothing to resume: a new run must find no earlier run's files (:func:`previous_run`), unless resuming
       was asked (an earlier start that saved nothing: its history goes) or ``overwrite_output_dir`` (the local
       files go; S3 is never deleted from, so a prefix holding checkpoints is still an error);
    4. a checkpoint without optimizer or scheduler state is a StartError unless ``allow_partial_resume``;
    5. the checkpoint pulled when it is on S3, the history made to end at its step (:func:`start`).
    """
    try:
        choice = plan_resume(flag, output_dir, s3_save_path)
        unfinished = None  # the checkpoint is the run's last step, but its final model is not whole
        if choice is not None and finished_at(choice.state, max_steps, num_train_epochs):
            unfinished = _final_problem(output_dir, s3_save_path)
            if unfinished is None:
                raise AlreadyFinished(f"already finished at step {choice.step} ({choice.where()})")
        if is_main_process():
            _lock(output_dir)
            if s3_save_path:
                _claim_prefix(s3_save_path)
        if choice is None:
            _fresh_start(flag, output_dir, s3_save_path, overwrite_output_dir)
            return None
        problem = missing_state_problem(choice)
        if problem and not allow_partial_resume:
            raise StartError(f"--resume_from_checkpoint: {problem}; pass --allow_partial_resume to resume the weights "
                             "anyway, or resume from another checkpoint (--resume_from_checkpoint PATH)")
        if problem:
            logger.warning("--allow_partial_resume: %s", problem)
        path = start(choice, output_dir, s3_save_path)
        if unfinished:
            raise FinalModelMissing(f"trained to its last step {choice.step} ({choice.where()})", path, choice.step,
                                    unfinished)
        return path
    except FolderInUseError as exc:
        raise StartError(f"--output_dir {exc}: wait for it to end, or choose another --output_dir") from None
    except StartError:
        raise
    except StorageError as exc:  # resuming was asked for and cannot be done as asked: starting over is wrong
        raise StartError(f"--resume_from_checkpoint: {exc}") from None


def _final_problem(output_dir, s3_save_path: str | None) -> str | None:
    """Why a run at its last step still lacks its final model, or None when it is whole: here, or on S3 when this
    disk holds none of it (a fresh machine; one whose copy is incomplete writes it again and mirrors it)."""
    local = final_model_problem(output_dir)
    if local is None:
        return None
    fresh = not (Path(output_dir) / SUMMARY).exists() and not any(Path(output_dir).glob("*.safetensors"))
    if s3_save_path and fresh and remote_final_model_problem(s3_save_path) is None:
        return None
    return local


def _lock(output_dir) -> None:
    try:
        hold_run_lock(output_dir)
    except OSError as exc:  # a folder this user cannot write in (read-only, another owner)
        reason = describe_write_failure(exc, Path(output_dir) / RUN_LOCK, None) or str(exc)
        raise StartError(f"--output_dir {output_dir}: cannot write there ({reason}); choose a folder this run can "
                         "write in") from None


def _claim_prefix(s3_save_path: str) -> None:
    """The run's lease on its S3 prefix (storage.lease): another live run there is a StartError naming it."""
    from olmocr_rl.storage.lease import LeaseHeldError, acquire_lease

    try:
        acquire_lease(s3_save_path)
    except LeaseHeldError as exc:
        raise StartError(f"--s3_save_path {exc}") from None
    except StorageError as exc:
        raise StartError(f"--s3_save_path: {exc}") from None


def _fresh_start(flag, output_dir, s3_save_path: str | None, overwrite: bool) -> None:
    from olmocr_rl.ranks import is_local_main_process

    if flag:
        where = f"{output_dir}" + (f" or {s3_save_path}" if s3_save_path else "")
        logger.info("--resume_from_checkpoint: no checkpoint in %s, starting fresh", where)
        if is_main_process():
            drop_stale_history(output_dir)
        return
    try:
        if overwrite:
            if is_local_main_process():
                removed = clear_previous_run(output_dir)
                if removed:
                    logger.info("--overwrite_output_dir: removed %s from %s", ", ".join(removed), output_dir)
            found = previous_run(output_dir, s3_save_path) if s3_save_path else None
            if found:
                raise StartError(f"{found}: choose another --s3_save_path (--overwrite_output_dir never deletes on S3)")
            return
        found = previous_run(output_dir, s3_save_path)
    except StartError:
        raise
    except StorageError as exc:
        raise StartError(f"--s3_save_path: {exc}") from None
    if found:
        raise StartError(f"{found}: pass --resume_from_checkpoint to continue it, choose another --output_dir"
                         f"{' and --s3_save_path' if s3_save_path else ''}, or pass --overwrite_output_dir to "
                         "start over")


# ---- the library's one-call API ------------------------------------------------------------------------


def resolve_resume_checkpoint(
    output_dir: str | os.PathLike, s3_save_path: str | None = None, topology: Topology | None = None,
) -> Path | None:
    """The checkpoint to resume from, on this disk (pulled from S3 when that is where the newest one is), or None
    (start fresh): :func:`choose_checkpoint`, then :func:`fetch`."""
    choice = choose_checkpoint(output_dir, s3_save_path, topology)
    if choice is None:
        return None
    where = f", pulled from {s3_save_path}" if choice.remote is not None else " (local)"
    path = fetch(choice)
    logger.info("resuming from %s%s", path, where)
    return path


def resume_checkpoint(
    flag, output_dir: str | os.PathLike, s3_save_path: str | None = None,
) -> str | None:
    """What ``--resume_from_checkpoint`` resumes from: None (start fresh) or a checkpoint folder on this disk.

    ``flag`` is the flag's value: falsy (do not resume), True (:func:`choose_checkpoint`; none found starts
    fresh) or a path (verified, its layout checked). On the main process the run's metrics.jsonl is then made
    to end at the checkpoint's step (:func:`restore_history`). Raises what :func:`plan_resume` raises.
    """
    choice = plan_resume(flag, output_dir, s3_save_path)
    if choice is None:
        if flag:
            where = f"{output_dir}" + (f" or {s3_save_path}" if s3_save_path else "")
            logger.info("--resume_from_checkpoint: no checkpoint in %s, starting fresh", where)
        return None
    return start(choice, output_dir, s3_save_path)
