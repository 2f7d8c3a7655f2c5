"""Preemption: SIGTERM, SIGUSR1 and SIGINT end a run with a checkpoint of the step they arrived in.

Slurm and Beaker preempt with SIGTERM (our sbatch asks for SIGUSR1 300 s before the time limit), and Ctrl-C is
SIGINT (docs/storage.md, "Stop signals and exit statuses"). The signal handling itself
(before training, the first signal, a second one) is trainer.stop_signals; here:

- :class:`PreemptionCallback` (added by trainer.build) installs the :class:`StopRequest` when training
  begins; at the end of the optimizer step every rank agrees (an all-reduce: the signal may have reached only
  some of them) and the Trainer saves a checkpoint of that step and stops; a signal that arrives during a
  save stops the run right after it. With ``--s3_save_path`` the upload gets until ``upload_timeout_s``
  after the signal (S3SyncCallback.set_deadline), an upload already under way included;
- :func:`finish_preempted`: the end of a stopped run (the bounded upload, one line, the exit status);
  :func:`save_after_failure`: a checkpoint of the steps done when a page's data vanished.

The CLI turns a stopped run into exit status 75 (olmocr_rl.launch.status.PREEMPTED), which the launchers
map to a requeue (Slurm) or a preempted task (Beaker).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

from olmocr_rl.ranks import is_main_process
from olmocr_rl.trainer.stop_signals import StopRequest

logger = logging.getLogger(__name__)

__all__ = ["PreemptionCallback", "finish_lease_lost", "finish_preempted", "lease_lost_everywhere", "save_after_failure",
           "uploads", "wait_for_uploads"]


def _anyone(flags: list[bool], args) -> list[bool]:
    """Each flag true on every rank when it is true on any (one all-reduce when several processes train)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return list(flags)
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return list(flags)
    device = getattr(args, "device", None)
    if dist.get_backend() != "nccl" or device is None:
        device = "cpu"
    value = torch.tensor([1 if flag else 0 for flag in flags], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return [bool(v) for v in value.tolist()]


class PreemptionCallback(TrainerCallback):
    """Save and stop at the end of the step a stop signal arrived in (every rank at the same step).

    ``uploads``: the S3SyncCallbacks whose last upload gets ``upload_timeout_s`` from the signal, no more.
    """

    def __init__(self, request: StopRequest | None = None, uploads=(), upload_timeout_s: float = 240.0):
        self.request = request or StopRequest()
        self.uploads = list(uploads)
        self.upload_timeout_s = upload_timeout_s
        self.request.hooks.append(self._bound_uploads)  # also an upload under way when the signal comes

    def on_train_begin(self, args, state, control, **kwargs):
        from olmocr_rl.storage.lease import ON_LOST

        self.request.state = state
        self.request.install()
        ON_LOST.append(self._lease_lost)  # the run's S3 lease (global main process): stop as for a signal

    def on_train_end(self, args, state, control, **kwargs):
        from olmocr_rl.storage.lease import ON_LOST

        if self._lease_lost in ON_LOST:
            ON_LOST.remove(self._lease_lost)

    def _lease_lost(self, lease) -> None:
        self.request.lease_lost = lease.lost_message()

    def on_step_begin(self, args, state, control, **kwargs):
        self.request.in_step = True

    def on_step_end(self, args, state, control, **kwargs):
        self.request.in_step = False
        if self.request.agreed_step is None and self._agreed(args, state):
            control.should_save = True
            control.should_training_stop = True

    def on_save(self, args, state, control, **kwargs):
        if self.request.agreed_step is None and self._agreed(args, state):  # arrived during this save
            control.should_training_stop = True

    def _agreed(self, args, state) -> bool:
        """Whether any rank got a stop signal or lost the S3 lease (an all-reduce); if so every rank stops at this
        step, and with a lost lease no machine uploads anything more."""
        asked, lost = _anyone([self.request.asked, self.request.lease_lost is not None], args)
        if not (asked or lost):
            return False
        self.request.agreed_step = state.global_step
        if lost:
            self.request.lease_lost = self.request.lease_lost or "the run's S3 lease is lost (seen on another machine)"
            for upload in self.uploads:
                upload.halt(self.request.lease_lost)
        if asked and not self.request.asked:  # another rank got the signal
            self.request.signal_name, self.request.received_at = "a stop signal (on another rank)", time.monotonic()
        if asked:
            self._bound_uploads()
        return True

    def _bound_uploads(self) -> None:
        left = self.upload_timeout_s - (time.monotonic() - self.request.received_at)
        for upload in self.uploads:
            upload.set_deadline(max(left, 0.0))


# ---- the end of a stopped run (the training CLI's) -------------------------------------------------------


def uploads(trainer) -> list:
    """This machine's S3 mirrors (S3SyncCallback) on its main process, else none."""
    from olmocr_rl.ranks import is_local_main_process
    from olmocr_rl.storage import S3SyncCallback

    if not is_local_main_process(trainer.state):
        return []
    return [c for c in trainer.callback_handler.callbacks if isinstance(c, S3SyncCallback)]


def wait_for_uploads(trainer) -> bool:
    """This machine's mirror passes done (a stop signal's deadline honoured); True when all finished in time."""
    done = True
    for callback in uploads(trainer):
        callback.sync(wait=False)
        done = callback.wait() and done
    return done


def finish_preempted(trainer, request: StopRequest, s3_save_path: str | None, upload_timeout_s: float,
                     exit_status: int) -> int:
    """A stop signal saved checkpoint-N: its upload waited for (bounded), one line, ``exit_status`` returned; when
    the upload is still running at the deadline the process exits at once with it (the thread would hold it)."""
    step = request.agreed_step
    uploaded = wait_for_uploads(trainer)
    where = f"checkpoint-{step} saved in {trainer.args.output_dir}"
    if s3_save_path:
        failed = [c.last_error for c in uploads(trainer) if c.last_error]
        if not uploaded:
            where += (f"; its upload to {s3_save_path} did not finish within --preempt_upload_timeout "
                      f"{upload_timeout_s:g} s, so it is only on local disk")
        elif failed:
            where += f"; its upload to {s3_save_path} failed ({failed[0]}), so it is only on local disk"
        else:
            where += f" and uploaded to {s3_save_path}"
    request.said_status = exit_status  # from here on a second SIGTERM or SIGUSR1 ends the process with it
    if is_main_process(trainer.state) or not uploaded:
        logger.warning("stopped by %s after step %d: %s; exiting with status %d (--resume_from_checkpoint goes on "
                       "from step %d)", request.signal_name, step, where, exit_status, step)
    if not uploaded:
        from olmocr_rl.storage.lease import release_held

        for upload in uploads(trainer):  # nothing new starts while the lease goes; os._exit skips main's release
            upload.halt(f"--preempt_upload_timeout {upload_timeout_s:g} s passed")
        release_held()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_status)
    return exit_status


def lease_lost_everywhere(trainer, request: StopRequest) -> str | None:
    """After training: why the run's S3 lease is lost, on every rank when it is on any (an all-reduce: the global
    main process alone holds the lease, and the final save is collective), else None."""
    from olmocr_rl.storage.lease import lost_lease

    lost = lost_lease()
    if lost is not None and request.lease_lost is None:
        request.lease_lost = lost.lost_message()
    (anyone,) = _anyone([request.lease_lost is not None], trainer.args)
    if anyone and request.lease_lost is None:
        request.lease_lost = "the run's S3 lease is lost (seen on another machine)"
    return request.lease_lost if anyone else None


def finish_lease_lost(trainer, reason: str, s3_save_path: str, exit_status: int) -> tuple[int, str]:
    """The run lost its S3 lease: every upload halted (one under way stops before its next file), no final model;
    ``(exit_status, the error line's text)``."""
    output_dir = trainer.args.output_dir
    only: list[str] = []
    for upload in uploads(trainer):
        upload.halt(reason)
        upload.wait()
        only += upload.only_local()
    step = trainer.state.global_step
    saved = f"checkpoint-{step}" if (Path(output_dir) / f"checkpoint-{step}").is_dir() else f"step {step}"
    tops = sorted({rel.split("/")[0] for rel in only})
    kept = f" ({', '.join(tops[:6])}{' and more' if len(tops) > 6 else ''} only there)" if tops else ""
    from olmocr_rl.storage.lease import lease_seconds

    return exit_status, (
        f"{reason}: this run stopped after step {step} and wrote nothing more to {s3_save_path}; {saved} is saved in "
        f"{output_dir}{kept}, no final model was written. If that run is live, leave the prefix to it (this run can "
        f"go on from {output_dir} with another --s3_save_path); if it is not, start this one again with "
        f"--resume_from_checkpoint once its lease is released or stale (not renewed for {lease_seconds():.0f} s)")


def save_after_failure(trainer) -> str:
    """After a failure outside the model (a page's PDF gone), save the steps done so far, on one process (several
    cannot join a save from here); what was done, in words. The weights are those of the last whole step: the
    data of a step is read before any of its updates."""
    from olmocr_rl.ranks import world_size

    step = trainer.state.global_step
    folder = Path(trainer.args.output_dir) / f"checkpoint-{step}"
    if step == 0:
        return "no step was done, nothing to save"
    if world_size() > 1:
        return "not saved (several processes cannot join a save from here): resume from the last checkpoint"
    if folder.is_dir():
        return f"{folder.name} (saved before) holds every step done: fix the data and resume with --resume_from_checkpoint"
    trainer._save_checkpoint(trainer.model, trial=None)
    trainer.control = trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)
    wait_for_uploads(trainer)
    return f"saved {folder.name}: fix the data and resume with --resume_from_checkpoint"
