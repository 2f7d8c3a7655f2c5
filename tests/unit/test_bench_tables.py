"""Table parsing (markdown and HTML, spans) and the table test's relations, on hand-worked tables."""

from __future__ import annotations

import pytest

from olmocr_rl.bench import load_single_test
from olmocr_rl.bench.tables import parse_html_tables, parse_markdown_tables

BASE = {"pdf": "doc.pdf", "page": 1, "id": "t", "type": "table"}

MARKDOWN = """Some text

| A | B | C |
|---|:-:|---|
| 1 | 2 | 3 |
| 4 | 5 | 6 |

After."""

# Name spans two header rows, Score two columns; Bob's "absent" spans Math and Art.
HTML = """<table>
<thead><tr><th rowspan="2">Name</th><th colspan="2">Score</th></tr>
<tr><th>Math</th><th>Art</th></tr></thead>
<tr><td>Ann</td><td>90</td><td>85</td></tr>
<tr><td>Bob</td><td colspan="2">absent</td></tr>
</table>"""


def table_test(**fields):
    return load_single_test({**BASE, **fields})


def texts(table, cells):
    return sorted(table.cell_text[c] for c in cells)


def test_markdown_table_grid_and_relations():
    (table,) = parse_markdown_tables(MARKDOWN)
    cell = {text: rc for rc, text in table.cell_text.items()}
    assert len(table.cell_text) == 9 and table.is_rectangular
    five = cell["5"]
    assert five == (2, 1)
    assert texts(table, table.up_relations[five]) == ["2"]
    assert texts(table, table.left_relations[five]) == ["4"]
    assert texts(table, table.right_relations[five]) == ["6"]
    assert table.down_relations[five] == frozenset()
    # Row 0 and column 0 are headings in markdown.
    assert texts(table, table.top_heading_relations(*five)) == ["B"]
    assert texts(table, table.left_heading_relations(*five)) == ["4"]


def test_html_spans_give_several_neighbours_and_headings():
    (table,) = parse_html_tables(HTML)
    cell = {text: rc for rc, text in table.cell_text.items()}
    assert texts(table, table.up_relations[cell["absent"]]) == ["85", "90"]
    assert texts(table, table.left_relations[cell["absent"]]) == ["Bob"]
    assert texts(table, table.down_relations[cell["Score"]]) == ["Art", "Math"]
    assert texts(table, table.down_relations[cell["Name"]]) == ["Ann"]
    # Walking up from 90 reaches both heading rows.
    assert texts(table, table.top_heading_relations(*cell["90"])) == ["Math", "Score"]
    # No heading to the left of 90: the walk's end (Ann) is used.
    assert texts(table, table.left_heading_relations(*cell["90"])) == ["Ann"]
    assert table.is_rectangular


@pytest.mark.parametrize(
    "fields, passes",
    [
        ({"cell": "absent", "up": "85"}, True),
        ({"cell": "absent", "up": "90"}, True),
        ({"cell": "absent", "up": "Art"}, False),
        ({"cell": "90", "top_heading": "Score"}, True),
        ({"cell": "85", "top_heading": "Math"}, False),
        ({"cell": "Bob", "right": "absent"}, True),
        ({"cell": "Name", "down": "Ann"}, True),
        ({"cell": "Ann", "up": "Name", "right": "90"}, True),
        ({"cell": "Ann", "up": "Name", "right": "85"}, False),
        ({"cell": "Scor", "max_diffs": 1}, True),  # ratio 8/9 ≥ 1 - 1/4
        ({"cell": "Nobody"}, False),
    ],
)
def test_table_test_on_spanned_html(fields, passes):
    passed, why = table_test(**fields).run("Intro\n" + HTML)
    assert passed is passes
    assert (why == "") is passes


def test_span_relations_need_html():
    # Markdown has no spans: "absent" is one cell over Math's column only.
    markdown = "| Name | Math | Art |\n|---|---|---|\n| Bob | absent | |\n| Ann | 90 | 85 |"
    assert not table_test(cell="85", up="absent").run(markdown)[0]
    assert table_test(cell="85", up="").run(markdown)[0]  # an empty relation is not checked
    # A ragged row leaves an empty slot, which relations skip: 85's up is then Art.
    ragged = "| Name | Math | Art |\n|---|---|---|\n| Bob | absent |\n| Ann | 90 | 85 |"
    assert table_test(cell="85", up="Art").run(ragged)[0]
    assert table_test(cell="absent", up="Math").run(markdown)[0]


def test_markdown_tables_can_be_ignored():
    test = table_test(cell="5", left="4", ignore_markdown_tables=True)
    assert test.run(MARKDOWN) == (False, "No tables found in the content")
    assert table_test(cell="5", left="4").run(MARKDOWN)[0]


def test_no_tables_and_explanations():
    assert table_test(cell="x").run("plain text") == (False, "No tables found in the content")
    passed, why = table_test(cell="Ann", right="85").run(HTML)
    assert not passed and "right" in why and "'90'" in why


def test_threshold_floor_of_one_half():
    # max_diffs 2 on a 2-character cell: 1 - 2/2 = 0 is floored at 0.5; ratio("ab", "xb") = 0.5.
    html = "<table><tr><td>xb</td></tr></table>"
    assert table_test(cell="ab", max_diffs=2).run(html)[0]
    assert not table_test(cell="ab", max_diffs=2).run("<table><tr><td>xy</td></tr></table>")[0]


def test_cell_text_is_normalised_and_br_is_a_line_break():
    html = "<table><tr><td>net<br>income</td><td>**12**</td></tr></table>"
    assert table_test(cell="net income", right="12").run(html)[0]


def test_html_tree_is_built_like_beautifulsoup():
    # No implied end tags: an unclosed <td> swallows the next one, so the row has one cell "ab".
    (table,) = parse_html_tables("<table><tr><td>a<td>b</tr></table>")
    assert list(table.cell_text.values()) == ["ab"]
    # Entities, comments, script text, uppercase tags.
    (table,) = parse_html_tables("<TABLE><TR><TD>&amp;<!-- hidden --><script>x</script>&#65;</TD></TR></TABLE>")
    assert list(table.cell_text.values()) == ["&A"]


def test_rowspan_zero_and_bad_spans():
    (table,) = parse_html_tables(
        "<table><tr><td rowspan='0'>L</td><td colspan='x'>a</td></tr><tr><td>b</td></tr><tr><td>c</td></tr></table>"
    )
    cell = {text: rc for rc, text in table.cell_text.items()}
    assert texts(table, table.right_relations[cell["L"]]) == ["a", "b", "c"]
    assert table.is_rectangular


def test_nested_tables_count_twice():
    html = "<table><tr><td>outer<table><tr><td>inner</td></tr></table></td></tr></table>"
    outer, inner = parse_html_tables(html)
    assert list(inner.cell_text.values()) == ["inner"]
    # The outer table's rows include the nested row; its first cell's text includes the inner text.
    assert sorted(outer.cell_text.values()) == ["inner", "outerinner"]


def test_ragged_and_rectangular():
    (table,) = parse_html_tables("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>")
    assert not table.is_rectangular


def test_huge_spans_are_clamped_and_the_grid_is_bounded():
    # Each row's cell starts after the still-active spans above it: three cells, each 1000 columns
    # wide (colspan clamped as browsers do), so the third sits at column 2000.
    html = "<table>" + "<tr><td colspan='100000' rowspan='100000'>x</td></tr>" * 3 + "</table>"
    (table,) = parse_html_tables(html)
    assert sorted(table.cell_text) == [(0, 0), (1, 1000), (2, 2000)]
    # Rows past the slot budget are dropped: 300 such rows do not each get a cell.
    (big,) = parse_html_tables("<table>" + "<tr><td colspan='100000' rowspan='100000'>x</td></tr>" * 300 + "</table>")
    assert len(big.cell_text) < 300
