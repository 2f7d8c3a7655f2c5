"""Strict loading of olmOCR-bench JSONL: every user error names file, line and field."""

from __future__ import annotations

import json
import pickle

import pytest

from olmocr_rl.bench import TEST_TYPES, TestLoadError, load_single_test, load_tests
from olmocr_rl.bench.types.text import PresenceTest

BASE = {"pdf": "doc.pdf", "page": 1, "id": "t1"}


def line(**fields) -> str:
    return json.dumps({**BASE, **fields})


def write(tmp_path, *lines: str, name: str = "dataset.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_all_eight_types_load_from_dicts_and_strings():
    definitions = [
        {"type": "present", "text": "hello"},
        {"type": "absent", "text": "footer"},
        {"type": "order", "before": "first", "after": "second"},
        {"type": "table", "cell": "3.32T", "left": "3.71T"},
        {"type": "math", "math": "a^{2}+b^{2}=c^{2}"},
        {"type": "baseline", "max_length": 10},
        {"type": "format", "text": "Intro", "format": "heading"},
        {"type": "footnote", "marker": "1", "appears_after_marker": "See the appendix"},
    ]
    assert sorted(TEST_TYPES) == sorted(d["type"] for d in definitions)
    for definition in definitions:
        from_dict = load_single_test({**BASE, **definition})
        from_string = load_single_test(json.dumps({**BASE, **definition}))
        assert from_dict == from_string
        assert (from_dict.id, from_dict.type, from_dict.pdf, from_dict.page, from_dict.max_diffs) == ("t1", definition["type"], "doc.pdf", 1, 0)


def test_reference_text_is_normalised_at_load():
    test = load_single_test({**BASE, "type": "present", "text": "“Quoted” **bold**  text—dash"})
    assert test.text == '"Quoted" bold text-dash'


def test_error_message_names_file_line_and_field(tmp_path):
    path = write(tmp_path, line(type="present", text="hello"), "", line(id="t2", type="present", text="31 characters of text, exactly", max_diffs=40))
    with pytest.raises(TestLoadError) as caught:
        load_tests(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), 3, "max_diffs")
    assert str(error) == f"{path}:3: field 'max_diffs': 40 is larger than the text it applies to (30 chars); lower it"


@pytest.mark.parametrize(
    "fields, field, fragment",
    [
        ({"type": "present"}, "text", "missing"),
        ({"type": "present", "text": "   "}, "text", "empty"),
        ({"type": "present", "text": "**"}, "text", "empty"),
        ({"type": "present", "text": 5}, "text", "expected a string, got number 5"),
        ({"type": "present", "text": "x", "case_sensitive": "no"}, "case_sensitive", "expected true or false"),
        ({"type": "present", "text": "x", "page": "1"}, "page", "expected an integer"),
        ({"type": "present", "text": "x", "page": 0}, "page", "numbered from 1"),
        ({"type": "present", "text": "x", "max_diffs": True}, "max_diffs", "expected an integer"),
        ({"type": "present", "text": "x", "max_diffs": -1}, "max_diffs", "0 or more"),
        ({"type": "present", "text": "abc", "max_diffs": 3}, "max_diffs", "equals the length"),
        ({"type": "present", "text": "x", "colour": "red"}, "colour", "unknown field"),
        ({"type": "present", "text": "x", "id": ""}, "id", "empty"),
        ({"type": "present", "text": "x", "pdf": ""}, "pdf", "empty"),
        ({"type": "present", "text": "x", "checked": "maybe"}, "checked", "verified"),
        ({"type": "order", "before": "abcd", "after": "efghij", "max_diffs": 3}, "max_diffs", "half the 'before' text"),
        ({"type": "table", "cell": ""}, "cell", "empty"),
        ({"type": "table", "cell": "x", "up": 3}, "up", "expected a string or null"),
        ({"type": "math", "math": " "}, "math", "empty"),
        ({"type": "math", "math": "\\frac{a}{b"}, "math", "does not parse"),
        ({"type": "math", "math": "x \\label{eq}"}, "math", "\\label"),
        ({"type": "baseline", "max_repeats": 0}, "max_repeats", "at least 1"),
        ({"type": "format", "text": "x", "format": "underline"}, "format", "heading, bold, italic"),
        ({"type": "footnote", "marker": "a b"}, "marker", "cannot contain whitespace"),
        ({"type": "footnote", "marker": "1", "appears_before_marker": "--"}, "appears_before_marker", "letters or digits"),
        ({"type": "colour"}, "type", "unknown test type 'colour'"),
        ({}, "type", "missing"),
    ],
)
def test_invalid_definitions_are_rejected_with_the_field(fields, field, fragment):
    data = {**BASE, **fields}
    with pytest.raises(TestLoadError) as caught:
        load_single_test(data, source="bench.jsonl", line=7)
    assert caught.value.field == field
    assert fragment in caught.value.reason
    assert str(caught.value).startswith(f"bench.jsonl:7: field '{field}': ")


def test_malformed_json_and_non_objects(tmp_path):
    path = write(tmp_path, '{"pdf": "a.pdf", ', "[1, 2]")
    tests, errors = load_tests(path, collect_errors=True)
    assert tests == []
    assert [(e.line, e.field) for e in errors] == [(1, None), (2, None)]
    assert "not valid JSON" in errors[0].reason
    assert "expected a JSON object, got list" in errors[1].reason


def test_collect_errors_returns_good_tests_and_every_error(tmp_path):
    path = write(
        tmp_path,
        line(id="a", type="present", text="one"),
        line(id="b", type="present"),
        "",
        line(id="c", type="absent", text="two"),
        line(id="a", type="absent", text="three"),
        line(id="d", type="nonsense"),
    )
    tests, errors = load_tests(path, collect_errors=True)
    assert [t.id for t in tests] == ["a", "c"]
    assert [(e.line, e.field) for e in errors] == [(2, "text"), (5, "id"), (6, "type")]
    assert "already used on line 1" in errors[1].reason
    with pytest.raises(TestLoadError) as caught:
        load_tests(path)
    assert caught.value.line == 2


def test_blank_lines_and_missing_trailing_newline_are_fine(tmp_path):
    path = tmp_path / "blanks.jsonl"
    path.write_text("\n\n" + line(type="baseline", max_length=10), encoding="utf-8")
    (test,) = load_tests(path)
    assert test.type == "baseline" and test.max_length == 10


def test_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(TestLoadError, match="file not found"):
        load_tests(tmp_path / "nope.jsonl")
    tests, errors = load_tests(tmp_path / "nope.jsonl", collect_errors=True)
    assert tests == [] and len(errors) == 1


def test_tests_are_immutable_hashable_and_picklable():
    test = load_single_test({**BASE, "type": "present", "text": "Hello", "case_sensitive": False})
    with pytest.raises(Exception):
        test.text = "other"  # type: ignore[misc]
    assert hash(test) == hash(load_single_test({**BASE, "type": "present", "text": "Hello", "case_sensitive": False}))
    copy = pickle.loads(pickle.dumps(test))
    assert copy == test and copy.run("say hello there") == (True, "")
    error = TestLoadError("bad", path="x.jsonl", line=3, field="text")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_direct_construction_validates_too():
    with pytest.raises(ValueError):
        PresenceTest(pdf="a.pdf", page=1, id="x", type="present", text="")


def test_one_jsonl_reader_serves_the_loader_the_data_scan_and_the_reward_cache(tmp_path, monkeypatch):
    """bench.loading.read_test_jsonl is the only JSONL reader: all three callers report a bad line alike."""
    from olmocr_rl.bench import loading
    from olmocr_rl.data.scan import read_test_refs
    from olmocr_rl.rewards.page_tests import PageKey, PageTestCache

    good = line(id="a", type="present", text="one\u2028two")  # U+2028 inside a string is not a line break
    path = write(tmp_path, good, '{"pdf": "doc.pdf", ', "[1, 2]")
    expected = [
        f"{path}:2: not valid JSON (Expecting property name enclosed in double quotes at column 20); "
        "write one JSON object per line",
        f"{path}:3: expected a JSON object, got list; write each test as one JSON object",
    ]
    reads = []
    real = loading.read_test_jsonl
    monkeypatch.setattr(loading, "read_test_jsonl", lambda p: reads.append(str(p)) or real(p))
    import olmocr_rl.data.scan as scan_module
    import olmocr_rl.rewards.page_tests as page_tests_module

    monkeypatch.setattr(scan_module, "read_test_jsonl", loading.read_test_jsonl)
    monkeypatch.setattr(page_tests_module, "read_test_jsonl", loading.read_test_jsonl)

    tests, errors = load_tests(path, collect_errors=True)
    refs, problems = read_test_refs(path)
    page = PageTestCache().get(PageKey.build([str(path)], ["a"]))
    assert [t.id for t in tests] == [r.id for r in refs] == [t.test.id for t in page.tests] == ["a"]
    assert [str(e) for e in errors] == [str(p) for p in problems] == list(page.load_errors) == expected
    assert reads == [str(path)] * 3


def test_the_jsonl_reader_locates_unreadable_files(tmp_path):
    from olmocr_rl.bench.loading import read_test_jsonl

    path = tmp_path / "latin1.jsonl"
    path.write_bytes(line(id="a", type="present", text="x").encode() + b"\n" + '{"text": "caf\xe9"}'.encode("latin-1"))
    entries, errors = read_test_jsonl(path)
    assert entries == [] and [str(e) for e in errors] == [f"{path}:2: not UTF-8 text; save the file as UTF-8"]
    entries, errors = read_test_jsonl(tmp_path / "nope.jsonl")
    assert [str(e) for e in errors] == [f"{tmp_path / 'nope.jsonl'}: file not found; check the path"]


def test_a_json_string_that_is_not_an_object_gets_one_error(monkeypatch):
    """A string is parsed and checked once; a dict is checked once; both name the object problem."""
    from olmocr_rl.bench import loading

    checks = []
    real = loading._require_object

    def counting(*args, **kwargs):
        checks.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(loading, "_require_object", counting)
    with pytest.raises(TestLoadError, match="expected a JSON object, got list"):
        load_single_test("[1, 2]", source="t.jsonl", line=3)
    assert len(checks) == 1
    load_single_test('{"pdf": "a.pdf", "page": 1, "id": "x", "type": "present", "text": "hi"}')
    assert len(checks) == 2
