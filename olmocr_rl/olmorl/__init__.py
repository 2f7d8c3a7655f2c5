"""OlmoRL (OLMo 3 report, section 4.4.1): the objective as pure functions (``objective.py``) and the
GRPOConfig values ``--olmorl`` fixes, with their checks (``settings.py``, light: no torch).

``from olmocr_rl.olmorl import group_advantages, nonzero_signal_groups, olmorl_objective`` works as
before; the objective module (numpy, torch when present) is imported on first use, so that
``olmocr_rl.config`` can read the settings without loading torch.
"""

from __future__ import annotations

_OBJECTIVE_NAMES = ("EPS_HIGH", "EPS_LOW", "STD_EPS", "clipped_token_terms", "group_advantages",
                    "nonzero_signal_groups", "olmorl_objective")

__all__ = list(_OBJECTIVE_NAMES)


def __getattr__(name: str):
    if name in _OBJECTIVE_NAMES:
        from olmocr_rl.olmorl import objective

        return getattr(objective, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
