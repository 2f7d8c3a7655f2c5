"""Stop signals, the part that needs no ML library: what SIGTERM, SIGUSR1 and SIGINT do before and during training.

- Before training begins (flags, data, model loading) :func:`install_early` makes SIGTERM and SIGUSR1 raise
  :class:`Preempted` (SIGINT raises Python's KeyboardInterrupt): nothing to save, the CLI exits with one line;
  :func:`restore` puts the handlers back when the run is over (a late SIGTERM or SIGUSR1 then ends the process
  with the status the run said, not as a signal death).
- During training :class:`StopRequest` records the first signal and logs one line; trainer.preemption's
  callback saves the step it arrived in and stops. A second signal exits at once (status 128 + its number),
  without saving. A second SIGTERM or SIGUSR1 less than :data:`DUPLICATE_WINDOW_S` after the first counts as
  the same request: a cluster that signals every process of a job, and a launcher (torchrun) that forwards
  the signal it got, deliver it twice. Once the run said its exit status (:attr:`StopRequest.said_status`), any
  later SIGTERM or SIGUSR1 ends the process with it; after :func:`restore`, from the first exit handler on, they
  are ignored (the interpreter's shutdown would put back death by the signal).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time

from olmocr_rl.ranks import is_main_process

logger = logging.getLogger(__name__)

__all__ = ["DUPLICATE_WINDOW_S", "STOP_SIGNALS", "Preempted", "StopRequest", "install_early", "restore"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
DUPLICATE_WINDOW_S = 5.0


class Preempted(BaseException):
    """SIGTERM or SIGUSR1 arrived before training began (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_preempted(signum, frame):
    raise Preempted(signum)


def install_early() -> dict:
    """SIGTERM and SIGUSR1 raise :class:`Preempted` until training begins (main thread only; elsewhere a no-op).

    Returns the handlers of every stop signal as they were, for :func:`restore` when the run is over (a run
    inside another program, a test, must not leave its handlers behind)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, _raise_preempted)
    return previous


def restore(previous: dict, exit_status: int | None = None) -> None:
    """Put back the handlers :func:`install_early` returned.

    With ``exit_status`` (the status the run decided and said), a SIGTERM or SIGUSR1 whose handler was the
    default (death by the signal) instead ends the process at once with that status: a second signal that comes
    while the process winds down (uploads joined, interpreter shutdown) must not turn a logged "exiting with
    status 75" into a signal death that a launcher reads otherwise."""
    late = []
    for sig, handler in previous.items():
        if exit_status is not None and sig != signal.SIGINT and handler in (None, signal.SIG_DFL):
            signal.signal(sig, _exit_with(exit_status))
            late.append(sig)
        else:
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if late:
        # The interpreter's own shutdown puts back the default action (death by the signal) for every signal with
        # a Python handler, and native libraries tear down after it: from the first exit handler on, these
        # signals are ignored (the status is decided; the process is about to end with it).
        atexit.register(_ignore, late)


def _ignore(signals) -> None:
    for sig in signals:
        with contextlib.suppress(ValueError, OSError):  # not the main thread / not settable: nothing to do
            signal.signal(sig, signal.SIG_IGN)


def _exit_with(status: int):
    def handler(signum, frame):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return handler


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
        self.lease_lost: str | None = None  # why: the run's S3 lease was taken over or deleted (a stop, no upload)
        self.said_status: int | None = None  # the exit status the run logged: a later SIGTERM/SIGUSR1 ends with it

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
            last = int(getattr(self.state, "max_steps", 0) or 0)
            if last and done >= last:  # training is over: the final save and upload are under way
                when = (f"after the last step ({done} of {last}): finishing the final save and its upload (bounded "
                        "by --preempt_upload_timeout)")
            elif self.in_step:
                when = f"during step {done + 1}: finishing it, then saving checkpoint-{done + 1}"
            else:
                when = (f"after step {done}: saving checkpoint-{done} if that save is under way, else finishing step "
                        f"{done + 1} and saving it")
            _say(f"{name} received {when}, then stopping (a second signal exits at once, without saving)")
            for hook in self.hooks:
                hook()
            return
        if self.said_status is not None and signum != signal.SIGINT:  # the run said its status: it ends with it
            _exit_with(self.said_status)(signum, frame)
        if signum != signal.SIGINT and time.monotonic() - self.received_at < DUPLICATE_WINDOW_S:
            return  # the same request delivered twice (the cluster and the launcher both forward it)
        sys.stdout.flush()
        print(f"second stop signal ({name}): exiting at once, without saving", file=sys.stderr, flush=True)
        os._exit(128 + signum)
