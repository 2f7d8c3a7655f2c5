"""Running a page's unit tests on one completion, and the ways of turning results into a reward.

Pure: no caching, no processes, no logging. The counts kept here are exactly what the reward and the
telemetry need (per test type and per source JSONL file: tests passed / tests run), plus, when asked, each
type's summed partial credit (:mod:`olmocr_rl.bench.partial`) for the continuous bench reward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from olmocr_rl.bench import prepare_text
from olmocr_rl.bench.partial import run_with_credit

from olmocr_rl.rewards.page_tests import LoadedTest, test_type_name

Counts = tuple[int, int]  # (passed, total)


@dataclass(frozen=True)
class PageScore:
    """The unit-test results of one completion on its page.

    ``by_type`` and ``by_jsonl`` map a test type / a JSONL basename to ``(passed, total)``. ``errors`` lists
    ``(test_id, message)`` for tests that raised (counted as failed). ``missing_ids`` and ``load_errors`` are
    carried over from loading so that the process that logs can report them once. ``credit_by_type`` maps a test
    type to the sum of its tests' partial credits (None when the page was scored without credit).
    """

    by_type: Mapping[str, Counts]
    by_jsonl: Mapping[str, Counts]
    errors: tuple[tuple[str, str], ...] = ()
    missing_ids: tuple[str, ...] = ()
    load_errors: tuple[str, ...] = ()
    credit_by_type: Mapping[str, float] | None = None

    @property
    def passed(self) -> int:
        return sum(passed for passed, _total in self.by_type.values())

    @property
    def total(self) -> int:
        return sum(total for _passed, total in self.by_type.values())


def score_page(tests: Sequence[LoadedTest], text: str, with_credit: bool = False) -> PageScore:
    """Run every test on ``text``; a test that raises counts as failed (credit 0) and is listed in ``errors``.

    The per-completion shared work (normalisation etc.) is done once by ``prepare_text`` and reused by all
    tests of the page. ``with_credit`` also sums each type's partial credit (``credit_by_type``); the verdicts
    are the same either way.
    """
    by_type: dict[str, list[int]] = {}
    by_jsonl: dict[str, list[int]] = {}
    credits: dict[str, float] | None = {} if with_credit else None
    errors: list[tuple[str, str]] = []
    try:
        prepared = prepare_text(text)
        prepare_error = None
    except Exception as error:  # noqa: BLE001 - a reward must never crash training
        prepared, prepare_error = None, f"preparing the text failed: {type(error).__name__}: {error}"
    for loaded in tests:
        test = loaded.test
        passed, credit = False, 0.0
        if prepare_error is not None:
            errors.append((str(test.id), prepare_error))
        else:
            try:
                if credits is None:
                    passed, _explanation = test.run_prepared(prepared)
                    passed = bool(passed)
                else:
                    passed, credit = run_with_credit(test, prepared)
            except Exception as error:  # noqa: BLE001 - counted as a failure, as in olmOCR
                passed, credit = False, 0.0
                errors.append((str(test.id), f"{type(error).__name__}: {error}"))
        if credits is not None:
            credits[test_type_name(test)] = credits.get(test_type_name(test), 0.0) + credit
        for table, name in ((by_type, test_type_name(test)), (by_jsonl, loaded.jsonl_basename)):
            counts = table.setdefault(name, [0, 0])
            counts[0] += int(passed)
            counts[1] += 1
    return PageScore(
        by_type={name: (p, t) for name, (p, t) in by_type.items()},
        by_jsonl={name: (p, t) for name, (p, t) in by_jsonl.items()},
        errors=tuple(errors),
        credit_by_type=credits,
    )


def micro_pass_rate(by_type: Mapping[str, Counts]) -> float | None:
    """Tests passed / tests run over the whole page; None when no test ran."""
    total = sum(t for _p, t in by_type.values())
    if total == 0:
        return None
    return sum(p for p, _t in by_type.values()) / total


def macro_pass_rate(by_type: Mapping[str, Counts]) -> float | None:
    """Unweighted mean over the test types present of each type's pass rate; None when no test ran.

    Example: present 1/1 and math 1/3 give micro 2/4 = 0.5 but macro (1 + 1/3) / 2 = 0.667.
    """
    rates = [p / t for p, t in by_type.values() if t > 0]
    if not rates:
        return None
    return sum(rates) / len(rates)


def continuous_micro(score: PageScore) -> float | None:
    """The continuous bench reward: summed partial credit / tests run; None when no test ran or no credit."""
    total = score.total
    if total == 0 or score.credit_by_type is None:
        return None
    return sum(score.credit_by_type.values()) / total


def continuous_macro(score: PageScore) -> float | None:
    """Unweighted mean over the test types present of each type's mean partial credit; None as above."""
    if score.credit_by_type is None:
        return None
    rates = [score.credit_by_type.get(name, 0.0) / t for name, (_p, t) in score.by_type.items() if t > 0]
    if not rates:
        return None
    return sum(rates) / len(rates)
