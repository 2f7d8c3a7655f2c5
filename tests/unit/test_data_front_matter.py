"""The v4 prompt (byte-for-byte) and the front matter: split, parse/validate, format."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olmocr_rl.data.front_matter import (
    FrontMatterError,
    PageResponse,
    format_front_matter,
    parse_page_response,
    split_front_matter,
)
from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt

# Written out from the reference (§2.6), not from the implementation.
EXPECTED_PROMPT = (
    "Attached is one page of a document that you must process. Just return the plain text representation of "
    "this document as if you were reading it naturally. Convert equations to LateX and tables to HTML.\n"
    "If there are any figures or charts, label them with the following markdown syntax "
    "![Alt text describing the contents of the figure](page_startx_starty_width_height.png)\n"
    "Return your output as markdown, with a front matter section on top specifying values for the "
    "primary_language, is_rotation_valid, rotation_correction, is_table, and is_diagram parameters."
)

GOOD = """---
primary_language: en
is_rotation_valid: True
rotation_correction: 0
is_table: False
is_diagram: False
---
# Title

Some text."""


def test_prompt_is_byte_for_byte_olmocr_v4():
    prompt = build_no_anchoring_v4_yaml_prompt()
    assert prompt == EXPECTED_PROMPT
    assert prompt.count("\n") == 2 and not prompt.endswith("\n")
    assert "Convert equations to LateX and tables to HTML." in prompt


def test_split_standard_completion():
    front, body = split_front_matter(GOOD)
    assert front == {
        "primary_language": "en",
        "is_rotation_valid": True,
        "rotation_correction": 0,
        "is_table": False,
        "is_diagram": False,
    }
    assert body == "# Title\n\nSome text."


@pytest.mark.parametrize(
    "text, expected",
    [
        ("plain page text\n", (None, "plain page text")),  # no front matter: whole text, stripped
        ("---\nprimary_language: en\nno closing line", (None, "---\nprimary_language: en\nno closing line")),
        ("---\n---\nbody", ({}, "body")),  # an empty block is present and empty
        ("---\nkey: [unclosed\n---\nbody", (None, "---\nkey: [unclosed\n---\nbody")),  # not YAML: kept as text
        ("---\nJust a line\n---\nbody", (None, "---\nJust a line\n---\nbody")),  # YAML scalar: not front matter
        (" ---\nkey: v\n---\nbody", (None, "---\nkey: v\n---\nbody")),  # must start at the first character
        ("---\nkey: v\n---", ({"key": "v"}, "")),  # front matter only (a blank page)
        ("", (None, "")),
    ],
)
def test_split_edge_cases(text, expected):
    assert split_front_matter(text) == expected


def test_split_non_string_never_raises():
    assert split_front_matter(None) == (None, "")  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("-\n :[]{}!&*ab1'\"")), max_size=60))
def test_split_never_raises_and_body_is_stripped(text):
    front, body = split_front_matter("---\n" + text)
    assert front is None or isinstance(front, dict)
    assert body == body.strip()


def test_parse_valid_page():
    response = parse_page_response(GOOD)
    assert response == PageResponse("en", True, 0, False, False, "# Title\n\nSome text.")


def _with(**values) -> str:
    fields = {
        "primary_language": "en",
        "is_rotation_valid": "True",
        "rotation_correction": "0",
        "is_table": "False",
        "is_diagram": "False",
    }
    fields.update(values)
    lines = [f"{key}: {value}" for key, value in fields.items() if value is not None]
    return "---\n" + "\n".join(lines) + "\n---\nbody"


@pytest.mark.parametrize(
    "values, field, expected",
    [
        ({"rotation_correction": "'90'"}, "rotation_correction", 90),  # numeric string -> int
        ({"is_table": "'TRUE'"}, "is_table", True),  # "true" in any case -> True
        ({"is_table": "'yes'"}, "is_table", False),  # any other string -> False
        ({"is_diagram": "true"}, "is_diagram", True),  # YAML boolean
        ({"primary_language": "no"}, "primary_language", None),  # YAML boolean `no` -> None (olmOCR's rule)
        ({"primary_language": "''"}, "primary_language", None),  # empty string -> None
        ({"primary_language": "null"}, "primary_language", None),
        ({"primary_language": "de"}, "primary_language", "de"),
    ],
)
def test_parse_coercions(values, field, expected):
    assert getattr(parse_page_response(_with(**values)), field) == expected


@pytest.mark.parametrize(
    "text, fragments",
    [
        (_with(rotation_correction="45"), ["rotation_correction", "0, 90, 180, 270", "45"]),
        (_with(rotation_correction="null"), ["rotation_correction"]),
        (_with(rotation_correction="90.0"), ["rotation_correction"]),
        (_with(is_table="null"), ["is_table", "True or False"]),
        (_with(is_rotation_valid="1"), ["is_rotation_valid"]),
        (_with(primary_language="123"), ["primary_language"]),
        (_with(is_diagram=None), ["missing key(s) is_diagram"]),
        (_with(extra="1"), ["unexpected key(s) extra"]),
        ("no front matter here", ["no front matter", "'---'"]),
        ("---\nprimary_language: [\n---\nbody", ["not valid YAML"]),
        ("---\n- a\n- b\n---\nbody", ["'key: value' lines", "list"]),
    ],
)
def test_parse_errors_name_the_problem(text, fragments):
    with pytest.raises(FrontMatterError) as info:
        parse_page_response(text)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_parse_empty_body_gives_no_text():
    text = _with().replace("\nbody", "\n  \n")
    assert parse_page_response(text).natural_text is None


def test_page_response_validates_itself():
    with pytest.raises(ValueError, match="rotation_correction"):
        PageResponse("en", True, 45, False, False, None)
    with pytest.raises(TypeError, match="is_table"):
        PageResponse("en", True, 0, "False", False, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rotation_correction"):
        PageResponse("en", True, False, False, False, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="primary_language"):
        PageResponse(7, True, 0, False, False, None)  # type: ignore[arg-type]
    response = PageResponse(None, False, 270, True, True, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        response.is_table = False  # type: ignore[misc]


def test_format_is_the_sft_layout():
    response = PageResponse("en", True, 90, True, False, "Cell A | Cell B\n")
    assert format_front_matter(response) == (
        "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 90\n"
        "is_table: True\nis_diagram: False\n---\nCell A | Cell B"
    )


def test_format_blank_page_and_round_trip():
    blank = PageResponse("en", True, 0, False, False, None)
    assert format_front_matter(blank).endswith("is_diagram: False\n---")
    assert parse_page_response(format_front_matter(blank)) == blank
    page = PageResponse("fr", False, 180, False, True, "# Titre\n\nTexte.")
    assert parse_page_response(format_front_matter(page)) == page


def test_format_none_language_reads_back_as_the_string_none():
    # olmOCR writes a missing language with str(None); YAML reads that back as the text "None".
    text = format_front_matter(PageResponse(None, True, 0, False, False, "x"))
    assert "primary_language: None\n" in text
    assert parse_page_response(text).primary_language == "None"


def test_yaml_value_errors_are_front_matter_errors():
    # PyYAML raises ValueError (not YAMLError) for an impossible date; still "not valid YAML" for us.
    text = "---\nprimary_language: 2020-13-45\n---\nbody"
    assert split_front_matter(text) == (None, text)
    with pytest.raises(FrontMatterError, match="not valid YAML"):
        parse_page_response(text)


def test_split_results_are_private_copies():
    first, _ = split_front_matter(GOOD)
    first["is_table"] = "changed"
    nested, _ = split_front_matter("---\nkeys: [1, 2]\n---\nx")
    nested["keys"].append(3)
    assert split_front_matter(GOOD)[0]["is_table"] is False
    assert split_front_matter("---\nkeys: [1, 2]\n---\nx")[0] == {"keys": [1, 2]}
