"""Gaming probes (scripts/bench/gaming_probes.py): adversarial completions never out-score an honest transcription,
binary and continuous; on real model outputs, the exceptions are exactly the two the bench's test design allows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from olmocr_rl.bench import load_tests

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "gaming_probes.py"
REWARDS = ("olmocr_bench_reward", "olmocr_bench_continuous_reward")


@pytest.fixture(scope="module")
def gaming():
    spec = importlib.util.spec_from_file_location("gaming_probes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probes_are_what_the_table_says(gaming):
    made = gaming.probes("# Title\n\nHello world 42.\n\nLast line", max_chars=500)
    assert list(made) == list(gaming.PROBES)
    assert made["empty"] == "" and made["one character"] == "a"
    assert made["page twice"].count("Hello world") == 2
    assert made["markdown structure only"] == "# \n\n  .\n\n "
    loop = made["runaway repetition"]
    assert len(loop) == 500 and loop.startswith("# Title\n\nHe\nLast line Last line ") and "Hello" not in loop


def test_no_probe_beats_a_correct_transcription_on_the_repo_sample(gaming):
    results = gaming.probe_rewards(gaming.REPO_SAMPLE, max_chars=8_000)
    pages = gaming.pages(gaming.REPO_SAMPLE)
    for name in REWARDS:
        honest = results[name]["honest"]
        assert len(honest) == 10 and all(value == 1.0 for value in honest)
        for probe in gaming.PROBES[1:]:
            values = results[name][probe]
            assert sum(values) / len(values) < 0.95, (name, probe)  # below the honest 1.0 on average
            if probe in ("empty", "one character", "markdown structure only"):
                # Saying (almost) nothing ties with the honest transcription only where the page is blank.
                tied = [page["name"] for page, value in zip(pages, values) if value == 1.0]
                assert tied == ["blank.pdf:1"], (name, probe, tied)


@pytest.mark.shared
def test_on_real_outputs_only_absent_only_pages_and_order_repairs_beat_the_model(gaming, shared_sample):
    results = gaming.probe_rewards(shared_sample, max_chars=8_000)
    pages = gaming.pages(shared_sample)
    types = {test.id: test.type for jsonl in shared_sample.glob("*.jsonl") for test in load_tests(jsonl)}
    exceptions = set()
    for name in REWARDS:
        for index, page in enumerate(pages):
            honest = results[name]["honest"][index]
            page_types = {types[test_id] for test_id in page["test_ids"]}
            for probe in gaming.PROBES[1:]:
                value = results[name][probe][index]
                if value <= honest:
                    continue
                exceptions.add((name, probe))
                if probe in ("page twice", "page + unrelated text"):
                    # Doubling the page makes an order test's first 'before' precede its last 'after'; extra
                    # text can only nudge a failing fuzzy test's partial credit.
                    assert "order" in page_types or value - honest < 0.01, (name, probe, page["name"])
                else:
                    # A page whose tests are all `absent` (the model kept a header the tests want gone): saying
                    # nothing passes them all. No baseline test on the page catches it.
                    assert page_types == {"absent"}, (name, probe, page["name"])
    assert ("olmocr_bench_reward", "page twice") in exceptions  # the order repair is real, in both rewards
