"""The unit-test reward: the share of a page's olmOCR-bench tests that a completion passes.

``olmocr_bench_reward`` (micro: tests passed / tests run) and ``olmocr_bench_reward_macroavg`` (the mean of
the per-test-type pass rates) have TRL's reward signature; TRL logs them as ``rewards/<__name__>/mean``. Their
continuous variants ``olmocr_bench_continuous_reward`` and ``olmocr_bench_continuous_reward_macroavg`` average
each test's partial credit (:mod:`olmocr_rl.bench.partial`: 1 for a pass, at most 0.5 for a failure) instead.
:func:`bench_reward_function` builds all four, for the registry (a scorer per run, with telemetry) and for the
module-level functions of olmOCR's names (a process-wide default scorer). docs/rewards.md describes olmOCR's
version and what differs: tests see the completion without its front matter unless ``raw_completion=True``,
tests are looked up in every JSONL file of the page (``jsonl_files``), and scoring runs in worker processes.

Nothing here raises during training: unreadable completions and pages without usable tests score None
(TRL turns None into NaN and leaves it out of the weighted sum), a test that raises counts as failed, and
each such problem is logged once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from olmocr_rl.rewards.completions import column_item as _item, completion_text
from olmocr_rl.rewards.evaluator import BenchEvaluator
from olmocr_rl.rewards.page_score import (
    Counts,
    PageScore,
    continuous_macro,
    continuous_micro,
    macro_pass_rate,
    micro_pass_rate,
)
from olmocr_rl.rewards.page_tests import PageKey, page_key_for

logger = logging.getLogger(__name__)

# How many distinct problems to log before going quiet (a broken file could otherwise flood the log).
MAX_LOGGED_PROBLEMS = 200


@dataclass(frozen=True)
class CompletionStats:
    """What the telemetry records about one scored completion.

    ``reward`` is the bench reward given; ``by_type`` / ``by_jsonl`` map a test type / JSONL basename to
    ``(passed, total)``; ``group`` names the page (completions of one page in one reward call are one GRPO group).
    """

    reward: float
    by_type: Mapping[str, Counts]
    by_jsonl: Mapping[str, Counts]
    group: str


StatsSink = Callable[[list[CompletionStats | None]], None]


class BenchRewardScorer:
    """Scores batches of completions against their pages' tests; owns the evaluator (worker pool) and caches.

    ``stats_sink``, when given, receives one list per call of :class:`CompletionStats` (None where the reward is
    None) for calls made with ``record_stats=True``. When the micro and the macro reward share a scorer, the
    second call on the same batch reuses the first call's test results instead of running the tests again.
    ``with_credit`` scores every batch with partial credit too (set when a continuous reward shares the scorer,
    so a binary and a continuous reward on the same batch also run the tests once).
    """

    def __init__(self, workers: int | None = None, stats_sink: StatsSink | None = None, start_method: str | None = None,
                 with_credit: bool = False):
        self.evaluator = BenchEvaluator(workers=workers, start_method=start_method)
        self.stats_sink = stats_sink
        self.with_credit = with_credit
        self._reported: set[str] = set()
        self._last_batch: tuple | None = None
        self._last_scores: list[PageScore | None] = []
        self._last_with_credit = False

    def rewards(
        self,
        completions: Sequence[Any],
        *,
        pdf_path: Sequence[str | None] | None = None,
        jsonl_file: Sequence[str | None] | None = None,
        jsonl_files: Sequence[Sequence[str] | None] | None = None,
        test_ids: Sequence[Sequence[str] | None] | None = None,
        macro_average: bool = False,
        raw_completion: bool = False,
        type_filter: Iterable[str] | None = None,
        restrict_to_jsonl: str | None = None,
        record_stats: bool = True,
        continuous: bool = False,
    ) -> list[float | None]:
        """One reward per completion (None for unreadable completions and pages without usable tests);
        ``continuous``: the mean partial credit instead of the pass rate."""
        type_filter = None if type_filter is None else tuple(type_filter)
        n = len(completions)
        texts = [completion_text(c) for c in completions]
        keys: list[PageKey | None] = []
        for i in range(n):
            files = _item(jsonl_files, i)
            if restrict_to_jsonl is not None:
                files = _only_file(files if files else [_item(jsonl_file, i)], restrict_to_jsonl)
            keys.append(page_key_for(files, _item(jsonl_file, i), _item(test_ids, i), type_filter))

        scores = self._scores(texts, keys, raw_completion, continuous)
        rewards: list[float | None] = []
        stats: list[CompletionStats | None] = []
        for i, score in enumerate(scores):
            reward = None
            if score is not None and continuous:
                reward = continuous_macro(score) if macro_average else continuous_micro(score)
            elif score is not None:
                reward = macro_pass_rate(score.by_type) if macro_average else micro_pass_rate(score.by_type)
            rewards.append(reward)
            if reward is None or score is None:
                stats.append(None)
            else:
                group = f"{_item(pdf_path, i) or ''}#{keys[i].group_id()}"
                stats.append(CompletionStats(reward, score.by_type, score.by_jsonl, group))
        if record_stats and self.stats_sink is not None:
            try:
                self.stats_sink(stats)
            except Exception as error:  # noqa: BLE001 - telemetry must never stop training
                self._log_once(f"recording bench reward statistics failed: {type(error).__name__}: {error}")
        scored = [r for r in rewards if r is not None]
        logger.debug(
            "%s: %d completions, %d scored, mean %.4f",
            reward_name(macro_average, continuous),
            n,
            len(scored),
            sum(scored) / len(scored) if scored else float("nan"),
        )
        return rewards

    def _scores(self, texts: list[str | None], keys: list[PageKey | None], raw_completion: bool,
                continuous: bool = False) -> list[PageScore | None]:
        with_credit = continuous or self.with_credit
        batch = (raw_completion, tuple(texts), tuple(keys))
        if batch == self._last_batch and (self._last_with_credit or not with_credit):
            return self._last_scores
        todo = [i for i, (text, key) in enumerate(zip(texts, keys)) if text is not None and key is not None]
        results = self.evaluator.evaluate([(keys[i], texts[i]) for i in todo], raw_completion, with_credit)
        scores: list[PageScore | None] = [None] * len(texts)
        for i, score in zip(todo, results):
            scores[i] = score
            self._report(score, keys[i])
        self._last_batch, self._last_scores, self._last_with_credit = batch, scores, with_credit
        return scores

    def _report(self, score: PageScore, key: PageKey) -> None:
        if score.missing_ids:
            shown = ", ".join(score.missing_ids[:5]) + (" ..." if len(score.missing_ids) > 5 else "")
            self._log_once(
                f"{len(score.missing_ids)} test id(s) not found in {', '.join(key.jsonl_files)} and left out of "
                f"the page's reward: {shown}"
            )
        for problem in score.load_errors:
            self._log_once(f"bench test left out of the reward: {problem}")
        for test_id, message in score.errors:
            self._log_once(f"bench test {test_id!r} raised and counts as failed: {message}", dedupe_key=test_id)

    def _log_once(self, message: str, dedupe_key: str | None = None) -> None:
        dedupe_key = dedupe_key or message
        if dedupe_key in self._reported or len(self._reported) >= MAX_LOGGED_PROBLEMS:
            return
        self._reported.add(dedupe_key)
        logger.warning(message)

    def close(self, wait: bool = False) -> None:
        """Stop the worker processes (``wait``: until they have ended; see ``BenchEvaluator.close``)."""
        self.evaluator.close(wait=wait)


def _only_file(files: Sequence[str | None], wanted: str) -> list[str]:
    """The page's files that are ``wanted`` (compared as resolved paths)."""
    target = os.path.realpath(wanted)
    return [f for f in files if f and os.path.realpath(f) == target]


def reward_name(macro_average: bool = False, continuous: bool = False) -> str:
    """The ``__name__`` (TRL's log name) of a bench reward."""
    return "olmocr_bench_" + ("continuous_" if continuous else "") + "reward" + ("_macroavg" if macro_average else "")


def bench_reward_function(
    scorer: BenchRewardScorer,
    *,
    macro_average: bool = False,
    raw_completion: bool = False,
    type_filter: Iterable[str] | None = None,
    restrict_to_jsonl: str | None = None,
    record_stats: bool = True,
    continuous: bool = False,
) -> Callable[..., list[float | None]]:
    """The bench reward as TRL calls it, bound to ``scorer`` and these settings: the one way in to the bench reward
    (the registry's rewards and the module-level functions below are both built here).

    The function takes TRL's columns (``pdf_path``, ``jsonl_file``, ``jsonl_files``, ``test_ids``, aligned with
    ``completions``) and is named ``olmocr_bench_reward`` or ``olmocr_bench_reward_macroavg`` (TRL logs it so).
    ``restrict_to_jsonl`` keeps only that file's tests; ``record_stats`` sends the statistics to the scorer's sink;
    ``continuous`` gives the mean partial credit (named ``olmocr_bench_continuous_reward[_macroavg]``).
    """
    type_filter = None if type_filter is None else tuple(type_filter)

    def bench_reward(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Any = None,
        pdf_path: Sequence[str] | None = None,
        jsonl_file: Sequence[str] | None = None,
        test_ids: Sequence[Sequence[str]] | None = None,
        *,
        jsonl_files: Sequence[Sequence[str]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        return scorer.rewards(completions, pdf_path=pdf_path, jsonl_file=jsonl_file, jsonl_files=jsonl_files,
                              test_ids=test_ids, macro_average=macro_average, raw_completion=raw_completion,
                              type_filter=type_filter, restrict_to_jsonl=restrict_to_jsonl, record_stats=record_stats,
                              continuous=continuous)

    name = reward_name(macro_average, continuous)
    bench_reward.__name__ = bench_reward.__qualname__ = name
    bench_reward.scorer = scorer  # type: ignore[attr-defined]  # lets the caller close the worker pool
    return bench_reward


_default_scorer: BenchRewardScorer | None = None


def default_scorer() -> BenchRewardScorer:
    """The scorer used when the module-level functions are called directly (created on first use, no telemetry)."""
    global _default_scorer
    if _default_scorer is None:
        _default_scorer = BenchRewardScorer()
    return _default_scorer


def olmocr_bench_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    completion_ids: Sequence[Sequence[int]] | None = None,
    pdf_path: Sequence[str] | None = None,
    jsonl_file: Sequence[str] | None = None,
    test_ids: Sequence[Sequence[str]] | None = None,
    macro_average: bool = False,
    *,
    jsonl_files: Sequence[Sequence[str]] | None = None,
    raw_completion: bool = False,
    bench_type_filter: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """Per completion, the fraction of its page's unit tests that pass (olmOCR's function, TRL's signature).

    A thin wrapper: :func:`bench_reward_function` on the process-wide default scorer with these settings.
    Tests come from every file in ``jsonl_files[i]`` (else ``[jsonl_file[i]]``); ``macro_average=True`` averages
    per-type pass rates instead; ``bench_type_filter`` keeps only tests of those types. None where the
    completion is not a string / message list or the page has no usable tests.
    """
    reward = bench_reward_function(default_scorer(), macro_average=macro_average, raw_completion=raw_completion,
                                   type_filter=bench_type_filter)
    return reward(prompts, completions, completion_ids, pdf_path, jsonl_file, test_ids, jsonl_files=jsonl_files)


def olmocr_bench_reward_macroavg(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """:func:`olmocr_bench_reward` with ``macro_average=True`` (the mean of per-test-type pass rates)."""
    kwargs["macro_average"] = True
    return olmocr_bench_reward(prompts, completions, **kwargs)
