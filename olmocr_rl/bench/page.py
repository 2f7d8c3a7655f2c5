"""Page-level evaluation: every test of one page against one completion, sharing the work.

The scorer CLI (:mod:`olmocr_rl.bench.score`) evaluates pages through it; the RL reward does the same
work per completion in ``olmocr_rl.rewards.page_score`` (with its per-type counts). A page has tens of
tests, so the completion is prepared once (:class:`PreparedText`) and each test reads the cached views.
It never raises: a test that raises counts as failed, with the exception in its explanation (olmOCR's
reward counts such tests as failures too).
"""

from __future__ import annotations

from typing import Iterable

from .base import BenchTest
from .prepared import PROJECT_RULE, PreparedText, prepare_text

__all__ = ["evaluate_page", "pass_rate"]


def evaluate_page(
    tests: Iterable[BenchTest], text: str | PreparedText, rule: str = PROJECT_RULE
) -> list[tuple[BenchTest, bool, str]]:
    """Run ``tests`` on one completion; returns ``(test, passed, explanation)`` in input order.

    ``text`` may be a ``str`` or an existing ``PreparedText`` (whose caches, and rule, are then reused);
    ``rule`` is the scoring rule of a ``str`` (``prepared.SCORING_RULES``).
    A completion that is not a string fails every test.
    """
    tests = list(tests)
    try:
        prepared = prepare_text(text, rule)
    except Exception as error:  # e.g. None or bytes passed as a completion
        reason = f"invalid completion: {type(error).__name__}: {error}"
        return [(test, False, reason) for test in tests]
    results = []
    for test in tests:
        try:
            passed, explanation = test.run_prepared(prepared)
        except Exception as error:  # noqa: BLE001 - a broken test must not break the reward
            passed, explanation = False, f"test raised {type(error).__name__}: {error}"
        results.append((test, bool(passed), explanation))
    return results


def pass_rate(results: list[tuple[BenchTest, bool, str]]) -> float | None:
    """Fraction of passed tests; ``None`` when there are no tests."""
    if not results:
        return None
    return sum(1 for _, passed, _ in results if passed) / len(results)
