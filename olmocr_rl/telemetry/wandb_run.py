"""Every W&B concern of a run, on the global main process: credentials checked before the model loads,
the run started (or continued after a resume), olmOCR's metric names, the run id in every checkpoint.

**Credentials.**

``--report_to wandb`` is the default. Without a key (and with W&B online), ``wandb.init`` stops with
``UsageError: No API key configured`` (or, at a terminal, waits at an interactive prompt), and it is
called only once the model is loaded. :func:`wandb_credentials_problem` asks W&B's own lookup the
same question up front, without side effects and without the network: W&B's mode (``WANDB_MODE``
or W&B's settings files: offline, dryrun and disabled need no key), then the credentials W&B would
use for its server (``WANDB_BASE_URL`` or the settings' ``base_url``): ``WANDB_API_KEY``,
``WANDB_IDENTITY_TOKEN_FILE``, the netrc entry for that host (``~/.netrc`` or ``$NETRC``), or an
``api_key`` in W&B's settings files.

**The run.** :func:`init_wandb` starts W&B with the full flag set as its config; a run resumed from a
checkpoint that holds a W&B run id (``wandb_run.json``, written by :func:`wandb_run_id_callback` into every
checkpoint, read by :func:`read_wandb_run`) continues that run, on this machine or a fresh one.

**Metric names.** :func:`olmocr_wandb_callback` is transformers' W&B callback with olmOCR's names: the
``bench_reward/...`` keys go to W&B at top level, as olmOCR logs them, so its dashboards carry over;
every other key keeps the Trainer's ``train/`` prefix.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from olmocr_rl.ranks import is_main_process

logger = logging.getLogger(__name__)

WANDB_RUN_FILE = "wandb_run.json"
WAYS_OUT = ("run `wandb login`, set WANDB_API_KEY, log offline with WANDB_MODE=offline (upload later with "
            "`wandb sync`), or pass --report_to none")


def wandb_credentials_problem() -> str | None:
    """None when W&B needs no key or has one; otherwise a one-line message naming the ways out.

    Loads W&B's settings (environment and settings files) into its process-wide singleton, as
    ``wandb.init`` would: set any ``WANDB_*`` environment variable before calling this.
    """
    try:
        from wandb.errors import AuthenticationError
    except Exception as exc:  # noqa: BLE001 - no usable wandb: wandb.init reports it
        return _cannot_check(exc)
    try:
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib import wbauth

        settings = wandb_setup.singleton().settings
        if settings._noop or settings._offline:  # disabled, or offline / dryrun: no server, no key
            return None
        host = wbauth.HostUrl(settings.base_url, app_url=settings.app_url)
        auth = wbauth.authenticate_session(host=host, source="olmocr_rl", prompt=False, update_session=False)
    except AuthenticationError as exc:  # a key was found but is malformed
        return f"--report_to wandb: {' '.join(str(exc).split())}; {WAYS_OUT}"
    except Exception as exc:  # noqa: BLE001 - another wandb version's internals: wandb.init reports any problem
        return _cannot_check(exc)
    if auth is not None:
        return None
    return (f"--report_to wandb: no W&B API key found for {host.url} (looked at WANDB_API_KEY, the netrc "
            f"file and W&B's settings); {WAYS_OUT}")


def _cannot_check(exc: Exception) -> None:
    logger.warning("could not check the W&B credentials before loading the model (%s: %s); wandb.init will",
                   type(exc).__name__, exc)


def init_wandb(cfg, resume: str | None = None) -> str | None:
    """Start W&B (global main process only) with ``cfg.as_dict()`` as its config; a problem as one line.

    A run resumed from a checkpoint that holds a W&B run id continues that run; a fresh start (no
    checkpoint) begins a new one.
    """
    if not is_main_process():
        return None
    import wandb
    from wandb.errors import Error as WandbError

    previous = read_wandb_run(resume)
    run_id = previous["id"] if previous else None
    if run_id:
        logger.info("W&B: continuing run %s (its id is stored in %s)", run_id, resume)
    try:
        wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name, config=cfg.as_dict(),
                   dir=cfg.output_dir, id=run_id, resume="allow")
    except WandbError as exc:  # credentials the early check could not judge (another wandb version), server errors
        return f"--report_to wandb: W&B could not start a run ({' '.join(str(exc).split())}); {WAYS_OUT}"
    return None


def read_wandb_run(checkpoint: str | os.PathLike | None) -> dict | None:
    """``{"id": ..., "project": ...}`` stored in ``checkpoint``, or None (no file, unreadable)."""
    if checkpoint is None:
        return None
    path = Path(checkpoint) / WANDB_RUN_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("id"), str) and record["id"] else None


def wandb_run_id_callback():
    """A callback that writes the W&B run's id into every checkpoint (global main process; add it before
    the S3 mirror's callback, so the mirror sends it). transformers is imported only here."""
    from transformers import TrainerCallback

    class WandbRunIdCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if not is_main_process(state):
                return
            import wandb

            run = wandb.run
            if run is None:
                return
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if not folder.is_dir():
                return
            from olmocr_rl.storage.files import write_json_atomic

            write_json_atomic(folder / WANDB_RUN_FILE, {"id": run.id, "project": run.project, "name": run.name})

    return WandbRunIdCallback()


#: Key prefixes that W&B gets at top level (olmOCR's names) instead of under the Trainer's ``train/``.
TOP_LEVEL_WANDB_PREFIXES = ("bench_reward/",)


def olmocr_wandb_callback():
    """A ``WandbCallback`` whose ``bench_reward/...`` keys land at top level, in the same W&B step."""
    from transformers.integrations import WandbCallback

    class OlmOCRWandbCallback(WandbCallback):
        def on_log(self, args, state, control, model=None, logs=None, **kwargs):
            logs = logs or {}
            top = {k: v for k, v in logs.items() if k.startswith(TOP_LEVEL_WANDB_PREFIXES)}
            if top and self._wandb is not None and state.is_world_process_zero:
                if not self._initialized:
                    self.setup(args, state, model)
                self._wandb.log(top, commit=False)  # committed by the Trainer's log call below
            rest = {k: v for k, v in logs.items() if k not in top}
            super().on_log(args, state, control, model=model, logs=rest, **kwargs)

    return OlmOCRWandbCallback()
