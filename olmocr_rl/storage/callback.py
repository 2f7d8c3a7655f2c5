"""``S3SyncCallback``: a Trainer callback that mirrors ``output_dir`` to S3 after each checkpoint and at the end.

The only storage module that imports transformers; ``olmocr_rl.storage`` loads it on first use of
``S3SyncCallback``.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from transformers import TrainerCallback

from olmocr_rl.ranks import barrier, is_local_main_process
from olmocr_rl.storage.checkpoints import TRAINER_STATE, Topology, checkpoint_step, current_topology, manifest_name
from olmocr_rl.storage.lease import check_held, lost_lease
from olmocr_rl.storage.mirror import DEFAULT_EXCLUDE, HaltedError, S3Mirror, SyncResult
from olmocr_rl.storage.s3 import StorageError, parse_s3_uri
from olmocr_rl.storage.verify import write_manifest

logger = logging.getLogger(__name__)


class S3SyncCallback(TrainerCallback):
    """Mirror ``output_dir`` to ``s3_save_path`` after every checkpoint save and at the end of training.

    Runs on every machine's local main process (``state.is_local_process_zero``): each mirrors its own
    disk to the same prefix, so the files only another machine holds (its ranks' RNG states, optimizer
    and weight shards of a sharded engine) reach S3 too; no shared file system is needed. At each save
    every rank first waits for the others (a barrier: their files are written), then each node's local
    main notes the checkpoint's files and, once they are on S3, uploads its manifest
    ``checkpoint-N/olmocr_rl_manifest/node-R.json`` (files, sizes, world size, engine) last. The resume
    side (:func:`checkpoint_problem`) takes a checkpoint only when every node's manifest and every listed
    file are there. With one process, or a shared ``output_dir``, it is the same mirror as before (plus
    the manifest). On a machine other than the first, whose disk the Trainer does not prune, the
    checkpoints beyond ``save_total_limit`` are pruned here, and so on S3.

    It never raises: a failed sync (server gone, bad credentials) is logged as an error naming the URI,
    the checkpoints stay on local disk, the next save tries again. With ``background=True`` (the
    default) each sync runs in a worker thread so a node does not stall the other ranks during a
    multi-GB upload (long enough to hit collective timeouts); saves that arrive while a sync runs are
    coalesced into one more pass, and ``on_train_end`` waits for the last pass (until the deadline of
    :meth:`set_deadline`, when a stop signal set one). Deletions mirror local pruning but keep remote
    objects this node never had locally (see ``S3Mirror.keep_remote_only``). ``last_result`` /
    ``last_error`` hold the outcome of the latest pass, :meth:`only_local` what is not known to be on S3.
    Call ``sync(wait=True)`` after a final ``save_model`` that happens after ``train()`` returns.

    Nothing is written once the run's S3 lease is lost (storage.lease): each pass on the global main process first
    renews it (:func:`check_held`), and a pass stops before its next write once it is lost or :meth:`halt` was
    called (the other machines, told by the trainer's stop agreement); :attr:`halted` then says why.
    """

    def __init__(
        self,
        s3_save_path: str,
        output_dir: str | os.PathLike,
        retries: int = 3,
        *,
        background: bool = True,
        backoff_s: float = 2.0,
        exclude: Iterable[str] = DEFAULT_EXCLUDE,
        topology: Topology | None = None,
    ):
        parse_s3_uri(s3_save_path)  # a malformed URI is a user error: fail at construction, not hours later
        self.s3_save_path = s3_save_path.rstrip("/") + "/"
        self.output_dir = Path(output_dir)
        self.background = background
        self.topology = topology or current_topology()
        self.mirror = S3Mirror(
            self.output_dir, self.s3_save_path, delete=True, keep_remote_only=True,
            exclude=exclude, retries=retries, backoff_s=backoff_s, halted=self._halted_reason,
        )
        self.last_result: SyncResult | None = None
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._pending = False
        self._worker: threading.Thread | None = None
        self._deadline: float | None = None  # time.monotonic() by which waiting ends (a stop signal's bound)
        self.halted: str | None = None  # why nothing more may be uploaded (the run's S3 lease is lost)

    # Trainer events --------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if is_local_main_process(state):
            self.mirror.remember_local()  # pre-existing local checkpoints are ours to prune remotely

    def on_save(self, args, state, control, **kwargs):
        barrier()  # every rank's files of this checkpoint are written before any node lists them
        if not is_local_main_process(state):
            return
        folder = self.output_dir / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            if self.topology.node_rank > 0:
                self._prune(args, folder)
            if not (folder / manifest_name(self.topology.node_rank)).is_file():  # a trainer without our checkpoint save
                write_manifest(folder, self.topology)
        self.sync(wait=not self.background)

    def on_train_end(self, args, state, control, **kwargs):
        if is_local_main_process(state):
            self.sync(wait=False)
            self.wait()

    def halt(self, reason: str) -> None:
        """From now on nothing more is uploaded or deleted (a pass under way stops before its next write)."""
        if self.halted is None:
            self.halted = reason
            logger.info("S3 sync of %s to %s stopped: %s", self.output_dir, self.s3_save_path, reason)

    def _halted_reason(self) -> str | None:
        lost = lost_lease()
        if lost is not None and self.halted is None:
            self.halt(lost.lost_message())
        return self.halted

    def set_deadline(self, seconds: float) -> None:
        """From now on, waiting for uploads (``on_train_end``, :meth:`wait`) ends after ``seconds`` at most."""
        self._deadline = time.monotonic() + seconds

    def only_local(self) -> list[str]:
        """Files of ``output_dir`` not known to be on S3 as they are now (never uploaded, or changed since)."""
        return self.mirror.unsent()

    def _prune(self, args, newest: Path) -> None:
        """Keep this machine's newest ``save_total_limit`` checkpoints (the Trainer prunes the first machine's
        disk only); skipped when the folder is shared (the first machine's trainer_state.json is here)."""
        limit = getattr(args, "save_total_limit", None)
        if not limit or (newest / TRAINER_STATE).exists():
            return
        steps = sorted((step, path) for path in self.output_dir.iterdir()
                       if path.is_dir() and (step := checkpoint_step(path.name)) is not None)
        for _step, path in steps[:-limit]:
            shutil.rmtree(path, ignore_errors=True)
            logger.info("pruned %s (save_total_limit %d)", path, limit)

    # The work ---------------------------------------------------------------------------------------
    def sync(self, wait: bool = True) -> None:
        """Request a mirror pass; with ``wait`` return only after every requested pass finished.

        No rank check here (the Trainer events do that): call it on each machine's local main process
        (every machine mirrors its own disk; see the class docstring).
        """
        if not self.background:
            self._run_pass()
            return
        with self._lock:
            self._pending = True
            if self._worker is None:
                # Not a daemon: an interpreter exiting after a crash still finishes the upload in flight.
                self._worker = threading.Thread(target=self._drain, name="olmocr_rl-s3-sync", daemon=False)
                self._worker.start()
        if wait:
            self.wait()

    def wait(self) -> bool:
        """Block until the background worker has no pass running or pending (or the deadline of
        :meth:`set_deadline` passes); True when it has none."""
        while True:
            with self._lock:
                worker = self._worker
            if worker is None:
                return True
            left = None if self._deadline is None else self._deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            worker.join(1.0 if left is None else min(left, 1.0))  # a deadline may be set meanwhile (a signal)

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._worker = None
                    return
                self._pending = False
            try:
                self._run_pass()
            except BaseException:  # _run_pass catches Exception; this is KeyboardInterrupt and kin
                with self._lock:
                    self._worker = None
                raise

    def _run_pass(self) -> None:
        if not self.output_dir.is_dir():  # training ended before its first save: nothing to mirror
            logger.info("S3 sync skipped: %s does not exist yet", self.output_dir)
            return
        lost = check_held()  # the lease renewed before anything is written (global main process; storage.lease)
        if lost is not None or self.halted:
            self._halted_reason()
            logger.info("S3 sync of %s skipped: %s", self.output_dir, self.halted)
            return
        try:
            result = self.mirror.sync()
        except HaltedError as exc:  # the lease was lost during the pass: the rest stays local
            logger.info("%s", exc)
            return
        except StorageError as exc:  # never let S3 stop training
            self.last_error = str(exc)
            logger.error("S3 sync of %s to %s failed; training goes on, checkpoints stay on local disk: %s",
                         self.output_dir, self.s3_save_path, exc)
            return
        except Exception as exc:  # noqa: BLE001 - a bug, not S3: logged with its traceback, training still goes on
            self.last_error = f"{type(exc).__name__}: {exc}"
            logger.exception("S3 sync of %s to %s stopped on an unexpected error (a bug in olmocr_rl, not an S3 "
                             "failure; please report it); training goes on, checkpoints stay on local disk",
                             self.output_dir, self.s3_save_path)
            return
        self.last_result, self.last_error = result, None
        logger.info("S3 sync %s -> %s: %s", self.output_dir, self.s3_save_path, result.summary())
