"""The reward table and its builder: order, names, weights, JSONL-path values, errors, micro+macro sharing."""

from __future__ import annotations

import json

import pytest

from olmocr_rl.config.rewards import Reward, RewardValue
from olmocr_rl.rewards import REWARDS, build_reward_functions, parse_reward
from olmocr_rl.telemetry.pass_rates import DetailedRewardLogger

KEYS = [entry.key for entry in REWARDS]


def test_flags_are_olmocr_order():
    # olmOCR's eight in olmOCR's order, then this project's continuous bench rewards.
    assert KEYS == ["bench", "bench_macroavg", "medoid", "bench_edit_distance",
                    "front_matter", "element_count", "rect_tables", "eos",
                    "bench_continuous", "bench_continuous_macroavg"]
    assert [entry.key for entry in REWARDS if entry.per_file] == [
        "bench", "bench_macroavg", "bench_continuous", "bench_continuous_macroavg"]


def test_all_rewards_built_in_order_with_olmocr_names():
    spec = {key: 1.0 for key in KEYS}
    funcs, weights, names = build_reward_functions(spec, eos_token_id=2)
    assert names == [entry.name for entry in REWARDS]
    assert [f.__name__ for f in funcs] == names
    assert names == [
        "olmocr_bench_reward", "olmocr_bench_reward_macroavg", "medoid_reward", "bench_edit_distance_reward",
        "reward_front_matter", "reward_element_count", "reward_rect_tables", "reward_eos",
        "olmocr_bench_continuous_reward", "olmocr_bench_continuous_reward_macroavg",
    ]
    assert weights == [1.0] * 10
    assert funcs[-1].scorer is funcs[0].scorer and funcs[0].scorer.with_credit  # one scorer, tests run once
    funcs[0].scorer.close()


def test_release_recipe_weights_and_disabled_flags():
    # olmOCR 2's release: bench + front matter + EOS, weight 1 each; given in any order, with prefixes.
    spec = {"reward_eos": True, "reward_front_matter": "0.5", "reward_bench": 2, "reward_medoid": None}
    funcs, weights, names = build_reward_functions(spec, eos_token_id=7)
    assert names == ["olmocr_bench_reward", "reward_front_matter", "reward_eos"]
    assert weights == [2.0, 0.5, 1.0]
    assert funcs[2]([None], ["x"], completion_ids=[[1, 7]]) == [1.0]
    funcs[0].scorer.close()


def test_no_reward_is_an_error_listing_every_flag():
    with pytest.raises(ValueError) as error:
        build_reward_functions({"bench": None}, eos_token_id=2)
    for key in KEYS:
        assert f"--reward_{key}" in str(error.value)


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"bench_typo": 1.0}, "unknown reward 'bench_typo'"),
        ({"eos": "lots"}, "--reward_eos takes an optional weight"),
        ({"front_matter": float("nan")}, "finite"),
        ({"bench": "./no/such/file.jsonl"}, "JSONL file not found"),
        ({"eos": 1.0}, "eos_token_id"),
    ],
)
def test_bad_values_name_the_flag(spec, match):
    with pytest.raises(ValueError, match=match):
        build_reward_functions(spec, eos_token_id=None)


def test_parse_reward():
    assert parse_reward("bench", None) is None
    assert parse_reward("bench", True) == RewardValue(1.0)
    assert parse_reward("bench", "0.25") == RewardValue(0.25)
    assert parse_reward("eos", 3) == RewardValue(3.0)


def test_validated_values_are_taken_as_they_are(tmp_path):
    """The CLI's values (ResolvedConfig.rewards) reach the builder unchanged: a JSONL path is not looked up again."""
    funcs, weights, names = build_reward_functions(
        {"bench": RewardValue(1.0, str(tmp_path / "gone.jsonl")), "eos": RewardValue(-0.5)}, eos_token_id=3)
    assert (weights, names) == ([1.0, -0.5], ["olmocr_bench_reward", "reward_eos"])
    funcs[0].scorer.close()


def test_every_row_of_the_table_builds_a_function_of_its_name():
    for entry in REWARDS:
        funcs, _, names = build_reward_functions({entry.key: 1.0}, eos_token_id=2, workers=1)
        assert names == [entry.name] == [funcs[0].__name__], entry
        if hasattr(funcs[0], "scorer"):
            funcs[0].scorer.close()
    with pytest.raises(ValueError, match="exactly one of function= or factory="):
        Reward("x", "x_reward", "help", function="a:b", factory="a:c")


def test_a_row_whose_function_has_another_name_is_refused(monkeypatch):
    from olmocr_rl.config import rewards

    row = Reward("rect_tables", "rect_tables_reward", "renamed in the table only",
                 function="olmocr_rl.rewards.structure:reward_rect_tables")
    monkeypatch.setattr(rewards, "REWARDS", tuple(row if e.key == row.key else e for e in rewards.REWARDS))
    with pytest.raises(TypeError, match="gave a reward function named 'reward_rect_tables', but the reward table "
                                        r"\(config/rewards.py\) names --reward_rect_tables 'rect_tables_reward'"):
        build_reward_functions({"rect_tables": 1.0})


def test_jsonl_path_value_restricts_the_bench_tests(tmp_path, monkeypatch):
    a = tmp_path / "test1.jsonl"
    b = tmp_path / "test2.jsonl"
    a.write_text(json.dumps({"pdf": "p.pdf", "page": 1, "id": "a1", "type": "present", "text": "Hello"}) + "\n")
    b.write_text(json.dumps({"pdf": "p.pdf", "page": 1, "id": "b1", "type": "absent", "text": "Hello"}) + "\n")
    monkeypatch.chdir(tmp_path)
    funcs, weights, _ = build_reward_functions({"bench": "./test1.jsonl"}, eos_token_id=None, workers=1)
    assert weights == [1.0]
    kwargs = dict(pdf_path=["p.pdf"], jsonl_files=[[str(a), str(b)]], test_ids=[["a1", "b1"]])
    assert funcs[0]([None], ["Hello"], **kwargs) == [1.0]  # only test1.jsonl's present test counts
    funcs[0].scorer.close()


def test_micro_and_macro_together_record_stats_once_and_run_tests_once(tmp_path):
    path = tmp_path / "m.jsonl"
    tests = [
        {"pdf": "m.pdf", "page": 1, "id": "p1", "type": "present", "text": "Hello"},
        {"pdf": "m.pdf", "page": 1, "id": "p2", "type": "present", "text": "World"},
        {"pdf": "m.pdf", "page": 1, "id": "a1", "type": "absent", "text": "Page 7"},
    ]
    path.write_text("\n".join(json.dumps(t) for t in tests) + "\n")
    reward_logger = DetailedRewardLogger()
    funcs, _, names = build_reward_functions(
        {"bench": 1.0, "bench_macroavg": 1.0}, eos_token_id=None, reward_logger=reward_logger, workers=1
    )
    assert names == ["olmocr_bench_reward", "olmocr_bench_reward_macroavg"]
    assert funcs[0].scorer is funcs[1].scorer
    completions = [[{"role": "assistant", "content": "Hello Page 7"}]] * 2
    kwargs = dict(pdf_path=["m.pdf"] * 2, jsonl_file=[str(path)] * 2, test_ids=[["p1", "p2", "a1"]] * 2)
    assert funcs[0]([None] * 2, completions, **kwargs) == [pytest.approx(1 / 3)] * 2
    assert funcs[1]([None] * 2, completions, **kwargs) == [pytest.approx(0.25)] * 2
    summary = reward_logger.summary()
    assert summary["bench_reward/total_completions"] == 2  # not 4
    assert summary["bench_reward/present/total_tests"] == 4
    funcs[0].scorer.close()


def test_macro_alone_records_stats(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"pdf": "m.pdf", "page": 1, "id": "p1", "type": "present", "text": "Hello"}) + "\n")
    reward_logger = DetailedRewardLogger()
    funcs, _, _ = build_reward_functions(
        {"bench_macroavg": 1.0}, eos_token_id=None, reward_logger=reward_logger, workers=1
    )
    assert funcs[0]([None], ["Hello"], pdf_path=["m.pdf"], jsonl_file=[str(path)], test_ids=[["p1"]]) == [1.0]
    assert reward_logger.summary()["bench_reward/total_completions"] == 1
    funcs[0].scorer.close()
