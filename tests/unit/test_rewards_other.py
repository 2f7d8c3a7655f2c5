"""The non-bench olmOCR rewards on hand-worked examples (docs/rewards.md)."""

from __future__ import annotations

import pytest

from olmocr_rl.rewards import (
    bench_edit_distance_reward,
    make_reward_eos,
    medoid_reward,
    reward_element_count,
    reward_front_matter,
    reward_rect_tables,
)
from olmocr_rl.rewards.similarity import medoid_scores


def page(language="en", rotation_valid=True, rotation=0, table=False, diagram=False, body="Some text."):
    return (
        f"---\nprimary_language: {language}\nis_rotation_valid: {rotation_valid}\n"
        f"rotation_correction: {rotation}\nis_table: {table}\nis_diagram: {diagram}\n---\n{body}"
    )


def as_message(text):
    return [{"role": "assistant", "content": text}]


# --- front matter -------------------------------------------------------------------------------


def test_front_matter_without_front_matter_scores_zero():
    assert reward_front_matter([None], ["Just text, no front matter."]) == [0.0]


def test_front_matter_valid_without_reference_scores_half():
    assert reward_front_matter([None], [page()], claude_original=[None]) == [0.5]
    assert reward_front_matter([None], [page()]) == [0.5]


def test_front_matter_fields_add_a_tenth_each():
    reference = page(language="en", rotation_valid=True, rotation=0, table=False, diagram=False)
    completions = [
        page(),  # all five equal -> 0.5 + 0.5
        page(table=True, diagram=True),  # 3 of 5 equal -> 0.8
        page(language="de", rotation_valid=False, rotation=90, table=True, diagram=True),  # none equal -> 0.5
    ]
    rewards = reward_front_matter([None] * 3, [as_message(c) for c in completions], claude_original=[reference] * 3)
    assert rewards == [1.0, 0.8, 0.5]


def test_front_matter_quoted_values_are_coerced_before_comparing():
    quoted = '---\nprimary_language: en\nis_rotation_valid: "True"\nrotation_correction: "0"\nis_table: False\nis_diagram: False\n---\nx'
    assert reward_front_matter([None], [quoted], claude_original=[page()]) == [1.0]


@pytest.mark.parametrize(
    "bad",
    [
        "---\nprimary_language: [en\n---\ntext",  # not YAML
        page(rotation="null"),  # rotation must be an int
        page(rotation=45),  # not a valid rotation
        "---\nprimary_language: en\n---\ntext",  # missing keys
        page().replace("---\nSome", "extra: 1\n---\nSome"),  # unexpected key
    ],
)
def test_front_matter_invalid_scores_zero(bad):
    assert reward_front_matter([None], [bad], claude_original=[page()]) == [0.0]


def test_front_matter_unparseable_reference_keeps_format_points(caplog):
    assert reward_front_matter([None, None], [page(), page()], claude_original=["not front matter"] * 2) == [0.5, 0.5]
    assert sum("reference front matter does not parse" in r.message for r in caplog.records) == 1


def test_front_matter_unreadable_completions_score_zero():
    assert reward_front_matter([None] * 4, [[], [{}], None, 3], claude_original=[page()] * 4) == [0.0] * 4


# --- EOS ----------------------------------------------------------------------------------------


def test_eos_reward_checks_the_last_token_only():
    reward_eos = make_reward_eos(7)
    assert reward_eos.__name__ == "reward_eos"
    ids = [[1, 2, 7], [7, 2], [], [7]]
    assert reward_eos([None] * 4, ["a"] * 4, completion_ids=ids) == [1.0, 0.0, 0.0, 1.0]


def test_eos_reward_accepts_several_eos_ids_and_tensors():
    torch = pytest.importorskip("torch")
    reward_eos = make_reward_eos([7, 9])
    ids = [torch.tensor([1, 9]), torch.tensor([1, 7]), torch.tensor([9, 1])]
    assert reward_eos([None] * 3, ["a"] * 3, completion_ids=ids) == [1.0, 1.0, 0.0]


def test_eos_reward_refuses_missing_inputs():
    with pytest.raises(ValueError, match="eos_token_id"):
        make_reward_eos(None)
    with pytest.raises(ValueError, match="completion_ids"):
        make_reward_eos(7)([None], ["a"])


# --- medoid -------------------------------------------------------------------------------------


def test_medoid_hand_worked():
    # d(aaaa, aaab) = 1, d(aaaa, bbbb) = 4, d(aaab, bbbb) = 3; means 2.5, 2, 3.5 -> medoid aaab; max 4.
    assert medoid_scores(["aaaa", "aaab", "bbbb"]) == [0.75, 1.0, 0.25]


def test_medoid_edge_cases():
    assert medoid_scores([]) == []
    assert medoid_scores(["x"]) == [1.0]
    assert medoid_scores(["same", "same", "same"]) == [1.0, 1.0, 1.0]
    # ties: "ab" and "ba" both have mean distance 2 -> the first is the medoid; "ab"->"ba" is 2 = max -> 0.
    assert medoid_scores(["ab", "ba"]) == [1.0, 0.0]


def test_medoid_reward_groups_by_page():
    completions = ["aaaa", "aaab", "bbbb", "zz"]
    one_page = medoid_reward([None] * 4, completions[:3])
    assert one_page == [0.75, 1.0, 0.25]
    grouped = medoid_reward([None] * 4, [as_message(c) for c in completions], pdf_path=["a.pdf"] * 3 + ["b.pdf"])
    assert grouped == [0.75, 1.0, 0.25, 1.0]


# --- edit distance ------------------------------------------------------------------------------


def test_edit_distance_is_rapidfuzz_ratio():
    # ratio = 2 * matches / total length: "abcd" vs "abce" -> 2 * 3 / 8 = 0.75
    assert bench_edit_distance_reward([None], ["abcd"], claude_original=["abce"]) == [0.75]
    assert bench_edit_distance_reward([None], [as_message("same")], claude_original=["same"]) == [1.0]


def test_edit_distance_missing_reference_or_completion_scores_zero():
    assert bench_edit_distance_reward([None, None], ["abc", None], claude_original=[None, "abc"]) == [0.0, 0.0]


# --- element count ------------------------------------------------------------------------------


def test_element_count_half_per_matching_count():
    reference = "<table><tr><td>1</td></tr></table>\n\\(x\\) and \\[y\\] and $$z$$"  # 1 table, 3 maths
    both = "<TABLE border=1><tr><td>a</td></tr></TABLE> \\(a\\) \\(b\\) $$c$$"  # 1 table, 3 maths
    tables_only = "<table></table> \\(a\\)"  # 1 table, 1 math
    neither = "no tables, \\[a\\]"  # 0 tables, 1 math
    rewards = reward_element_count([None] * 3, [both, tables_only, neither], claude_original=[reference] * 3)
    assert rewards == [1.0, 0.5, 0.0]


def test_element_count_missing_reference_scores_zero():
    assert reward_element_count([None], ["<table></table>"], claude_original=[None]) == [0.0]
    assert reward_element_count([None], ["x"]) == [0.0]


# --- rectangular tables -------------------------------------------------------------------------


def test_rect_tables_share_of_rectangular_html_tables():
    square = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
    ragged = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"
    spanned = '<table><tr><td colspan="2">ab</td></tr><tr><td>c</td><td>d</td></tr></table>'
    markdown = "| a | b |\n|---|---|\n| c |\n"
    rewards = reward_rect_tables([None] * 4, [square + ragged, spanned, markdown, as_message(ragged)])
    assert rewards == [0.5, 1.0, 1.0, 0.0]


def test_rect_tables_unreadable_completion_scores_zero():
    assert reward_rect_tables([None], [None]) == [0.0]
