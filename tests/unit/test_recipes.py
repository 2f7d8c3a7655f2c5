"""The two recipes, done here by their documented steps only: a toy reward (docs/rewards.md, "Adding a reward")
and a toy bench test type (docs/bench.md, "Adding a test type"). Each step of the recipe is one marked block;
everything after the steps checks that the rest of the package picked the addition up by itself."""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import dataclass
from typing import ClassVar

import pytest

from conftest import BENCH_DATA_SAMPLE

TOY_REWARD_MODULE = '''
from olmocr_rl.rewards.completions import completion_text


def toy_length_reward(prompts, completions, **columns):
    """1.0 for a completion of at most 5 characters, 0.0 for a longer one, None for an unreadable one."""
    texts = [completion_text(c) for c in completions]
    return [None if t is None else float(len(t) <= 5) for t in texts]
'''


def _one_page_bench(tmp_path, tests):
    folder = tmp_path / "bench"
    (folder / "pdfs").mkdir(parents=True)
    shutil.copy(BENCH_DATA_SAMPLE / "pdfs" / "simple_lines.pdf", folder / "pdfs")
    (folder / "toy.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests))
    return folder


def test_adding_a_reward_by_the_documented_steps(tmp_path, monkeypatch, capsys):
    from olmocr_rl.config import rewards as reward_table

    # Step 1: the function, with TRL's reward signature, in a module.
    (tmp_path / "toy_rewards.py").write_text(textwrap.dedent(TOY_REWARD_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    # Step 2: one row in REWARDS.
    row = reward_table.Reward("toy_length", "toy_length_reward", "1.0 for a completion of at most 5 characters",
                              function="toy_rewards:toy_length_reward")
    monkeypatch.setattr(reward_table, "REWARDS", (*reward_table.REWARDS, row))

    # Step 3: nothing else. The flag, its help, YAML, --print, validation, the GRPOConfig and the builder follow.
    from olmocr_rl.config import build_parser, parse_args, validate
    from olmocr_rl.config.__main__ import main as print_main
    from olmocr_rl.config.grpo import grpo_config_kwargs
    from olmocr_rl.config.resolved import flags_without_field
    from olmocr_rl.rewards import build_reward_functions

    assert "--reward_toy_length" in build_parser().format_help()
    assert flags_without_field() == ([], [])  # no ResolvedConfig field to declare for a reward
    config = tmp_path / "run.yaml"
    config.write_text("reward_toy_length: 0.5\n")
    argv = ["--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--reward_bench", "--config", str(config),
            "--num_generations", "2", "--gradient_accumulation_steps", "2", "--report_to", "none"]
    assert print_main(["--print", "reward_toy_length", *argv]) == 0
    assert capsys.readouterr().out == "0.5\n"
    cfg = validate(parse_args(argv))
    assert cfg.rewards["toy_length"] == reward_table.RewardValue(0.5)
    assert grpo_config_kwargs(cfg)["reward_weights"] == [1.0, 0.5]
    funcs, weights, names = build_reward_functions(cfg.rewards, eos_token_id=2, workers=1)
    assert (names, weights) == (["olmocr_bench_reward", "toy_length_reward"], [1.0, 0.5])
    assert funcs[1](None, ["short", [{"role": "assistant", "content": "much longer"}], None]) == [1.0, 0.0, None]
    funcs[0].scorer.close()
    with pytest.raises(SystemExit):  # a JSONL path is refused: the row is not per_file
        parse_args([*argv, "--reward_toy_length", "x.jsonl"])
    assert "--reward_toy_length takes a weight, not a JSONL path" in capsys.readouterr().err


def test_adding_a_bench_test_type_by_the_documented_steps(tmp_path, monkeypatch):
    from olmocr_rl.bench import BenchTest, registry
    from olmocr_rl.bench.errors import FieldError

    # Step 1: the class (frozen, keyword-only, deriving BenchTest; TYPES, FIELD_KINDS, checks, run_prepared).
    @dataclass(frozen=True, kw_only=True)
    class ToyWordCountTest(BenchTest):
        """``toy_words``: the completion has at least ``words`` words."""

        words: int
        TYPES: ClassVar[tuple[str, ...]] = ("toy_words",)
        FIELD_KINDS: ClassVar[dict[str, str]] = {"words": "int"}

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.words < 1:
                raise FieldError("words", f"must be 1 or more, got {self.words}; give the least word count")

        def run_prepared(self, prepared):
            found = len(prepared.normalized.split())
            return (True, "") if found >= self.words else (False, f"{found} words, expected at least {self.words}")

    # Step 2: register it (the module's export line has no behaviour to check).
    monkeypatch.setitem(registry.TEST_CLASSES, "toy_words", ToyWordCountTest)

    # Step 3: nothing else. Loading, validation, the filter flag, the rewards and their telemetry follow.
    from olmocr_rl.bench import load_tests
    from olmocr_rl.config import parse_args, validate
    from olmocr_rl.data import OlmOCRBenchDataset
    from olmocr_rl.data.validation import validate_bench_folder
    from olmocr_rl.rewards import build_reward_functions
    from olmocr_rl.telemetry.pass_rates import DetailedRewardLogger

    page = {"pdf": "simple_lines.pdf", "page": 1}
    tests = [{**page, "id": "w3", "type": "toy_words", "words": 3},
             {**page, "id": "w9", "type": "toy_words", "words": 9},
             {**page, "id": "p1", "type": "present", "text": "Hello world."}]
    folder = _one_page_bench(tmp_path, tests)
    assert [t.type for t in load_tests(folder / "toy.jsonl")] == ["toy_words", "toy_words", "present"]
    report = validate_bench_folder(folder)
    assert report.ok, report.format()
    assert report.summary.tests_by_type == {"present": 1, "toy_words": 2}
    assert "toy_words" in report.format()

    bad = _one_page_bench(tmp_path / "bad", [{**page, "id": "w0", "type": "toy_words", "words": 0}])
    [problem] = validate_bench_folder(bad).problems
    assert str(problem).endswith("toy.jsonl:1: field 'words': must be 1 or more, got 0; give the least word count")

    argv = ["--train_bench_data_folder", str(folder), "--reward_bench_macroavg", "--bench_type_filter", "toy_words",
            "--num_generations", "2", "--gradient_accumulation_steps", "2", "--report_to", "none"]
    assert validate(parse_args(argv)).bench_type_filter == ("toy_words",)
    dataset = OlmOCRBenchDataset(folder, test_types=["toy_words"])
    assert dataset.summary["tests_by_type"] == {"toy_words": 2} and len(dataset) == 1

    logger = DetailedRewardLogger()
    funcs, _, _ = build_reward_functions({"bench": 1.0, "bench_macroavg": 1.0}, reward_logger=logger, workers=1)
    item = dataset[0]
    assert item["test_ids"] == ["w3", "w9"]  # the type filter kept the toy tests only
    columns = dict(pdf_path=[item["pdf_path"]], jsonl_files=[item["jsonl_files"]], test_ids=[["w3", "w9", "p1"]])
    completion = "Hello world. One two three."  # 5 words: w3 and p1 pass, w9 fails
    assert funcs[0](None, [completion], **columns) == [pytest.approx(2 / 3)]  # micro
    assert funcs[1](None, [completion], **columns) == [pytest.approx((1 / 2 + 1) / 2)]  # macro over the two types
    summary = logger.summary()  # recorded once, by the micro reward
    assert summary["bench_reward/toy_words/total_tests"] == 2 and summary["bench_reward/present/total_tests"] == 1
    assert summary["bench_reward/toy_words/pass_rate"] == 0.5
    funcs[0].scorer.close()
