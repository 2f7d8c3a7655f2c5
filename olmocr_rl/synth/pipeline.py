"""One HTML page → its PDF, reference and checked tests (or the one-line reason it is skipped).

:func:`make_page` is the whole per-page path: read and size-check the file, parse it (:mod:`.tree`), read its
content (:mod:`.content`), write its reference (:mod:`.reference`), derive candidate tests (:mod:`.derive`),
typeset its math and print it (:mod:`.render`), read the PDF's text layer, keep the tests that pass the
guarantee (:mod:`.guarantee`). With ``renderer=None`` nothing is printed and the text-layer check is skipped
(the golden tests' mode, no browser). It raises nothing for a bad page: a :class:`PageSkip` says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from olmocr_rl.data.front_matter import split_front_matter

from .content import page_content
from .derive import DEFAULT_CAPS, SYNTH_TYPES, derive_tests
from .guarantee import check_tests, glyphs_of_html, text_layer_of
from .reference import reference_text
from .render import KatexError, PageTooLongError, PageTooWideError, Renderer
from .shown import check_shown
from .tree import MATH, NotHTMLError, TooDeepError, parse_html, serialize

__all__ = ["PageJob", "PageResult", "PageSkip", "PageOptions", "make_page", "pdf_text_layer"]


@dataclass(frozen=True)
class PageJob:
    source: str  # the HTML file
    rel: str  # its path under --html, for messages
    subset: str  # the JSONL name (without .jsonl) and the pdfs/ sub-folder
    pdf: str  # the test's "pdf" field: <subset>/<stem>.pdf
    key: str  # the page's id prefix


@dataclass(frozen=True)
class PageOptions:
    seed: int = 0
    caps: tuple[tuple[str, int], ...] = tuple(DEFAULT_CAPS.items())
    types: tuple[str, ...] = SYNTH_TYPES
    max_bytes: int = 5 * 1024 * 1024


@dataclass
class PageResult:
    job: PageJob
    reference: str
    tests: list[dict]
    dropped: list[dict]
    pdf: bytes | None = None
    scale: float = 1.0
    notices: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class PageSkip:
    job: PageJob
    reason: str  # one line
    kind: str  # not_html, empty, too_large, too_deep, katex, too_long, too_wide, not_shown, render, no_tests, error
    seconds: float = 0.0


def pdf_text_layer(pdf: bytes) -> tuple[int, str]:
    """The PDF's page count and its first page's text layer (pypdfium2)."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(pdf)
    try:
        text_page = document[0].get_textpage()
        return len(document), text_page.get_text_range()
    finally:
        document.close()


def _read(job: PageJob, options: PageOptions) -> str | PageSkip:
    path = Path(job.source)
    size = path.stat().st_size
    if size == 0:
        return PageSkip(job, "the file is empty; give an HTML page", "empty")
    if size > options.max_bytes:
        return PageSkip(job, f"the file is {size / 2**20:.1f} MB, over --max_html_mb "
                             f"{options.max_bytes / 2**20:g}; split the page or raise the limit", "too_large")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        if b"\x00" in path.read_bytes()[:4096]:
            return PageSkip(job, "the file is binary, not an HTML page", "not_html")
        return PageSkip(job, f"not UTF-8 text (byte {error.start}); save the page as UTF-8", "not_html")


def _notices(content, blocked: list[str], out_of_order: int = 0) -> list[str]:
    notes = []
    if out_of_order:
        notes.append(f"{out_of_order} block(s) printed out of the source order (a float is painted before the text "
                     "around it, a positioned box after); order tests are checked on the printed order")
    if content.scripts:
        notes.append(f"{content.scripts} script(s) not run (JavaScript is off while printing)")
    if blocked:
        notes.append(f"{len(blocked)} network request(s) blocked (the network is off), first: {blocked[0]}")
    for block in content.blocks:
        if block.table is not None and len({len(r) for r in block.table.rows if r}) > 1 and not any(
                c.rowspan > 1 or c.colspan > 1 for r in block.table.rows for c in r):
            notes.append("a ragged table (rows of different lengths): its cells are placed as written")
    return notes


def _print_page(root, renderer: Renderer, allow_scaling: bool = True
                ) -> tuple[bytes, float, list[str], dict[str, str]] | str:
    """(pdf, scale, blocked requests, glyphs by TeX), or the reason KaTeX refuses an equation."""
    math_html: dict[int, str] = {}
    glyphs: dict[str, str] = {}
    for node in root.walk():
        if node.tag == MATH:
            try:
                markup = renderer.typeset(node.tex, node.attrs.get("display") == "1")
            except KatexError as error:
                return f"KaTeX refuses the equation {node.tex[:60]!r}: {error}; fix the LaTeX"
            math_html[id(node)] = markup
            glyphs[node.tex] = glyphs_of_html(markup)
    printed = renderer.render(serialize(root, math_html), allow_scaling, math=bool(math_html))
    return printed.pdf, printed.scale, printed.blocked, glyphs


def make_page(job: PageJob, options: PageOptions, renderer: Renderer | None) -> PageResult | PageSkip:
    """The page's result, or why it is skipped: every failure of one page is caught here, by kind, and any other
    exception (a bug met on this page) skips the page with its reason (``error``), so no page ends the run."""
    start = time.perf_counter()
    try:
        made = _make_page(job, options, renderer, start)
    except Exception as error:  # noqa: BLE001 - one page's failure, whatever it is, is that page's skip
        reason = (f"synth failed on this page: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]} "
                  "(please report it with the page)")
        return PageSkip(job, reason, "error", time.perf_counter() - start)
    if isinstance(made, PageSkip) and not made.seconds:
        made.seconds = time.perf_counter() - start
    return made


def _make_page(job: PageJob, options: PageOptions, renderer: Renderer | None, start: float) -> PageResult | PageSkip:
    source = _read(job, options)
    if isinstance(source, PageSkip):
        return source
    try:
        root = parse_html(source)
    except NotHTMLError as error:
        return PageSkip(job, str(error), "not_html")
    except TooDeepError as error:
        return PageSkip(job, str(error), "too_deep")
    content = page_content(root)
    reference = reference_text(content)
    candidates = derive_tests(content, options.seed, job.key, dict(options.caps), options.types)
    pdf, scale, blocked, layer, glyphs, out_of_order = None, 1.0, [], None, None, 0
    if renderer is not None:
        try:
            printed = _print_page(root, renderer)
        except PageTooLongError as error:
            return PageSkip(job, str(error), "too_long")
        except PageTooWideError as error:
            return PageSkip(job, str(error), "too_wide")
        except Exception as error:  # noqa: BLE001 - a timeout or a browser error on this page only
            reason = f"the browser failed on it: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"
            return PageSkip(job, reason, "render")
        if isinstance(printed, str):
            return PageSkip(job, printed, "katex")
        pdf, scale, blocked, glyphs = printed
        layer = text_layer_of(pdf_text_layer(pdf)[1])
        shown = check_shown(split_front_matter(reference)[1], layer, glyphs)
        if not shown.ok:
            lost = shown.missing + [f"the equation {m}" for m in shown.math_missing]
            return PageSkip(job, f"{len(lost)} line(s) of the reference are not on the printed page (hidden, clipped "
                                 f"or laid out apart by the page's CSS?), first: {lost[0][:80]!r}", "not_shown")
        out_of_order = shown.out_of_order
    checked = check_tests(candidates, job.pdf, job.key, reference, layer, glyphs)
    wanted_more = set(options.types) - {"baseline"}  # a page of a baseline test alone is kept only when asked for
    if not checked.kept or (wanted_more and not any(t["type"] != "baseline" for t in checked.kept)):
        return PageSkip(job, f"no test survives the checks ({len(checked.dropped)} dropped)", "no_tests")
    return PageResult(job, reference, checked.kept, checked.dropped, pdf, scale,
                      _notices(content, blocked, out_of_order), time.perf_counter() - start)
