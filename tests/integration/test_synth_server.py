"""The page → HTML half of python -m olmocr_rl.synth against a loopback stand-in for an OpenAI-compatible server:
the request's shape (the page image at 1288 px, the prompt, the model), the refinement round with both images, and
each skip reason (no HTML, the length limit, more than one page, a failing server), then the bench folder made from
the kept page. An unreachable server is one line before anything is written. Needs the browser set-up."""

from __future__ import annotations

import base64
import io
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from conftest import BENCH_DATA_SAMPLE
from olmocr_rl.synth import cli
from olmocr_rl.synth.render import BrowserMissingError, check_setup
from olmocr_rl.synth.server import HTML_PROMPT, extract_html

FIRST = ("Here it is:\n```html\n<html><body><h2>Draft heading of the page</h2><p>The first draft of the page says "
         "something else entirely about a pumpkin.</p></body></html>\n```")
REFINED = ("```html\n<html><body><header>Running head of the sample</header><h2>Simple lines of text</h2>"
           "<p>The quick brown fox jumps over the lazy dog. Hello world, this is the refined transcription.</p>"
           "<p>One two three four five six seven eight nine ten.</p></body></html>\n```")
TOO_LONG = "```html\n<html><body>" + "<p>A long paragraph that repeats.</p>" * 400 + "</body></html>\n```"


class StandIn(BaseHTTPRequestHandler):
    answers: list = []
    requests: list = []

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"data": [{"id": "stand-in"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StandIn.requests.append(body)
        kind, content = StandIn.answers.pop(0)
        if kind == "error":
            self._send(500, {"error": "boom"})
            return
        finish = "length" if kind == "length" else "stop"
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish}]})


@pytest.fixture
def server():
    try:
        check_setup()
    except BrowserMissingError as error:
        pytest.skip(str(error))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _image(url: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def test_round_trip_refinement_and_every_skip_reason(server, tmp_path, capsys):
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    for i, name in enumerate(("simple_lines", "counting", "table", "equations")):
        shutil.copy(BENCH_DATA_SAMPLE / "pdfs" / f"{name}.pdf", pdfs / f"{chr(97 + i)}_{name}.pdf")
    # a:1 kept after refinement; b:1 no HTML; b:2 length; c:1 more than one page; d:1 the server fails
    StandIn.answers = [("ok", FIRST), ("ok", REFINED), ("ok", "I cannot read this page, sorry."),
                       ("length", "```html\n<html><body><p>cut"), ("ok", TOO_LONG), ("error", None)]
    StandIn.requests = []
    out = tmp_path / "bench"
    code = cli.main(["--from_pdfs", str(pdfs), "--server", server, "--model", "stand-in-vlm", "--out", str(out),
                     "--refine"])
    assert code == 0, capsys.readouterr().err
    assert StandIn.answers == []
    first, refine = StandIn.requests[0], StandIn.requests[1]
    assert first["model"] == "stand-in-vlm" and first["messages"][0]["role"] == "user"
    parts = first["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"] and parts[1]["text"] == HTML_PROMPT
    assert max(_image(parts[0]["image_url"]["url"]).size) == 1288
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
