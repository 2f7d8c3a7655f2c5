"""olmocr_rl.synth without a browser: the HTML tree, each test rule, references, the guarantee's checks, the golden
files of the shipped pages, bad input, the output folder (plan, shards, merge, another bench), the missing-browser line.
The browser half is tests/integration/test_synth_browser.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from olmocr_rl.bench import evaluate_page, load_single_test
from olmocr_rl.bench.prepared import SCORING_RULES
from olmocr_rl.data.front_matter import split_front_matter
from olmocr_rl.synth import cli
from olmocr_rl.synth.content import page_content
from olmocr_rl.synth.derive import DEFAULT_CAPS, derive_tests
from olmocr_rl.synth.guarantee import check_tests, on_layer, text_layer_of
from olmocr_rl.synth.output import (OutputError, check_out_dir, merge_shards, parse_shard, plan_pages, take_shard,
                                    write_outputs)
from olmocr_rl.synth.pipeline import PageJob, PageOptions, PageResult, PageSkip, make_page
from olmocr_rl.synth.reference import reference_text
from olmocr_rl.synth.render import fix_pdf_dates
from olmocr_rl.synth.tree import parse_html

PAGES = REPO_ROOT / "tests" / "fixtures" / "synth" / "pages"
GOLDEN = REPO_ROOT / "tests" / "fixtures" / "synth" / "golden"


def _page(name: str, seed: int = 0) -> PageResult:
    job = next(j for j in plan_pages(PAGES, "synth") if j.rel == name)
    result = make_page(job, PageOptions(seed=seed), None)
    assert isinstance(result, PageResult), result
    return result


def _html(tmp_path: Path, body: str, name: str = "p.html") -> PageJob:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return PageJob(str(path), name, "t", f"t/{path.stem}.pdf", f"t_{path.stem}")


def test_golden_files_match_the_shipped_pages():
    spec = importlib.util.spec_from_file_location("synth_golden", REPO_ROOT / "scripts" / "synth_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = module.golden_files()
    assert sorted(made) == sorted(p.name for p in GOLDEN.iterdir()), "run python scripts/synth_golden.py"
    for name, text in made.items():
        assert text == (GOLDEN / name).read_text(encoding="utf-8"), f"{name} changed: python scripts/synth_golden.py"


@pytest.mark.parametrize("name", sorted(p.name for p in PAGES.glob("*.html")))
def test_every_written_test_passes_on_its_reference_and_fails_on_an_empty_page(name):
    result = _page(name)
    body = split_front_matter(result.reference)[1]
    for data in result.tests:
        test = load_single_test(data)
        for rule in SCORING_RULES:
            assert evaluate_page([test], body, rule)[0][1], (data, rule)
        if data["type"] not in ("absent",):
            assert not evaluate_page([test], "")[0][1], data


def test_a_header_nested_in_wrappers_is_furniture_and_becomes_absent_tests():
    result = _page("nested_header.html")
    absent = {t["text"] for t in result.tests if t["type"] == "absent"}
    assert absent == {"The Meridian Gazette", "Volume XII, Issue 4", "Meridian Gazette · Page 2"}
    assert "Meridian" not in result.reference and "Volume XII" not in result.reference
    assert sum(t["type"] == "table" for t in result.tests) >= 3  # the page keeps its table tests


def test_a_page_number_found_in_the_body_is_dropped_with_its_reason():
    result = _page("header_footer.html")
    assert "7" not in {t.get("text") for t in result.tests}
    (drop,) = [d for d in result.dropped if d["test"].get("text") == "7"]
    assert drop["reason"] == "reference" and "fails on the reference body" in drop["detail"]
    assert {"Northwind Logistics", "Quarterly Operations Review"} <= {t.get("text") for t in result.tests}


def test_table_tests_read_spans_on_the_grid():
    result = _page("spans_table.html")
    tables = {t["cell"]: t for t in result.tests if t["type"] == "table"}
    humanities = tables["Humanities"]  # rowspan 2: the cell below it is two rows down
    assert humanities["up"] == "Medicine" and humanities["down"] == "Law" and humanities["top_heading"] == "Faculty"
    after_span = tables["205"]  # left of it a colspan-2 cell; above it, a column under a colspan-2 heading
    assert after_span["left"] == "combined intake 2,996" and after_span["top_heading"] == "Postgraduate"
    assert '<td colspan="2">combined intake 2,996</td>' in result.reference
    assert '<th rowspan="2">Faculty</th>' in result.reference


def test_math_footnote_format_and_order_rules():
    math = _page("math.html")
    assert {t["math"] for t in math.tests if t["type"] == "math"} >= {r"m \frac{d^2 x}{dt^2} + k x = 0",
                                                                        r"T = 2 \pi \sqrt{\frac{m}{k}}"}
    assert r"\[E = \frac{1}{2} m v^2 + \frac{1}{2} k x^2\]" in math.reference and r"\(\omega = \sqrt{k/m}\)" in math.reference
    cols = _page("two_columns.html")
    notes = {t["marker"]: t["appears_before_marker"] for t in cols.tests if t["type"] == "footnote"}
    assert notes == {"1": "fell below a fixed threshold.", "2": "studies from the same institute."}
    formats = {(t["format"], t["text"]) for t in cols.tests if t["type"] == "format"}
    assert ("bold", "three experimental plots") in formats and ("italic", "earlier greenhouse studies") in formats
    orders = [t for t in cols.tests if t["type"] == "order"]
    assert orders and all(t["before"] != t["after"] for t in orders)


def test_the_seed_picks_the_tests_and_the_same_seed_the_same_ones():
    assert _page("nested_header.html", 0).tests == _page("nested_header.html", 0).tests
    assert _page("nested_header.html", 0).tests != _page("nested_header.html", 1).tests


def test_caps_and_type_filter():
    content = page_content(parse_html((PAGES / "spans_table.html").read_text()))
    capped = derive_tests(content, 0, "k", {**DEFAULT_CAPS, "table": 2}, ("table", "baseline"))
    assert [t["type"] for t in capped] == ["table", "table", "baseline"]


def test_a_page_without_tests_is_skipped_unless_only_baseline_was_asked(tmp_path):
    job = _html(tmp_path, "<div><span>x</span></div>")
    skip = make_page(job, PageOptions(), None)
    assert isinstance(skip, PageSkip) and skip.kind == "no_tests"
    kept = make_page(job, PageOptions(types=("baseline",)), None)
    assert isinstance(kept, PageResult) and [t["type"] for t in kept.tests] == ["baseline"]


def test_the_guarantee_names_each_reason(tmp_path):
    reference = "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n" \
                "is_diagram: False\n---\nAlpha beta gamma delta. Epsilon zeta eta theta."
    candidates = [
        {"type": "present", "text": "Alpha beta gamma delta."},
        {"type": "present", "text": "Alpha beta gamma delta."},  # duplicate
        {"type": "present", "text": ""},  # does not load
        {"type": "present", "text": "Iota kappa"},  # not in the reference
        {"type": "present", "text": "Epsilon zeta eta theta."},  # not on the (given) text layer
        {"type": "math", "math": "x^2"},
    ]
    layer = text_layer_of("Alpha beta gam\ufffe\r\nma delta. x\r\n2")
    result = check_tests(candidates, "t/p.pdf", "t_p", reference, layer, {"x^2": "x2"})
    reasons = [d["reason"] for d in result.dropped]
    assert [t["text"] for t in result.kept] == ["Alpha beta gamma delta."]
    assert reasons == ["duplicate", "load", "reference", "text_layer", "reference"]
    assert on_layer("gamma delta", layer) and not on_layer("Epsilon", layer)


def test_pdf_dates_are_fixed_without_moving_offsets():
    pdf = b"%PDF-1.4\n1 0 obj\n<</CreationDate (D:20261203174213+00'00') /ModDate (D:20261203174213+00'00')>>\n"
    fixed = fix_pdf_dates(pdf)
    assert len(fixed) == len(pdf) and b"20261203" not in fixed and fixed.count(b"D:20000101000000") == 2


@pytest.mark.parametrize("content, kind", [
    ("", "empty"),
    ("just some words, no markup at all\n", "not_html"),
    ("\x00\x01binary", "not_html"),
])
def test_bad_files_are_skipped_with_one_line(tmp_path, content, kind):
    skip = make_page(_html(tmp_path, content), PageOptions(), None)
    assert isinstance(skip, PageSkip) and skip.kind == kind and "\n" not in skip.reason


def test_a_file_over_the_size_limit_is_skipped_unread(tmp_path):
    job = _html(tmp_path, "<p>" + "word " * 400 + "</p>")
    skip = make_page(job, PageOptions(max_bytes=1000), None)
    assert isinstance(skip, PageSkip) and skip.kind == "too_large" and "--max_html_mb" in skip.reason


def test_a_ragged_table_is_noted_and_still_used(tmp_path):
    body = ("<p>The ledger below lists the quarterly totals of each branch office in the region.</p><table>"
            "<tr><th>Branch</th><th>Q1</th><th>Q2</th></tr><tr><td>North</td><td>41</td></tr>"
            "<tr><td>South</td><td>17</td><td>29</td><td>extra</td></tr><tr><td>East</td><td>33</td><td>36</td></tr>"
            "</table>")
    result = make_page(_html(tmp_path, body), PageOptions(), None)
    assert isinstance(result, PageResult) and any("ragged" in n for n in result.notices)


def test_plan_shards_and_subsets(tmp_path):
    for rel in ("a.html", "b.html", "sub/c.html", "sub/deeper/d.html", "e.htm", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<p>x</p>")
    jobs = plan_pages(tmp_path, "mine")
    assert [(j.subset, j.pdf) for j in jobs] == [
        ("mine", "mine/a.pdf"), ("mine", "mine/b.pdf"), ("mine", "mine/e.pdf"), ("mine_sub", "mine_sub/c.pdf"),
        ("mine_sub_deeper", "mine_sub_deeper/d.pdf")]
    parts = [take_shard(jobs, (k, 3)) for k in (1, 2, 3)]
    assert sorted(j.pdf for part in parts for j in part) == sorted(j.pdf for j in jobs)
    assert all(not set(map(id, a)) & set(map(id, b)) for a in parts for b in parts if a is not b)
    with pytest.raises(OutputError, match="1 <= K <= N"):
        parse_shard("4/3")


def test_an_output_folder_holding_another_bench_is_refused(tmp_path):
    (tmp_path / "other.jsonl").write_text("{}\n")
    with pytest.raises(OutputError, match="already holds another bench"):
        check_out_dir(tmp_path)
    assert cli.main(["--html", str(PAGES), "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "pdfs").exists()  # nothing written


def test_merge_joins_shards_and_refuses_a_missing_one(tmp_path):
    results = [_page("math.html"), _page("nested_header.html")]
    write_outputs(tmp_path, results[:1], {"tests": 1, "tests_by_type": {"math": 1}, "pages": [1]}, (1, 2))
    with pytest.raises(OutputError, match=r"shard\(s\) \[2\] of 2 missing"):
        merge_shards(tmp_path)
    write_outputs(tmp_path, results[1:], {"tests": 2, "tests_by_type": {"math": 2}, "pages": [2]}, (2, 2))
    (merged,) = merge_shards(tmp_path)
    lines = [json.loads(line) for line in merged.read_text().splitlines()]
    assert len(lines) == sum(len(r.tests) for r in results) and merged.name == "synth.jsonl"
    manifest = json.loads((tmp_path / "synth_manifest.json").read_text())
    assert manifest["tests_by_type"] == {"math": 3} and manifest["pages"] == [1, 2]
    assert not list(tmp_path.glob("*shard*"))


def test_no_browser_is_one_line_naming_the_package(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OLMOCR_RL_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli.main(["--html", str(PAGES), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no headless Chromium") and "chromium-headless-shell" in err[0]
    assert not (tmp_path / "out").exists()


def test_reference_is_written_from_content_alone():
    content = page_content(parse_html("<header>Running head</header><h2>Title here</h2><p>Body <b>bold words</b> "
                                      "and <i>it</i> \\(x^2\\).</p><footer>3</footer>"))
    text = reference_text(content)
    assert text.startswith("---\nprimary_language: en\n") and "Running head" not in text and "\n3" not in text
    assert "## Title here" in text and "**bold words**" in text and "*it*" in text and "\\(x^2\\)" in text


def test_the_katex_route_serves_only_files_inside_the_katex_folder(tmp_path):
    from olmocr_rl.synth.render import PAGE_ORIGIN, katex_file

    root = tmp_path / "dist"
    (root / "fonts").mkdir(parents=True)
    (root / "katex.min.css").write_text("css")
    (root / "fonts" / "KaTeX_Main-Regular.woff2").write_bytes(b"font")
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    (root / "leak.txt").symlink_to(secret)
    (root / "outside").symlink_to(tmp_path)
    (root / "inside.css").symlink_to(root / "katex.min.css")  # a symlink staying inside is fine
    root = root.resolve()
    served = {f"/katex/katex.min.css": root / "katex.min.css",
              "/katex/fonts/KaTeX_Main-Regular.woff2?v=1": root / "fonts" / "KaTeX_Main-Regular.woff2",
              "/katex/fonts/%4BaTeX_Main-Regular.woff2": root / "fonts" / "KaTeX_Main-Regular.woff2",
              "/katex/fonts/../katex.min.css": root / "katex.min.css", "/katex/inside.css": root / "katex.min.css"}
    for path, file in served.items():
        assert katex_file(root, PAGE_ORIGIN + path) == file, path
    hops = "../" * 12
    refused = [f"/katex/{secret}", f"/katex//{secret}", f"/katex/{hops}{secret}", f"/katex/%2e%2e/%2e%2e/{secret}",
               f"/katex/{'%2e%2e%2f' * 12}{str(secret)[1:]}", f"/katex/%2F{str(secret)[1:].replace('/', '%2F')}",
               f"/katex/..%5c..%5c{secret.name}", "/katex/leak.txt", "/katex/outside/secret.txt", "/katex/fonts",
               "/katex/", "/katex/fonts/x%00.woff2", "/katex/missing.css", f"/page.html/../katex/{secret}",
               f"/{secret}"]
    for path in refused:
        assert katex_file(root, PAGE_ORIGIN + path) is None, path
    assert katex_file(root, "http://example.com/katex/katex.min.css") is None
    assert katex_file(root, "file:///katex/katex.min.css") is None


LETTER = REPO_ROOT / "tests" / "fixtures" / "synth" / "letter" / "letter.html"
# The letter as a reader writes it: each <br> a new line, the blocks apart.
LETTER_TRANSCRIPTION = """Harbour Books Ltd
14 Quay Street
Bristol BS1 4DJ
12 March 2025

Ms Adaeze Okonkwo
27 Larkspur Avenue
Leeds LS6 2QT

Dear Ms Okonkwo,

Thank you for your order of the illustrated coastal atlas. The second volume is being reprinted by the publisher and
should reach our warehouse before the end of the month. We will send both volumes together so that you pay a single
delivery charge.

If you would rather receive the first volume straight away, please reply to this letter and we will dispatch it
within two working days.

Yours sincerely,
Thomas Whitfield
**Customer Services Manager**
"""


@pytest.mark.parametrize("seed", range(4))
def test_br_is_a_line_break_in_the_reference_and_a_word_boundary_in_every_test(tmp_path, seed):
    job = PageJob(str(LETTER), "letter.html", "t", "t/letter.pdf", "t_letter")
    result = make_page(job, PageOptions(seed=seed), None)
    assert isinstance(result, PageResult)
    body = split_front_matter(result.reference)[1]
    assert "14 Quay Street\nBristol BS1 4DJ\n12 March 2025" in body
    assert "Thomas Whitfield\n**Customer Services Manager**" in body
    for data in result.tests:
        assert not any(joined in json.dumps(data) for joined in ("StreetBristol", "4DJ12", "WhitfieldCustomer")), data
        test = load_single_test(data)
        for rule in SCORING_RULES:
            assert evaluate_page([test], LETTER_TRANSCRIPTION, rule)[0][1], (data, rule)
    heading = reference_text(page_content(parse_html("<h2>Annual report<br>2024</h2><p>a b</p>")))
    assert "## Annual report 2024\n" in heading  # a heading stays one line


def test_the_reference_lines_are_checked_on_the_layer_with_word_boundaries_and_in_order():
    from olmocr_rl.synth.shown import check_shown, order_on_layer, reference_lines, shown_in

    body = ("# Title here\n\nHarbour Books Ltd\n14 Quay Street\nBristol BS1 4DJ\n\nCrops fell below a fixed "
            "threshold.<sup>1</sup> And more **bold words** here.\n\n- item one\n- item *two*\n\n\\[E = mc^2\\]\n\n"
            "the \\(x\\)-axis is flat\n\n<table>\n<tr><th>Region</th><th>Sales</th></tr>\n<tr><td>North</td>"
            "<td>x &amp; y</td></tr>\n</table>")
    assert [(line.block, line.pieces) for line in reference_lines(body)][4:6] == [
        (2, [("text", "Crops fell below a fixed threshold."), ("sup", "1"), ("text", " And more **bold words** here.")]),
        (3, [("text", "item one")])]
    glyphs = {"E = mc^2": "E=mc2", "x": "x"}
    printed = ("Title here Harbour Books Ltd 14 Quay Street Bristol BS1 4DJ Crops fell below a fixed threshold. 1 "
               "And more bold words here. item one item two E=mc2 the x-axis is flat Region Sales North x & y")
    assert check_shown(body, printed, glyphs).ok
    assert check_shown(body, printed.replace("threshold. 1 And", "threshold.1 And"), glyphs).ok  # sup: either way
    joined = check_shown(body, printed.replace("Street Bristol", "StreetBristol"), glyphs)
    assert joined.missing == ["14 Quay Street", "Bristol BS1 4DJ"]  # the page joins what the reference splits
    assert check_shown("14 Quay StreetBristol", printed, {}).missing == ["14 Quay StreetBristol"]  # and the reverse
    assert check_shown("Quay", "Quays and", {}).missing == ["Quay"]  # a line never ends inside a printed word
    lost_math = check_shown(body, printed.replace("E=mc2", "E=m"), glyphs)
    assert lost_math.math_missing and not lost_math.missing
    floated = check_shown("Title here\n\nFirst column text.\n\nClosing line.",
                          "First column text. Title here Closing line.", {})
    assert floated.ok and floated.out_of_order == 1  # a float painted first: a notice, not a skip
    swapped = check_shown("first line\nsecond line", "second line first line", {})
    assert swapped.missing == ["first line (its block's lines are printed in another order)"]
    assert shown_in("Street Bristol", printed) and not shown_in("StreetBristol", printed)
    assert shown_in("\u201cbold\u201d", 'say "bold"') and shown_in("one two", "one\u00a0two")
    assert order_on_layer("item one", "item two", printed) and not order_on_layer("item two", "item one", printed)


def test_a_page_too_deep_or_failing_in_a_rule_is_skipped_with_its_reason_and_the_next_one_made(tmp_path, monkeypatch):
    from olmocr_rl.synth import derive
    from olmocr_rl.synth.tree import MAX_DEPTH

    deep = _html(tmp_path, "<div>" * 1000 + "<p>The innermost paragraph sits a thousand elements down.</p>"
                 + "</div>" * 1000, "deep.html")
    skip = make_page(deep, PageOptions(), None)
    assert isinstance(skip, PageSkip) and skip.kind == "too_deep" and f"more than {MAX_DEPTH} deep" in skip.reason
    nested = "<div>" * (MAX_DEPTH - 5) + "<p>Five levels short of the limit, this paragraph is read whole.</p>"
    assert isinstance(make_page(_html(tmp_path, nested, "just.html"), PageOptions(), None), PageResult)

    def broken(content, rng, cap):
        if "TRIGGER" in " ".join(b.text for b in content.blocks):
            raise KeyError("a bug in a rule")
        return []

    monkeypatch.setitem(derive.RULES, "format", broken)
    bad = make_page(_html(tmp_path, "<p>This TRIGGER page has enough words in it for tests.</p>", "bad.html"),
                    PageOptions(), None)
    assert isinstance(bad, PageSkip) and bad.kind == "error" and "KeyError" in bad.reason and "\n" not in bad.reason
    assert isinstance(make_page(next(j for j in plan_pages(PAGES, "synth") if j.rel == "math.html"), PageOptions(),
                                None), PageResult)


@pytest.fixture
def no_browser_cli(monkeypatch):
    """cli.main with the pages made as the golden tests make them (no browser, empty PDFs): the command's own flow
    (lock, writes, signals, manifest, last line) runs for real. Yields a list a test may fill with hooks
    ``hook(done)`` called after each page."""
    hooks: list = []

    def run_pages(jobs, options, workers, timeout_s):
        for done, job in enumerate(jobs, 1):
            yield make_page(job, options, None)
            for hook in hooks:
                hook(done)

    monkeypatch.setattr(cli, "check_setup", lambda: None)
    monkeypatch.setattr(cli, "run_pages", run_pages)
    monkeypatch.setattr(cli, "tool_versions", lambda: {"chromium": "test"})
    monkeypatch.setattr(cli, "verify_folder", lambda out, jsonls: [])  # the PDFs are empty here
    return hooks


def _last_err(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[synth] ")]


def test_a_second_run_into_the_same_folder_is_refused_in_one_line(tmp_path, no_browser_cli, capsys):
    from olmocr_rl.synth.output import out_lock

    out = tmp_path / "out"
    with out_lock(out, None):  # another run holds the folder (flock: a second open file conflicts in-process too)
        assert cli.main(["--html", str(PAGES), "--out", str(out)]) == 2
        (line,) = _last_err(capsys)
        assert line.startswith(f"error: --out {out} is in use by another synth run (pid ") and "wait for it" in line
        assert cli.main(["--html", str(PAGES), "--out", str(out), "--shard", "1/2"]) == 2  # a shard too
    with out_lock(out, (1, 2)):  # shard 1 running: shard 2 may run beside it, shard 1 again or a whole run not
        with out_lock(out, (2, 2)):
            pass
        with pytest.raises(OutputError, match=r"in use by another synth run \(pid \d+"):
            with out_lock(out, (1, 2)):
                pass
        with pytest.raises(OutputError, match=r"in use by another synth run \(shard run\(s\): pid"):
            with out_lock(out, None):
                pass
    assert cli.main(["--html", str(PAGES), "--out", str(out)]) == 0  # free again


def test_merge_refuses_shards_of_different_settings_naming_them(tmp_path, no_browser_cli, capsys):
    out = tmp_path / "out"
    assert cli.main(["--html", str(PAGES), "--out", str(out), "--shard", "1/2"]) == 0
    assert cli.main(["--html", str(PAGES), "--out", str(out), "--shard", "2/2", "--seed", "3",
                     "--cap", "present=2"]) == 0
    capsys.readouterr()
    assert cli.main(["--out", str(out), "--merge"]) == 2
    (line,) = _last_err(capsys)
    assert "different settings: --seed (shard 1/2: 0; shard 2/2: 3), --cap (shard 1/2: present=6; shard 2/2: " \
           "present=2)" in line
    assert len([p for p in out.glob("*shard-*") if not p.name.startswith(".")]) == 4  # nothing merged
    assert not (out / "synth.jsonl").exists()


def test_write_failures_and_signals_are_one_line_and_leave_no_temporary_file(tmp_path, no_browser_cli, capsys,
                                                                             monkeypatch):
    import errno
    import os
    import signal

    from olmocr_rl.synth import output

    out = tmp_path / "out"
    (out / "pdfs" / "synth").mkdir(parents=True)
    stale = out / "pdfs" / "synth" / ".math.pdf.tmp-99999999"  # left by a run that was killed
    stale.write_bytes(b"half")
    replace = os.replace

    def full_disk(src, dst):
        if "nested_header" in str(dst):
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(output.os, "replace", full_disk)
    assert cli.main(["--html", str(PAGES), "--out", str(out)]) == 1
    (line,) = _last_err(capsys)
    assert line.startswith(f"error: cannot write in --out {out}: no space left on device") and "rerun" in line
    assert not stale.exists() and not list(out.rglob("*.tmp-*"))  # the stale one cleaned, the failed one removed
    monkeypatch.setattr(output.os, "replace", replace)
    no_browser_cli.append(lambda done: done == 2 and os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["--html", str(PAGES), "--out", str(out)]) == 130
    (line,) = _last_err(capsys)
    assert line == (f"error: stopped by SIGTERM: the pages written so far stay in {out} (each whole); rerun the same "
                    "command to make the rest")
    assert not list(out.rglob("*.tmp-*")) and signal.getsignal(signal.SIGTERM) is before  # handler restored
    no_browser_cli.clear()
    assert cli.main(["--html", str(PAGES), "--out", str(out)]) == 0


def test_out_under_a_file_a_read_only_folder_and_a_non_browser_are_one_line(tmp_path, no_browser_cli, capsys,
                                                                             monkeypatch):
    import errno

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert cli.main(["--html", str(PAGES), "--out", str(afile / "bench")]) == 2
    assert _last_err(capsys) == [f"error: --out {afile / 'bench'}: {afile} is a file, not a folder; give a path "
                                 "under a folder"]
    with monkeypatch.context() as patch:
        patch.setattr(Path, "mkdir", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only")))
        assert cli.main(["--html", str(PAGES), "--out", str(tmp_path / "ro")]) == 2
    (line,) = _last_err(capsys)
    assert line.startswith(f"error: --out {tmp_path / 'ro'}: cannot write there (the file system is read-only")
    from olmocr_rl.synth import render

    monkeypatch.setattr(cli, "check_setup", render.check_setup)
    monkeypatch.setenv("OLMOCR_RL_CHROMIUM", "/bin/true")  # an executable, not a browser
    assert cli.main(["--html", str(PAGES), "--out", str(tmp_path / "b")]) == 2
    (line,) = _last_err(capsys)
    assert line.startswith("error: /bin/true is not a Chromium (its --version printed ") and line.endswith(
        "set OLMOCR_RL_CHROMIUM to a Chromium, or unset it to use chromium-headless-shell")
    assert not (tmp_path / "b").exists()


def test_when_every_page_is_skipped_the_manifest_is_written_and_the_last_line_names_the_folder(tmp_path,
                                                                                              no_browser_cli, capsys):
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "empty.html").write_text("")
    (pages / "notes.html").write_text("plain words only\n")
    out = tmp_path / "out"
    assert cli.main(["--html", str(pages), "--out", str(out)]) == 1
    assert _last_err(capsys)[-1] == (f"error: no page written in {out}: 2 page(s) skipped, each with its reason in "
                                     f"{out / 'synth_manifest.json'}")
    manifest = json.loads((out / "synth_manifest.json").read_text())
    assert {s["kind"] for s in manifest["skipped_pages"]} == {"empty", "not_html"} and manifest["pages"] == []
    (tmp_path / "none").mkdir()
    assert cli.main(["--html", str(tmp_path / "none"), "--out", str(tmp_path / "o2")]) == 2
    assert _last_err(capsys) == [f"error: no *.html page in --html {tmp_path / 'none'}; give the folder of your "
                                 "HTML pages"]


def test_a_table_cell_may_be_interleaved_with_its_neighbours_words_on_the_layer():
    from olmocr_rl.synth.shown import check_shown, shown_in

    body = "<table>\n<tr><td>export quarter meadow</td><td>3,585</td></tr>\n<tr><td>x</td><td>y</td></tr>\n</table>"
    printed = "export 3,585 quarter meadow x y"  # the layer merges one printed line left to right, across cells
    assert check_shown(body, printed, {}).ok and shown_in("export quarter meadow", printed, cell=True)
    assert not shown_in("export quarter meadow", printed)  # outside a table the words stand together
    assert check_shown(body, "exportquarter meadow 3,585 x y", {}).missing == ["export quarter meadow"]
    assert check_shown(body, "export " + "w " * 9 + "quarter meadow 3,585 x y", {}).missing  # a few words at most


def test_letter_case_is_loose_for_the_reference_lines_and_exact_for_the_tests():
    from olmocr_rl.synth.shown import check_shown, shown_in

    assert check_shown("# Annual report\n\nThe body text.", "ANNUAL REPORT The body text.", {}).ok  # text-transform
    assert not shown_in("Annual report", "ANNUAL REPORT The body text.")  # a test of it is dropped, not written
