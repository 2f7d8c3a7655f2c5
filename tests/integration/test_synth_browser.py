"""python -m olmocr_rl.synth with the real headless Chromium: the shipped pages printed in one browser session,
one page each, the tests' strings on the PDFs' text layer, KaTeX's fonts in the PDF, validate_bench, the same
bytes again from two shards (one with --jobs 2) merged, the bad-input list, and 2 GRPO steps of the CPU demo's
config on the folder. Skips with the setup line when the machine has no browser, KaTeX or Playwright."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from olmocr_rl.synth import cli
from synth_helpers import LEAK_PARAGRAPHS, leak_tricks, leaky_katex
from olmocr_rl.synth.guarantee import on_layer, text_layer_of
from olmocr_rl.synth.pipeline import pdf_text_layer
from olmocr_rl.synth.render import BrowserMissingError, check_setup

PAGES = REPO_ROOT / "tests" / "fixtures" / "synth" / "pages"
STRINGS = ("text", "before", "after", "cell", "up", "down", "left", "right", "top_heading", "left_heading",
           "appears_before_marker")


@pytest.fixture(scope="module")
def browser_ready():
    try:
        check_setup()
    except BrowserMissingError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def made(browser_ready, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "bench"
    assert cli.main(["--html", str(PAGES), "--out", str(out)]) == 0
    return out


def _files(folder: Path) -> dict[str, bytes]:
    """The bench's files (not the manifest, which names the shards, nor the runs' lock files)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith("synth_manifest") and not p.name.endswith(".lock")}


def test_one_page_each_every_string_on_the_text_layer(made):
    tests = [json.loads(line) for line in (made / "synth.jsonl").read_text().splitlines()]
    pdfs = sorted((made / "pdfs" / "synth").glob("*.pdf"))
    assert [p.stem for p in pdfs] == sorted(p.stem for p in PAGES.glob("*.html"))
    layers = {}
    for pdf in pdfs:
        pages, raw = pdf_text_layer(pdf.read_bytes())
        assert pages == 1
        layers[f"synth/{pdf.name}"] = text_layer_of(raw)
    for test in tests:
        for name in STRINGS:
            if test.get(name):
                assert on_layer(test[name], layers[test["pdf"]]), (test["id"], name)
    fonts = set(re.findall(rb"/BaseFont /[A-Z]+\+(KaTeX_[A-Za-z-]+)", (made / "pdfs/synth/math.pdf").read_bytes()))
    assert {b"KaTeX_Main-Regular", b"KaTeX_Math-Italic"} <= fonts  # KaTeX's own fonts, not a fallback
    manifest = json.loads((made / "synth_manifest.json").read_text())
    assert manifest["versions"]["chromium"] and manifest["versions"]["katex"] != "unknown"
    assert manifest["tests"] == len(tests) and sum(manifest["tests_by_type"].values()) == len(tests)
    assert {"present", "absent", "order", "table", "math", "baseline", "format", "footnote"} == set(
        manifest["tests_by_type"])
    assert manifest["dropped_by_reason"].get("reference", 0) >= 1  # the page number "7" of header_footer


def test_validate_bench_passes(made, capsys):
    from olmocr_rl import validate_bench

    assert validate_bench.main([str(made)]) == 0
    assert "OK:" in capsys.readouterr().out


def test_two_shards_merged_give_the_same_bytes(made, tmp_path):
    out = tmp_path / "sharded"
    assert cli.main(["--html", str(PAGES), "--out", str(out), "--shard", "1/2"]) == 0
    assert cli.main(["--html", str(PAGES), "--out", str(out), "--shard", "2/2", "--jobs", "2"]) == 0
    assert cli.main(["--out", str(out), "--merge"]) == 0
    assert _files(out) == _files(made)  # PDFs, references and the JSONL, byte for byte
    one = json.loads((made / "synth_manifest.json").read_text())
    merged = json.loads((out / "synth_manifest.json").read_text())
    assert merged["tests_by_type"] == one["tests_by_type"] and merged["dropped_by_reason"] == one["dropped_by_reason"]


PARAGRAPHS = ("<p>The first paragraph of the page holds a few plain sentences for the tests. It has a second "
              "sentence too.</p>", "<p>Another paragraph follows with more words in it for the order rule. It "
                                   "closes the section.</p>")
# Pages whose HTML says more than they print (each skipped: not_shown, too_wide), or that print all of it after a
# change of scale (wide_table) or in another paint order (float_columns).
LAYOUTS = {
    "css_hidden": "<style>.gone{display:none}</style><p class=gone>This secret paragraph is hidden by a style rule.</p>",
    "clipped": '<div style="height:20px;overflow:hidden"><p>A visible line.</p><p>This clipped paragraph is cut off '
               'by the box above it.</p></div>',
    "off_page": '<p style="position:absolute;left:-9999px">This paragraph is placed far off the page.</p>',
    "span_as_block": '<p>It ends here<span style="display:block">and a span shown as a block starts here</span></p>',
    "wide": '<div style="width:40000px"><p>' + "A sentence of a page far wider than the paper. " * 200 + "</p></div>",
    "wide_table": '<table style="width:1100px" border=1><tr><th>Region</th><th>Quarter one</th><th>Quarter two</th>'
                  "</tr><tr><td>Northern district</td><td>1,204</td><td>1,377</td></tr><tr><td>Southern district"
                  "</td><td>2,911</td><td>3,006</td></tr></table>",
    "float_columns": '<div style="float:left;width:45%"><p>The left column, a float, is painted first.</p></div>'
                     '<div style="float:right;width:45%"><p>The right column floats to the other side.</p></div>'
                     '<p style="clear:both">A closing line below both of the columns on the page.</p>',
}


def test_bad_input_one_line_each_and_nothing_half_written(browser_ready, tmp_path, capsys, monkeypatch):
    from olmocr_rl.synth import derive

    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "deep.html").write_text("<div>" * 1000 + "<p>The innermost paragraph sits a thousand elements down."
                                     "</p>" + "</div>" * 1000)
    (pages / "buggy.html").write_text("<p>On this page a rule of synth raises an exception, a bug met here.</p>")
    rule = derive.RULES["format"]

    def buggy_rule(content, rng, cap):  # a bug met on one page only
        if any("raises an exception" in b.text for b in content.blocks):
            raise RecursionError("maximum recursion depth exceeded")
        return rule(content, rng, cap)

    monkeypatch.setitem(derive.RULES, "format", buggy_rule)
    shutil.copy(PAGES / "nested_header.html", pages / "good.html")
    (pages / "empty.html").write_text("")
    (pages / "notes.html").write_text("Shopping list: eggs, flour, milk.\n")
    (pages / "binary.html").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" * 50)
    with open(pages / "huge.html", "wb") as handle:
        handle.truncate(50 * 2**20)
    (pages / "badmath.html").write_text("<p>The ratio \\(\\frac{a\\) is broken in this paragraph of text.</p>")
    script = ("<script>fetch('http://example.com/data'); while (true) {}</script><img src='http://example.com/x.png'>"
              + (PAGES / "two_columns.html").read_text())
    (pages / "scripted.html").write_text(script)
    (pages / "ragged.html").write_text(
        "<p>The ledger lists the quarterly totals of each branch office in the northern region.</p><table>"
        "<tr><th>Branch</th><th>Q1</th><th>Q2</th></tr><tr><td>Aberdeen</td><td>41</td></tr>"
        "<tr><td>Dundee</td><td>17</td><td>29</td><td>late</td></tr><tr><td>Inverness</td><td>33</td><td>36</td></tr>"
        "</table>")
    for name, html in LAYOUTS.items():
        (pages / f"{name}.html").write_text(f"<html><body><h1>The {name} page</h1>{PARAGRAPHS[0]}{html}"
                                            f"{PARAGRAPHS[1]}</body></html>")
    out = tmp_path / "out"
    assert cli.main(["--html", str(pages), "--out", str(out), "--timeout_s", "10"]) == 0
    err = capsys.readouterr().err
    manifest = json.loads((out / "synth_manifest.json").read_text())
    kinds = {s["html"]: s["kind"] for s in manifest["skipped_pages"]}
    assert kinds == {"empty.html": "empty", "notes.html": "not_html", "binary.html": "not_html",
                     "huge.html": "too_large", "badmath.html": "katex", "wide.html": "too_wide",
                     "css_hidden.html": "not_shown", "clipped.html": "not_shown", "off_page.html": "not_shown",
                     "span_as_block.html": "not_shown", "deep.html": "too_deep", "buggy.html": "error"}
    reasons = {s["html"]: s["reason"] for s in manifest["skipped_pages"]}
    assert "40" in reasons["wide.html"] and "px wide" in reasons["wide.html"]
    assert "This secret paragraph is hidden" in reasons["css_hidden.html"]
    assert "RecursionError" in reasons["buggy.html"] and "200 deep" in reasons["deep.html"]
    for name in kinds:
        line = next(line for line in err.splitlines() if f" {name}: skipped" in line)
        assert line.startswith("[synth] ")
        assert not (out / "pdfs" / "synth" / f"{Path(name).stem}.pdf").exists()
        assert not list((out / "claude_original").rglob(f"{Path(name).stem}_page1*"))
    notices = {p["html"]: p["notices"] for p in manifest["pages"]}
    assert set(notices) == {"good.html", "scripted.html", "ragged.html", "wide_table.html", "float_columns.html"}
    scales = {p["html"]: p["scale"] for p in manifest["pages"]}
    assert 0.5 <= scales["wide_table.html"] < 0.9 and scales["good.html"] == 1.0  # shrunk to the paper's width
    assert any("out of the source order" in n for n in notices["float_columns.html"])
    assert any("script(s) not run" in n for n in notices["scripted.html"])
    assert any("blocked" in n and "example.com" in n for n in notices["scripted.html"])
    assert any("ragged" in n for n in notices["ragged.html"])


def test_no_local_file_outside_katex_reaches_a_pdf(browser_ready, tmp_path, monkeypatch):
    katex, secrets = leaky_katex(tmp_path)
    monkeypatch.setenv("OLMOCR_RL_KATEX_DIR", str(katex))
    pages = tmp_path / "pages"
    pages.mkdir()
    tricks = leak_tricks(secrets)
    for name, url in tricks.items():
        (pages / f"{name}.html").write_text(f'<html><body>{LEAK_PARAGRAPHS}<iframe src="{url}"></iframe>'
                                            f'<object data="{url}"></object></body></html>')
    (pages / "math.html").write_text((PAGES / "math.html").read_text())  # KaTeX's own files are still served
    out = tmp_path / "out"
    assert cli.main(["--html", str(pages), "--out", str(out)]) == 0
    manifest = json.loads((out / "synth_manifest.json").read_text())
    notices = {p["html"]: p["notices"] for p in manifest["pages"]}
    assert set(notices) == {f"{name}.html" for name in tricks} | {"math.html"}
    for name in tricks:
        layer = pdf_text_layer((out / "pdfs" / "synth" / f"{name}.pdf").read_bytes())[1]
        assert "SECRETTOKEN" not in layer and "ordinary words" in layer, name
        assert any(n.startswith("2 network request(s) blocked") for n in notices[f"{name}.html"]), (name, notices)
    assert notices["math.html"] == []  # KaTeX's CSS and fonts: served, nothing blocked
    assert not any(b"SECRETTOKEN" in p.read_bytes() for p in out.rglob("*") if p.is_file())


def test_two_grpo_steps_of_the_cpu_demo_on_the_folder(made, tiny_model_dir, tmp_path):
    from olmocr_rl import grpo_train

    out = tmp_path / "run"
    code = grpo_train.main([
        "--config", str(REPO_ROOT / "configs" / "tiny-cpu.yaml"), "--train_bench_data_folder", str(made),
        "--pages", "math", "--model_name", str(tiny_model_dir), "--output_dir", str(out), "--max_steps", "2",
        "--save_steps", "100000", "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--max_completion_length", "16"])
    assert code == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["bench_reward/overall_pass_rate"] for r in records if "bench_reward/overall_pass_rate" in r]
    assert len(rates) == 2 and all(0.0 <= r <= 1.0 for r in rates)


def test_ctrl_c_ends_the_run_in_one_line_with_every_written_page_whole(browser_ready, tmp_path):
    """Ctrl-C (SIGINT to the process group: the browser and Playwright's driver get it too) mid-run: exit 130,
    one line, no traceback, no temporary file; the signal mostly lands inside Playwright's event loop, which
    must pass it on (an exception asyncio logs and drops let the run go on with a dead browser)."""
    import os
    import signal
    import subprocess
    import sys

    pages = tmp_path / "pages"
    pages.mkdir()
    for i in range(6):
        for page in PAGES.glob("*.html"):
            shutil.copy(page, pages / f"{page.stem}_{i}.html")
    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-m", "olmocr_rl.synth", "--html", str(pages), "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    while not any(" 3/30 " in line for line in seen):
        seen.append(child.stderr.readline())
        assert seen[-1], "".join(seen)
    os.killpg(child.pid, signal.SIGINT)
    stdout, stderr = child.communicate(timeout=60)
    after = [line for line in stderr.splitlines() if not line.startswith("[synth] ")]
    assert child.returncode == 130, stdout + stderr
    assert after == [f"error: stopped by SIGINT: the pages written so far stay in {out} (each whole); rerun the "
                     "same command to make the rest"], stderr
    pdfs = sorted(p.stem for p in (out / "pdfs").rglob("*.pdf"))
    assert len(pdfs) >= 2 and pdfs == sorted(p.stem.removesuffix("_page1_pg1_repeat1")
                                              for p in (out / "claude_original").rglob("*.md"))
    assert not list(out.rglob("*.tmp-*"))
