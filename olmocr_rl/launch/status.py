"""The training CLI's exit statuses, which the launchers act on (docs/storage.md, "Exit statuses").

``python -m olmocr_rl.grpo_train`` exits with:

- ``OK`` (0): trained to the end, the final model saved (and mirrored), or already finished at a resume;
- ``ERROR`` (1): a problem it names in one ``error:`` line (a bad bench folder, a full disk, ...);
- ``BAD_FLAGS`` (2): a flag or flag combination to change;
- ``UNSYNCED`` (74, sysexits' EX_IOERR): trained to the end, but the final mirror to ``--s3_save_path`` failed
  after its retries; the message lists what is only on local disk;
- ``LEASE_LOST`` (77, sysexits' EX_NOPERM): the run's lease on ``--s3_save_path`` was taken over by another run
  (or deleted) while it trained: it uploaded nothing more, saved its step locally and stopped; the message names
  the holder. Not requeued: two runs must not write one prefix;
- ``PREEMPTED`` (75, sysexits' EX_TEMPFAIL): stopped by SIGTERM, SIGUSR1 or SIGINT after saving a checkpoint of
  the step the signal arrived in (or before training began, with nothing to save): start it again with
  ``--resume_from_checkpoint``. The Slurm job requeues itself on it; the Beaker task exits with it;
- ``128 + N``: a second stop signal N, which exits at once without saving.
"""

from __future__ import annotations

OK = 0
ERROR = 1
BAD_FLAGS = 2
UNSYNCED = 74
PREEMPTED = 75
LEASE_LOST = 77

#: Seconds the trainers get to finish their step, save and upload after a launcher passed them a stop signal:
#: torchrun's wait before it kills its workers (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, 30 s by default, too short for
#: a 7B checkpoint), and the latest a Slurm job requeues itself after USR1, which sbatch asks for 300 s before
#: the time limit. The trainer's own upload bound, --preempt_upload_timeout, is 240 s by default.
STOP_GRACE_S = 270

__all__ = ["BAD_FLAGS", "ERROR", "LEASE_LOST", "OK", "PREEMPTED", "STOP_GRACE_S", "UNSYNCED"]
