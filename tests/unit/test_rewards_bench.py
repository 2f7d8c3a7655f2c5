"""olmocr_bench_reward / _macroavg on tiny hand-worked pages, serial and in a worker pool."""

from __future__ import annotations

import json
import logging

import pytest

from olmocr_rl.rewards import BenchRewardScorer, olmocr_bench_reward, olmocr_bench_reward_macroavg
from olmocr_rl.rewards import page_tests as page_tests_module

FRONT_MATTER = (
    "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
    "is_table: False\nis_diagram: False\n---\n"
)

# Page p1: olmOCR's own reward-test layout (present, absent, order, baseline).
P1_TESTS = [
    {"pdf": "p1.pdf", "page": 1, "id": "p1_present", "type": "present", "text": "Hello world"},
    {"pdf": "p1.pdf", "page": 1, "id": "p1_absent", "type": "absent", "text": "Page 7"},
    {"pdf": "p1.pdf", "page": 1, "id": "p1_order", "type": "order", "before": "Alpha", "after": "Beta"},
    {"pdf": "p1.pdf", "page": 1, "id": "p1_baseline", "type": "baseline"},
]
P1_IDS = [t["id"] for t in P1_TESTS]
PERFECT = "Hello world\n\nAlpha comes first, then Beta."
PARTIAL = "Beta before Alpha. Page 7"  # only the baseline test passes -> 1/4


def write_jsonl(path, tests, blank_lines=False):
    lines = [json.dumps(t) for t in tests]
    text = ("\n\n".join(lines) if blank_lines else "\n".join(lines)) + "\n"
    path.write_text(text)
    return str(path)


@pytest.fixture
def p1_file(tmp_path):
    return write_jsonl(tmp_path / "p1.jsonl", P1_TESTS, blank_lines=True)


@pytest.fixture
def scorer():
    scorer = BenchRewardScorer(workers=1)
    yield scorer
    scorer.close()


def columns(n, files, ids, pdf="p1.pdf"):
    return dict(pdf_path=[pdf] * n, jsonl_files=[files] * n, test_ids=[ids] * n)


def test_perfect_partial_and_empty_completions(scorer, p1_file):
    # empty: present fails, absent passes, order fails, baseline fails (no alphanumerics) -> 1/4
    rewards = scorer.rewards([PERFECT, PARTIAL, ""], **columns(3, [p1_file], P1_IDS))
    assert rewards == [1.0, 0.25, 0.25]


def test_message_lists_and_strings_score_the_same(scorer, p1_file):
    as_messages = [[{"role": "assistant", "content": PERFECT}], [{"role": "assistant", "content": PARTIAL}]]
    assert scorer.rewards(as_messages, **columns(2, [p1_file], P1_IDS)) == [1.0, 0.25]


def test_unreadable_completions_and_pages_without_tests_give_none(scorer, p1_file):
    rewards = scorer.rewards(
        [None, [], [{}], 42, PERFECT, PERFECT],
        pdf_path=["p1.pdf"] * 6,
        jsonl_files=[[p1_file]] * 4 + [[p1_file], None],
        test_ids=[P1_IDS] * 4 + [[], P1_IDS],
    )
    assert rewards == [None] * 6


def test_front_matter_is_removed_unless_raw(scorer, tmp_path):
    # A blank-page baseline test: at most 10 alphanumerics. The front matter alone has ~80.
    blank = write_jsonl(
        tmp_path / "blank.jsonl", [{"pdf": "b.pdf", "page": 1, "id": "blank", "type": "baseline", "max_length": 10}]
    )
    completion = FRONT_MATTER  # an empty page: front matter only
    assert scorer.rewards([completion], **columns(1, [blank], ["blank"])) == [1.0]
    assert scorer.rewards([completion], raw_completion=True, **columns(1, [blank], ["blank"])) == [0.0]


def test_front_matter_does_not_change_other_verdicts(scorer, p1_file):
    assert scorer.rewards([FRONT_MATTER + PERFECT], **columns(1, [p1_file], P1_IDS)) == [1.0]


def test_unknown_ids_are_left_out_and_logged_once(scorer, p1_file, caplog):
    ids = ["p1_present", "p1_absent", "nope_1", "nope_2"]
    with caplog.at_level(logging.WARNING):
        first = scorer.rewards(["Hello world"], **columns(1, [p1_file], ids))
        second = scorer.rewards(["Hello world", "x"], **columns(2, [p1_file], ids))
    assert first == [1.0]  # present + absent pass; the unknown ids are not in the denominator
    assert second == [1.0, 0.5]
    warnings = [r.message for r in caplog.records if "not found" in r.message]
    assert len(warnings) == 1 and "nope_1" in warnings[0] and "nope_2" in warnings[0]
    # only unknown ids: no usable test -> None
    assert scorer.rewards(["x"], **columns(1, [p1_file], ["nope_1"])) == [None]


def test_page_with_tests_in_two_jsonl_files(scorer, tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"pdf": "p.pdf", "page": 1, "id": "t_present", "type": "present", "text": "Hello"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"pdf": "p.pdf", "page": 1, "id": "t_absent", "type": "absent", "text": "Goodbye"}])
    ids = ["t_present", "t_absent"]
    stats = []
    scorer.stats_sink = stats.append
    # "Hello Goodbye": present passes, absent fails -> 1/2 with both files
    assert scorer.rewards(["Hello Goodbye"], **columns(1, [a, b], ids)) == [0.5]
    assert dict(stats[-1][0].by_jsonl) == {"a.jsonl": (1, 1), "b.jsonl": (0, 1)}
    # olmOCR's items name only the first file: the second file's test is then unknown (left out)
    assert scorer.rewards(["Hello Goodbye"], pdf_path=["p.pdf"], jsonl_file=[a], test_ids=[ids]) == [1.0]


def test_macro_vs_micro_hand_worked(tmp_path):
    tests = [
        {"pdf": "m.pdf", "page": 1, "id": "m_p1", "type": "present", "text": "Hello"},
        {"pdf": "m.pdf", "page": 1, "id": "m_p2", "type": "present", "text": "World"},
        {"pdf": "m.pdf", "page": 1, "id": "m_a", "type": "absent", "text": "Page 7"},
    ]
    path = write_jsonl(tmp_path / "m.jsonl", tests)
    ids = [t["id"] for t in tests]
    # "Hello Page 7": present 1/2, absent 0/1 -> micro 1/3; macro (1/2 + 0/1) / 2 = 1/4
    kwargs = dict(pdf_path=["m.pdf"], jsonl_file=[path], test_ids=[ids])
    assert olmocr_bench_reward([None], ["Hello Page 7"], **kwargs) == [pytest.approx(1 / 3)]
    assert olmocr_bench_reward_macroavg([None], ["Hello Page 7"], **kwargs) == [pytest.approx(0.25)]
    assert olmocr_bench_reward_macroavg.__name__ == "olmocr_bench_reward_macroavg"


def test_type_filter_keeps_only_those_types(scorer, p1_file):
    rewards = scorer.rewards([PARTIAL], type_filter=["present", "absent"], **columns(1, [p1_file], P1_IDS))
    assert rewards == [0.0]
    assert scorer.rewards([PARTIAL], type_filter=["math"], **columns(1, [p1_file], P1_IDS)) == [None]


def test_restricting_to_one_jsonl_file(scorer, tmp_path, monkeypatch):
    a = write_jsonl(tmp_path / "a.jsonl", [{"pdf": "p.pdf", "page": 1, "id": "t_present", "type": "present", "text": "Hello"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"pdf": "p.pdf", "page": 1, "id": "t_absent", "type": "absent", "text": "Bye"}])
    monkeypatch.chdir(tmp_path)  # the restriction is given as a relative path, the items carry absolute ones
    cols = columns(1, [a, b], ["t_present", "t_absent"])
    assert scorer.rewards(["Hello Bye"], restrict_to_jsonl="./b.jsonl", **cols) == [0.0]
    assert scorer.rewards(["Hello Bye"], restrict_to_jsonl="./other.jsonl", **cols) == [None]


def test_a_test_that_raises_counts_as_failed_and_is_logged_once(scorer, p1_file, monkeypatch, caplog):
    real_load = page_tests_module.load_single_test

    class Exploding:
        def __init__(self, test):
            self._test = test
            self.id, self.type = test.id, test.type

        def run_prepared(self, prepared):
            raise RuntimeError("boom")

    def load(entry):
        test = real_load(entry)
        return Exploding(test) if test.id == "p1_order" else test

    monkeypatch.setattr(page_tests_module, "load_single_test", load)
    with caplog.at_level(logging.WARNING):
        assert scorer.rewards([PERFECT, PERFECT], **columns(2, [p1_file], P1_IDS)) == [0.75, 0.75]
        scorer.rewards([PERFECT + " "], **columns(1, [p1_file], P1_IDS))
    messages = [r.message for r in caplog.records if "raised" in r.message]
    assert len(messages) == 1 and "p1_order" in messages[0] and "boom" in messages[0]


def test_a_bad_test_entry_is_left_out_and_logged(scorer, tmp_path, caplog):
    tests = [
        {"pdf": "p.pdf", "page": 1, "id": "good", "type": "present", "text": "Hello"},
        {"pdf": "p.pdf", "page": 1, "id": "bad", "type": "no_such_type", "text": "x"},
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", tests)
    with caplog.at_level(logging.WARNING):
        assert scorer.rewards(["Hello"], **columns(1, [path], ["good", "bad"])) == [1.0]
    assert any("'bad'" in r.message and "left out" in r.message for r in caplog.records)


def test_missing_file_gives_none(scorer, tmp_path):
    assert scorer.rewards(["x"], **columns(1, [str(tmp_path / "absent.jsonl")], ["a"])) == [None]


def test_tests_are_loaded_once_and_cached_across_calls(scorer, p1_file):
    cache = scorer.evaluator.cache
    for _ in range(3):
        scorer.rewards([PERFECT, PARTIAL], **columns(2, [p1_file], P1_IDS))
    scorer.rewards([PERFECT], **columns(1, [p1_file], list(reversed(P1_IDS))))  # same set, other order
    assert cache.file_parses == 1
    assert len(cache._pages) == 1


def test_stats_record_per_type_and_per_file(scorer, p1_file):
    stats = []
    scorer.stats_sink = stats.append
    scorer.rewards([PARTIAL, None], **columns(2, [p1_file], P1_IDS))
    first, second = stats[0]
    assert second is None
    assert first.reward == 0.25
    assert dict(first.by_type) == {"present": (0, 1), "absent": (0, 1), "order": (0, 1), "baseline": (1, 1)}
    assert dict(first.by_jsonl) == {"p1.jsonl": (1, 4)}
    assert first.group.startswith("p1.pdf#")


def test_macro_call_after_micro_reuses_results_and_records_nothing(p1_file, monkeypatch):
    from olmocr_rl.rewards import evaluator

    runs = []
    real_score_page = evaluator.score_page
    monkeypatch.setattr(evaluator, "score_page",
                        lambda tests, text, *credit: runs.append(text) or real_score_page(tests, text, *credit))
    stats = []
    scorer = BenchRewardScorer(workers=1, stats_sink=stats.append)
    cols = columns(2, [p1_file], P1_IDS)
    completions = [PERFECT, PARTIAL]
    micro = scorer.rewards(completions, **cols)
    macro = scorer.rewards(list(completions), macro_average=True, record_stats=False, **cols)
    assert micro == [1.0, 0.25] and macro == [1.0, 0.25]  # one test per type here, so macro == micro
    assert len(runs) == 2  # the tests ran once per completion, not twice
    assert len(stats) == 1
    scorer.rewards([PERFECT, PARTIAL + "!"], **cols)  # a new batch is scored again
    assert len(runs) == 4


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_worker_pool_gives_the_serial_results(p1_file, tmp_path, start_method):
    other = write_jsonl(
        tmp_path / "q.jsonl",
        [{"pdf": "q.pdf", "page": 1, "id": "q_present", "type": "present", "text": "Quokka"}],
    )
    completions = [PERFECT, PARTIAL, "", "Quokka", "nothing", None] * 3
    cols = dict(
        pdf_path=(["p1.pdf"] * 3 + ["q.pdf"] * 3) * 3,
        jsonl_files=([[p1_file]] * 3 + [[other]] * 3) * 3,
        test_ids=([P1_IDS] * 3 + [["q_present"]] * 3) * 3,
    )
    serial = BenchRewardScorer(workers=1)
    pooled = BenchRewardScorer(workers=2, start_method=start_method)
    try:
        expected = serial.rewards(completions, **cols)
        assert expected == [1.0, 0.25, 0.25, 1.0, 0.0, None] * 3
        assert pooled.rewards(completions, **cols) == expected
        assert pooled.rewards(list(reversed(completions)), **{k: list(reversed(v)) for k, v in cols.items()}) == list(
            reversed(expected)
        )
        # The continuous reward crosses the pool too ("nothing" vs "Quokka": graded, not pooled away).
        assert pooled.rewards(completions, continuous=True, **cols) == serial.rewards(completions, continuous=True, **cols)
    finally:
        pooled.close()
        serial.close()


@pytest.mark.shared
def test_real_sample_rewards_match_the_bench_engine(shared_sample):
    """On the real sample pages (pipeline outputs + perturbations), every reward equals the pass rate that
    olmocr_rl.bench's own evaluate_page gives the front-matter-free text, and raw mode sees the front matter."""
    import importlib.util
    from pathlib import Path

    from olmocr_rl.bench import evaluate_page, load_tests, pass_rate
    from olmocr_rl.data.front_matter import split_front_matter

    script = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_rewards.py"
    spec = importlib.util.spec_from_file_location("bench_rewards", script)
    bench_rewards = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_rewards)
    completions, cols = bench_rewards.make_batch(shared_sample, generations=3, seed=1)

    tests_by_id = {}
    for jsonl in sorted(shared_sample.glob("*.jsonl")):
        tests_by_id.update({t.id: t for t in load_tests(jsonl)})
    scorer = BenchRewardScorer(workers=1)
    rewards = scorer.rewards(completions, **cols)
    assert len(rewards) == len(completions) > 60
    for completion, ids, reward in zip(completions, cols["test_ids"], rewards):
        _front, body = split_front_matter(completion[0]["content"])
        assert reward == pytest.approx(pass_rate(evaluate_page([tests_by_id[i] for i in ids], body)))
    assert 0.0 < sum(rewards) / len(rewards) < 1.0
    # The blank page's baseline test (max_length 10) passes only once the front matter is removed.
    blank = [i for i, ids in enumerate(cols["test_ids"]) if ids == ["test1_blank"]][0]
    assert rewards[blank] == 1.0
    raw = scorer.rewards(completions, raw_completion=True, **cols)
    assert raw[blank] == 0.0


@pytest.mark.timeout(120)
def test_a_killed_worker_is_replaced_and_the_batch_scored_in_process(p1_file, caplog):
    import os
    import signal

    scorer = BenchRewardScorer(workers=2)
    cols = columns(4, [p1_file], P1_IDS)
    try:
        assert scorer.rewards([PERFECT, PARTIAL, "", PERFECT], **cols) == [1.0, 0.25, 0.25, 1.0]
        for pid in list(scorer.evaluator._pool._processes):  # workers this test started
            os.kill(pid, signal.SIGKILL)
        with caplog.at_level(logging.ERROR):
            assert scorer.rewards([PARTIAL, PERFECT, "", PERFECT], **cols) == [0.25, 1.0, 0.25, 1.0]
        assert any("pool failed" in r.message for r in caplog.records)
        assert scorer.rewards([PERFECT, PERFECT, PARTIAL, ""], **cols) == [1.0, 1.0, 0.25, 0.25]  # a new pool
    finally:
        scorer.close()


def test_a_pool_that_keeps_failing_is_given_up(p1_file, monkeypatch, caplog):
    from olmocr_rl.rewards import evaluator

    def failing_pool(self, chunks, raw_completion):
        raise RuntimeError("workers cannot start")

    monkeypatch.setattr(evaluator.BenchEvaluator, "_run_in_pool", failing_pool)
    scorer = BenchRewardScorer(workers=2)
    cols = columns(2, [p1_file], P1_IDS)
    with caplog.at_level(logging.ERROR):
        for attempt in range(evaluator.MAX_POOL_FAILURES + 1):
            assert scorer.rewards([PERFECT, PARTIAL + str(attempt)], **cols) == [1.0, 0.25]
    assert scorer.evaluator.pool_disabled
    errors = [r.message for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == evaluator.MAX_POOL_FAILURES  # the last batch did not try the pool again
    assert "from now on" in errors[-1] and "__main__" in errors[-1]


def test_worker_count_resolution(monkeypatch):
    from olmocr_rl.rewards import resolve_workers

    monkeypatch.delenv("OLMOCR_RL_REWARD_WORKERS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert resolve_workers() == 8  # 64 CPUs shared by 8 trainer processes
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert resolve_workers() == 16  # capped
    monkeypatch.setenv("OLMOCR_RL_REWARD_WORKERS", "3")
    assert resolve_workers() == 3
    assert resolve_workers(1) == 1
    monkeypatch.setenv("OLMOCR_RL_REWARD_WORKERS", "many")
    with pytest.raises(ValueError, match="OLMOCR_RL_REWARD_WORKERS"):
        resolve_workers()
    with pytest.raises(ValueError, match=">= 1"):
        resolve_workers(0)


def test_continuous_reward_hand_worked(p1_file):
    from olmocr_rl.rewards import build_reward_functions

    funcs, _weights, names = build_reward_functions(
        {"bench": 1.0, "bench_continuous": 1.0, "bench_continuous_macroavg": 1.0}, workers=1)
    assert names == ["olmocr_bench_reward", "olmocr_bench_continuous_reward", "olmocr_bench_continuous_reward_macroavg"]
    # "Hello wurld. Beta before Alpha.": present "Hello world" one substitution (ratio 20/22, credit 20/22 - 1/2
    # = 9/22); absent "Page 7" passes (1); order Alpha->Beta reversed, L = 31, Alpha first at 25, Beta last at 13:
    # progress 1 - 12/31 = 19/31, credit 19/62; baseline passes (1). Binary: 2/4.
    near = "Hello wurld. Beta before Alpha."
    cols = columns(3, [p1_file], P1_IDS)
    completions = [PERFECT, near, ""]
    binary, continuous, macro = (f([None] * 3, completions, **cols) for f in funcs)
    expected = (9 / 22 + 1 + 19 / 62 + 1) / 4
    assert binary == [1.0, 0.5, 0.25]
    assert continuous == pytest.approx([1.0, expected, 0.25])  # empty: only the absent test, as binary
    assert macro == pytest.approx([1.0, expected, 0.25])  # one test per type: macro = micro
    funcs[0].scorer.close()


def test_continuous_after_binary_on_one_batch_runs_the_tests_once(p1_file, monkeypatch):
    from olmocr_rl.rewards import evaluator

    runs = []
    real_score_page = evaluator.score_page
    monkeypatch.setattr(evaluator, "score_page",
                        lambda tests, text, *credit: runs.append(credit) or real_score_page(tests, text, *credit))
    scorer = BenchRewardScorer(workers=1, with_credit=True)
    cols = columns(2, [p1_file], P1_IDS)
    assert scorer.rewards([PERFECT, PARTIAL], **cols) == [1.0, 0.25]
    continuous = scorer.rewards([PERFECT, PARTIAL], continuous=True, record_stats=False, **cols)
    assert continuous[0] == 1.0 and 0.25 < continuous[1] < 0.5
    assert runs == [(True,), (True,)]  # one run per completion, with credit, shared by both rewards
    # A scorer without with_credit that is asked for the continuous reward scores again, with credit.
    plain = BenchRewardScorer(workers=1)
    plain.rewards([PERFECT], **columns(1, [p1_file], P1_IDS))
    assert plain.rewards([PERFECT], continuous=True, **columns(1, [p1_file], P1_IDS)) == [1.0]
    assert runs[2:] == [(False,), (True,)]
