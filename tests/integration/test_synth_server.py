"""The page → HTML half of python -m olmocr_rl.synth against the suite's loopback stand-in for an OpenAI-compatible
server (tests/openai_standin.py): the request's shape (the page image at 1288 px, the prompt, the model), the
refinement round with both images, each skip reason (no HTML, the length limit, more than one page, a failing
server), then the bench folder made from the kept page, whose untrusted HTML reaches no local file. An unreachable
server is one line before anything is written. Needs the browser set-up."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import BENCH_DATA_SAMPLE
from olmocr_rl.synth.pipeline import pdf_text_layer
from olmocr_rl.synth import cli
from olmocr_rl.synth.render import BrowserMissingError, check_setup
from olmocr_rl.synth.server import HTML_PROMPT, extract_html
from openai_standin import standin_server
from synth_helpers import leak_tricks, leaky_katex

FIRST = ("Here it is:\n```html\n<html><body><h2>Draft heading of the page</h2><p>The first draft of the page says "
         "something else entirely about a pumpkin.</p></body></html>\n```")
REFINED = ("```html\n<html><body><header>Running head of the sample</header><h2>Simple lines of text</h2>"
           "<p>The quick brown fox jumps over the lazy dog. Hello world, this is the refined transcription.</p>"
           "<p>One two three four five six seven eight nine ten.</p></body></html>\n```")
TOO_LONG = "```html\n<html><body>" + "<p>A long paragraph that repeats.</p>" * 400 + "</body></html>\n```"


def _answers(replies: list[dict]):
    """The stand-in's answer function: the replies in turn (each a dict the stand-in understands)."""
    replies = list(replies)
    return lambda seen: replies.pop(0)


@pytest.fixture
def browser_ready():
    try:
        check_setup()
    except BrowserMissingError as error:
        pytest.skip(str(error))


def test_round_trip_refinement_and_every_skip_reason(browser_ready, tmp_path, monkeypatch, capsys):
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    for i, name in enumerate(("simple_lines", "counting", "table", "equations")):
        shutil.copy(BENCH_DATA_SAMPLE / "pdfs" / f"{name}.pdf", pdfs / f"{chr(97 + i)}_{name}.pdf")
    # The server's HTML is untrusted: the kept page also tries every way to print a local file outside KaTeX's
    # folder (which holds symlinks pointing out); none reaches the PDF, each is a blocked request.
    katex, secrets = leaky_katex(tmp_path)
    monkeypatch.setenv("OLMOCR_RL_KATEX_DIR", str(katex))
    tricks = "".join(f'<iframe src="{url}"></iframe>' for url in leak_tricks(secrets).values())
    refined = REFINED.replace("</body>", tricks + "</body>")
    # a:1 kept after refinement; b:1 no HTML; b:2 length; c:1 more than one page; d:1 the server fails
    replies = [{"content": FIRST}, {"content": refined}, {"content": "I cannot read this page, sorry."},
               {"content": "```html\n<html><body><p>cut", "finish_reason": "length"}, {"content": TOO_LONG},
               {"status": 500}]
    out = tmp_path / "bench"
    with standin_server(_answers(replies), models=("stand-in-vlm",)) as (url, state):
        code = cli.main(["--from_pdfs", str(pdfs), "--server", url, "--model", "stand-in-vlm", "--out", str(out),
                         "--refine"])
    assert code == 0, capsys.readouterr().err
    assert len(state.seen) == 6
    first, refine = state.seen[0].body, state.seen[1].body
    assert first["model"] == "stand-in-vlm" and first["messages"][0]["role"] == "user"
    parts = first["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"] and parts[1]["text"] == HTML_PROMPT
    assert max(state.seen[0].image.size) == 1288
    refine_parts = refine["messages"][0]["content"]
    assert [p["type"] for p in refine_parts] == ["image_url", "image_url", "text"]
    assert "pumpkin" in refine_parts[2]["text"]  # the first answer's HTML goes back with both images
    manifest = json.loads((out / "synth_manifest.json").read_text())
    skipped = {s["pdf_page"]: s["kind"] for s in manifest["skipped_pages"]}
    assert skipped == {"b_counting.pdf:1": "no_html", "b_counting.pdf:2": "length", "c_table.pdf:1": "too_long",
                       "d_equations.pdf:1": "server_error"}
    tests = [json.loads(line) for line in (out / "synth.jsonl").read_text().splitlines()]
    texts = " ".join(json.dumps(t) for t in tests)
    assert "refined transcription" in texts and "pumpkin" not in texts
    assert {"absent", "present", "baseline"} <= {t["type"] for t in tests}
    err = capsys.readouterr().err
    assert "b_counting.pdf:2: skipped (length)" in err and "c_table.pdf:1: skipped (too_long)" in err
    (page,) = manifest["pages"]
    assert any(n.startswith(f"{len(leak_tricks(secrets))} network request(s) blocked") for n in page["notices"])
    assert "SECRETTOKEN" not in pdf_text_layer((out / "pdfs" / page["pdf"]).read_bytes())[1]
    assert not any(b"SECRETTOKEN" in p.read_bytes() for p in out.rglob("*") if p.is_file() and p.suffix != ".html")


def test_an_unreachable_server_is_one_line_and_nothing_written(tmp_path, capsys):
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    shutil.copy(BENCH_DATA_SAMPLE / "pdfs" / "blank.pdf", pdfs)
    code = cli.main(["--from_pdfs", str(pdfs), "--server", "http://127.0.0.1:9", "--model", "m", "--out",
                     str(tmp_path / "bench")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: cannot reach --server http://127.0.0.1:9")
    assert not (tmp_path / "bench").exists()


def test_html_is_taken_from_fences_or_the_document():
    assert extract_html("x\n```html\n<p>a</p>\n```\ny") == "<p>a</p>"
    assert extract_html("text <html><body>b</body></html> more") == "<html><body>b</body></html>"
    assert extract_html("no markup here") is None and extract_html("```\nplain\n```") is None


def test_a_trickling_server_is_a_timed_skip_and_the_api_key_is_sent_but_written_nowhere(browser_ready, tmp_path,
                                                                                       monkeypatch, capsys):
    import time

    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    shutil.copy(BENCH_DATA_SAMPLE / "pdfs" / "simple_lines.pdf", pdfs / "a.pdf")
    key = "sk-test-KEY-never-written-4242"
    monkeypatch.setenv("OLMOCR_RL_SERVER_API_KEY", key)
    out = tmp_path / "bench"
    with standin_server(lambda seen: {"trickle": 0.3}) as (url, state):  # one byte every 0.3 s, for hours
        start = time.monotonic()
        code = cli.main(["--from_pdfs", str(pdfs), "--server", url, "--model", "standin", "--out", str(out),
                         "--request_timeout_s", "1.5"])
        seconds = time.monotonic() - start
    captured = capsys.readouterr()
    assert code == 1 and seconds < 30, seconds  # the request gave up at 1.5 s (the rest: the browser's start)
    assert [seen.headers.get("Authorization") for seen in state.seen] == [f"Bearer {key}"]
    manifest = json.loads((out / "synth_manifest.json").read_text())
    (skip,) = manifest["skipped_pages"]
    assert skip["pdf_page"] == "a.pdf:1" and skip["kind"] == "timeout" and "1.5 s" in skip["reason"]
    assert captured.err.splitlines()[-1] == (f"error: no page written in {out}: 1 page(s) skipped, each with its "
                                             f"reason in {out / 'synth_manifest.json'}")
    assert key not in captured.out + captured.err
    assert not [p for p in out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
