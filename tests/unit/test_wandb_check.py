"""The W&B key check before the model loads: wandb's own lookup, and a warning (not a traceback) when another
wandb version's internals do not fit (the full matrix of key sources runs in tests/integration/test_cli_e2e.py)."""

from __future__ import annotations

import logging

import pytest

wandb = pytest.importorskip("wandb")

from olmocr_rl.telemetry.wandb_run import wandb_credentials_problem  # noqa: E402


@pytest.fixture(autouse=True)
def online_wandb_settings(monkeypatch):
    """W&B's settings read afresh from an environment without WANDB_MODE (the test command sets offline)."""
    from wandb.sdk import wandb_setup

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr(wandb_setup, "_singleton", None)  # restored afterwards


def test_unexpected_wandb_internals_warn_and_leave_the_check_to_wandb_init(monkeypatch, caplog):
    from wandb.sdk.lib import wbauth

    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)

    def changed_signature(**kwargs):
        raise TypeError("authenticate_session() got an unexpected keyword argument 'prompt'")

    monkeypatch.setattr(wbauth, "authenticate_session", changed_signature)
    with caplog.at_level(logging.WARNING):
        assert wandb_credentials_problem() is None
    assert "could not check the W&B credentials" in caplog.text and "TypeError" in caplog.text


def test_a_malformed_key_is_one_line_naming_the_ways_out(monkeypatch):
    from wandb.errors import AuthenticationError
    from wandb.sdk.lib import wbauth

    def malformed(**kwargs):
        raise AuthenticationError("API key must be 40 characters long,\nyours was 3")

    monkeypatch.setattr(wbauth, "authenticate_session", malformed)
    problem = wandb_credentials_problem()
    assert problem.startswith("--report_to wandb: API key must be 40 characters long, yours was 3; ")
    assert "WANDB_MODE=offline" in problem and "\n" not in problem
