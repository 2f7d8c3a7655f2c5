"""The page → HTML half: each page of your PDFs, as an image, to an OpenAI-compatible VLM server, its answer's HTML
kept when it prints on one page (docs/synth.md, "From PDFs").

    python -m olmocr_rl.synth --from_pdfs scans/ --server http://localhost:8000 --model Qwen/Qwen2.5-VL-7B-Instruct \
        --out bench_mine/ [--refine] [--max_tokens 6000]

Each page is rendered at 1288 px on its longest side (training's size, ``data.render.render_page``) and sent
to ``<server>/v1/chat/completions`` with :data:`HTML_PROMPT`; the HTML is taken from the answer (a fenced
``html`` block, else from ``<html``/``<body`` to its closing tag). The HTML is untrusted: it is printed as any
page is (JavaScript off, network off, a time limit), and it must fit one page at scale 1. ``--refine`` sends the
original and the rendering of the first answer back for one corrected answer. A page is skipped, counted and
named with its reason when the server fails, the answer holds no HTML, stops at the length limit
(``finish_reason == "length"``), or prints on more than one page. The kept pages' HTML goes to
``<out>/synth_html/`` and continues as ``--html`` pages do.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import os
import re
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

__all__ = ["add_server_flags", "check_server_args", "pages_from_pdfs", "extract_html", "request_json", "HTML_PROMPT",
           "REFINE_PROMPT", "ServerSkip", "HTML_FOLDER", "API_KEY_VARIABLE"]

HTML_FOLDER = "synth_html"
API_KEY_VARIABLE = "OLMOCR_RL_SERVER_API_KEY"  # evaluate's: sent as "Authorization: Bearer ...", written nowhere
HTML_PROMPT = (
    "Write this document page as one self-contained HTML file that prints on a single US Letter page and looks "
    "like the image: the same text in the same reading order, headings, tables as <table> (with rowspan and "
    "colspan), running headers in <header> and footers and page numbers in <footer>, footnote markers as <sup>. "
    "Write math as LaTeX between \\( and \\) inline or \\[ and \\] for display. Inline CSS only; no scripts, no "
    "external resources. Answer with the HTML in one ```html code block.")
REFINE_PROMPT = (
    "The first image is a document page; the second is how your HTML for it prints. Correct the HTML so that it "
    "prints like the first image (same rules as before). Your HTML was:\n\n```html\n{html}\n```\n\nAnswer with "
    "the corrected HTML in one ```html code block.")
_FENCE = re.compile(r"```(?:html|HTML)?\s*\n(.*?)```", re.DOTALL)
_DOCUMENT = re.compile(r"<(html|body)\b.*?</\1\s*>", re.DOTALL | re.IGNORECASE)


@dataclass
class ServerSkip:
    source: str  # pdf:page
    kind: str  # server_error, timeout, no_html, length, too_long, too_wide, too_deep, katex, render, error
    reason: str


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("page -> HTML (a VLM server writes the HTML)")
    group.add_argument("--from_pdfs", metavar="PDF_DIR", default=None,
                       help="folder of PDFs: each page goes to --server, the HTML it answers is made into a page")
    group.add_argument("--server", metavar="URL", default=None,
                       help="an OpenAI-compatible server (e.g. `vllm serve MODEL`): http://host:port")
    group.add_argument("--model", default=None, help="the model name the server serves")
    group.add_argument("--refine", action="store_true", help="one refinement round with both images")
    group.add_argument("--max_tokens", type=int, default=6000, help="answer length limit (default %(default)s)")
    group.add_argument("--request_timeout_s", type=float, default=300.0,
                       help="wall-clock limit of one request to the server, connecting and the whole answer "
                       f"(default %(default)s); an API key goes in {API_KEY_VARIABLE}")


def check_server_args(args: argparse.Namespace) -> None:
    """Flags present, the folder holds PDFs, the server answers: OutputError (one line) otherwise."""
    from .output import OutputError

    if args.html:
        raise OutputError("give --html or --from_pdfs, not both")
    if not args.server or not args.model:
        raise OutputError("--from_pdfs needs --server URL and --model NAME (an OpenAI-compatible server)")
    if not Path(args.from_pdfs).is_dir() or not sorted(Path(args.from_pdfs).rglob("*.pdf")):
        raise OutputError(f"--from_pdfs {args.from_pdfs}: not a folder holding *.pdf files")
    if args.max_tokens < 1 or not args.request_timeout_s > 0:
        raise OutputError("--max_tokens and --request_timeout_s must be positive")
    try:
        request_json("GET", args.server.rstrip("/") + "/v1/models", None, min(10.0, args.request_timeout_s))
    except (OSError, ValueError, http.client.HTTPException) as error:
        raise OutputError(f"cannot reach --server {args.server} ({error}); start it (`vllm serve {args.model}`) "
                          "or fix the URL") from None


def request_json(method: str, url: str, body: dict | None, timeout_s: float) -> dict:
    """One request's JSON answer, the whole request (connecting, sending, the status line, headers and body)
    bounded by ``timeout_s`` of wall-clock time: a watchdog shuts the socket at the deadline, so a server sending
    one byte a second cannot hold it longer (a socket timeout alone bounds each read, not the request).
    TimeoutError past the deadline; OSError for an HTTP error status; ValueError for an answer that is not JSON.
    ``OLMOCR_RL_SERVER_API_KEY``, when set, is sent as a bearer token (and never written anywhere)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=timeout_s)
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        if connection.sock is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    headers = {"Content-Type": "application/json"}
    if os.environ.get(API_KEY_VARIABLE):
        headers["Authorization"] = f"Bearer {os.environ[API_KEY_VARIABLE]}"
    watchdog = threading.Timer(timeout_s, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.connect()
        if expired.is_set():
            raise TimeoutError
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        raw = response.read()
        if expired.is_set():
            raise TimeoutError
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise TimeoutError(f"no whole answer within --request_timeout_s {timeout_s:g} s") from None
        raise
    finally:
        watchdog.cancel()
        connection.close()
    if response.status != 200:
        hint = f"; set {API_KEY_VARIABLE}" if response.status in (401, 403) else ""
        raise OSError(f"HTTP {response.status} {response.reason}{hint}")
    return json.loads(raw)


def extract_html(answer: str) -> str | None:
    """The HTML of an answer: the first fenced block holding a tag, else an <html>/<body> element; None if none."""
    for block in _FENCE.findall(answer or ""):
        if re.search(r"<[a-zA-Z][^>]*>", block):
            return block.strip()
    match = _DOCUMENT.search(answer or "")
    return match.group(0) if match else None


def _png_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _ask(args, images: list, prompt: str) -> tuple[str, str]:
    """(content, finish_reason) of one chat completion; raises OSError/ValueError on a failed request."""
    content = [{"type": "image_url", "image_url": {"url": _png_url(image)}} for image in images]
    content.append({"type": "text", "text": prompt})
    body = {"model": args.model, "messages": [{"role": "user", "content": content}],
            "max_tokens": args.max_tokens, "temperature": 0.0, "seed": args.seed}
    answer = request_json("POST", args.server.rstrip("/") + "/v1/chat/completions", body, args.request_timeout_s)
    choice = answer["choices"][0]
    return choice["message"].get("content") or "", choice.get("finish_reason") or ""


def _html_or_skip(args, source: str, images: list, prompt: str) -> str | ServerSkip:
    try:
        content, finish = _ask(args, images, prompt)
    except TimeoutError as error:
        return ServerSkip(source, "timeout", f"the server's answer did not come whole in time: {error}")
    except (OSError, ValueError, KeyError, IndexError, TypeError, http.client.HTTPException) as error:
        return ServerSkip(source, "server_error", f"the server's answer failed: {type(error).__name__}: {error}")
    if finish == "length":
        return ServerSkip(source, "length", f"the answer stopped at the length limit (--max_tokens {args.max_tokens})")
    markup = extract_html(content)
    if markup is None:
        return ServerSkip(source, "no_html", f"no HTML in the answer ({len(content)} characters)")
    return markup


def _printed(renderer, markup: str):
    """(pdf bytes, None) when the HTML prints on one page at scale 1, else (None, ServerSkip kind, reason)."""
    from .pipeline import _print_page
    from .render import PageTooLongError, PageTooWideError
    from .tree import NotHTMLError, TooDeepError, parse_html

    try:
        result = _print_page(parse_html(markup), renderer, allow_scaling=False)
    except NotHTMLError as error:
        return None, ("no_html", str(error))
    except TooDeepError as error:
        return None, ("too_deep", str(error))
    except PageTooLongError:
        return None, ("too_long", "the HTML prints on more than one page")
    except PageTooWideError as error:
        return None, ("too_wide", str(error))
    except Exception as error:  # noqa: BLE001 - a timeout or browser failure on this answer only
        return None, ("render", f"the browser failed on the HTML: {type(error).__name__}")
    if isinstance(result, str):
        return None, ("katex", result)
    return result[0], None


def _one_page(args, renderer, source: str, image) -> str | ServerSkip:
    markup = _html_or_skip(args, source, [image], HTML_PROMPT)
    if isinstance(markup, ServerSkip):
        return markup
    pdf, problem = _printed(renderer, markup)
    if problem:
        return ServerSkip(source, *problem)
    if args.refine:
        refined = _html_or_skip(args, source, [image, _pdf_image(pdf)], REFINE_PROMPT.format(html=markup))
        if isinstance(refined, ServerSkip):
            return refined
        pdf, problem = _printed(renderer, refined)
        if problem:
            return ServerSkip(source, *problem)
        markup = refined
    return markup


def _pdf_image(pdf: bytes):
    import tempfile

    from olmocr_rl.config.values import DEFAULT_TARGET_LONGEST_IMAGE_DIM
    from olmocr_rl.data.render import render_page

    with tempfile.NamedTemporaryFile(suffix=".pdf") as handle:
        handle.write(pdf)
        handle.flush()
        return render_page(handle.name, 1, DEFAULT_TARGET_LONGEST_IMAGE_DIM)


def pages_from_pdfs(args: argparse.Namespace) -> tuple[str, list[ServerSkip]]:
    """Every page of ``--from_pdfs`` through the server; the folder of kept HTML pages, and the skipped ones."""
    import sys

    from olmocr_rl.config.values import DEFAULT_TARGET_LONGEST_IMAGE_DIM
    from olmocr_rl.data.render import RenderError, pdf_page_count, render_page

    from .render import Renderer

    root = Path(args.from_pdfs)
    folder = Path(args.out) / HTML_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    skips: list[ServerSkip] = []
    with Renderer(args.timeout_s) as renderer:
        for pdf in sorted(root.rglob("*.pdf")):
            rel = pdf.relative_to(root)
            try:
                count = pdf_page_count(pdf)
            except RenderError as error:
                skips.append(ServerSkip(str(rel), "render", str(error)))
                continue
            for page in range(1, count + 1):
                source = f"{rel}:{page}"
                try:
                    image = render_page(pdf, page, DEFAULT_TARGET_LONGEST_IMAGE_DIM)
                    result = _one_page(args, renderer, source, image)
                except Exception as error:  # noqa: BLE001 - one page's failure is that page's skip
                    first = (str(error).splitlines() or [""])[0][:200]
                    result = ServerSkip(source, "error", f"synth failed on this page: {type(error).__name__}: {first}")
                if isinstance(result, ServerSkip):
                    skips.append(result)
                    print(f"[synth] {source}: skipped ({result.kind}): {result.reason}", file=sys.stderr)
                    continue
                name = "_".join(rel.with_suffix("").parts) + f"_pg{page}.html"
                target = folder / name
                target.write_text(result, encoding="utf-8")
                print(f"[synth] {source}: HTML kept ({len(result)} characters)", file=sys.stderr)
    return str(folder), skips
