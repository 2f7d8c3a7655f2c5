"""Preemption: SIGTERM, SIGUSR1 and SIGINT end a run with a checkpoint of the step they arrived in.

Slurm and Beaker preempt with SIGTERM (our sbatch asks for SIGUSR1 300 s before the time limit), and Ctrl-C is
SIGINT. Without this a run died at once and lost up to ``--save_steps`` steps.

- Before training begins (flags, data, model loading) :func:`install_early` makes SIGTERM and SIGUSR1 raise
  :class:`Preempted` (SIGINT raises Python's KeyboardInterrupt): nothing to save, the CLI exits with one line.
- During training :class:`StopRequest` (installed by :class:`PreemptionCallback` when training begins)
  records the first signal and logs one line. At the end of the optimizer step every rank agrees (an
  all-reduce: the signal may have reached only some of them) and the Trainer saves a checkpoint of that step
  and stops; a signal that arrives during a save stops the run right after it. With ``--s3_save_path`` the
  upload gets until ``upload_timeout_s`` after the signal (S3SyncCallback.set_deadline).
- A second signal exits at once (status 128 + its number), without saving. A second SIGTERM or SIGUSR1 less
  than :data:`DUPLICATE_WINDOW_S` after the first counts as the same request: a cluster that signals every
  process of a job, and a launcher (torchrun) that forwards the signal it got, deliver it twice.

The CLI turns a stopped run into exit status 75 (olmocr_rl.launch.status.PREEMPTED), which the launchers
map to a requeue (Slurm) or a preempted task (Beaker).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from transformers import TrainerCallback

from olmocr_rl.ranks import is_main_process

logger = logging.getLogger(__name__)

__all__ = ["DUPLICATE_WINDOW_S", "PreemptionCallback", "Preempted", "StopRequest", "finish_preempted", "install_early",
           "save_after_failure", "uploads", "wait_for_uploads"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
DUPLICATE_WINDOW_S = 5.0


class Preempted(BaseException):
    """SIGTERM or SIGUSR1 arrived before training began (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_preempted(signum, frame):
    raise Preempted(signum)


def install_early() -> None:
    """SIGTERM and SIGUSR1 raise :class:`Preempted` until training begins (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, _raise_preempted)


def _say(message: str) -> None:
    (logger.warning if is_main_process() else logger.info)(message)


class StopRequest:
    """The first stop signal of a run: which, when, and during which step; then the step all ranks stopped at."""

    def __init__(self):
        self.signal_name: str | None = None
        self.received_at: float | None = None
        self.agreed_step: int | None = None  # the step every rank saved and stopped at
        self.state = None  # the TrainerState, for the step a signal arrived in
        self.in_step = False  # between the Trainer's step begin and step end (else: logging, saving, evaluating)
        self.hooks: list = []  # called (no arguments) when the first signal arrives, in the signal handler

    @property
    def asked(self) -> bool:
        return self.signal_name is not None

    def install(self) -> bool:
        """Handle SIGTERM, SIGUSR1 and SIGINT from now on (main thread only); False when it could not."""
        if threading.current_thread() is not threading.main_thread():
            logger.warning("stop signals are not handled: training runs outside the main thread")
            return False
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)
        return True

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is None:
            self.signal_name, self.received_at = name, time.monotonic()
            done = self.state.global_step if self.state is not None else 0
            when = (f"during step {done + 1}: finishing it, then saving checkpoint-{done + 1}" if self.in_step else
                    f"after step {done}: saving checkpoint-{done} if that save is under way, else finishing step "
                    f"{done + 1} and saving it")
            _say(f"{name} received {when}, then stopping (a second signal exits at once, without saving)")
            for hook in self.hooks:
                hook()
            return
        if signum != signal.SIGINT and time.monotonic() - self.received_at < DUPLICATE_WINDOW_S:
            return  # the same request delivered twice (the cluster and the launcher both forward it)
        sys.stdout.flush()
        print(f"second stop signal ({name}): exiting at once, without saving", file=sys.stderr, flush=True)
        os._exit(128 + signum)


def _anyone(flag: bool, args) -> bool:
    """True on every rank when ``flag`` is true on any (an all-reduce when several processes train)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    device = getattr(args, "device", None)
    if dist.get_backend() != "nccl" or device is None:
        device = "cpu"
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


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
        self.request.state = state
        self.request.install()

    def on_step_begin(self, args, state, control, **kwargs):
        self.request.in_step = True

    def on_step_end(self, args, state, control, **kwargs):
        self.request.in_step = False
        if self.request.agreed_step is None and _anyone(self.request.asked, args):
            control.should_save = True
            control.should_training_stop = True
            self._agree(state)

    def on_save(self, args, state, control, **kwargs):
        if self.request.agreed_step is None and _anyone(self.request.asked, args):  # arrived during this save
            control.should_training_stop = True
            self._agree(state)

    def _agree(self, state) -> None:
        self.request.agreed_step = state.global_step
        if not self.request.asked:  # another rank got the signal
            self.request.signal_name, self.request.received_at = "a stop signal (on another rank)", time.monotonic()
        self._bound_uploads()

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
    if is_main_process(trainer.state) or not uploaded:
        logger.warning("stopped by %s after step %d: %s; exiting with status %d (--resume_from_checkpoint goes on "
                       "from step %d)", request.signal_name, step, where, exit_status, step)
    if not uploaded:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_status)
    return exit_status


def save_after_failure(trainer) -> str:
    """After a failure outside the model (a page's PDF gone), save the steps done so far, on one process (several
    cannot join a save from here); what was done, in words. The weights are those of the last whole step: the
    data of a step is read before any of its updates."""
    from pathlib import Path

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
