"""Is W&B able to start a run without asking for an API key? Checked before the model loads.

``--report_to wandb`` is the default. Without a key (and with W&B online), ``wandb.init`` stops with
``UsageError: No API key configured`` (or, at a terminal, waits at an interactive prompt), and it is
called only once the model is loaded. :func:`wandb_credentials_problem` asks W&B's own lookup the
same question up front, without side effects and without the network: W&B's mode (``WANDB_MODE``
or W&B's settings files: offline, dryrun and disabled need no key), then the credentials W&B would
use for its server (``WANDB_BASE_URL`` or the settings' ``base_url``): ``WANDB_API_KEY``,
``WANDB_IDENTITY_TOKEN_FILE``, the netrc entry for that host (``~/.netrc`` or ``$NETRC``), or an
``api_key`` in W&B's settings files.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

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
