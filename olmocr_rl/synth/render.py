"""HTML → one-page PDF with a real headless Chromium (Playwright), math typeset by KaTeX with its fonts loaded.

One :class:`Renderer` holds one browser for many pages. Two browser contexts:

- the *math* context runs KaTeX (the only script ever run): ``katex.renderToString(tex, {throwOnError: true,
  output: "html"})`` turns each equation into HTML, or its parse error into :class:`KatexError`;
- the *page* context prints the page with JavaScript off, so a page's own scripts never run. Every request goes
  through one route: ``http://synth.invalid/page.html`` (the page) and ``/katex/…`` (KaTeX's CSS and fonts, from
  the local KaTeX folder: only files inside it, see :func:`katex_file`) are served, anything else is aborted and
  counted: the network is off, and no other local file reaches a PDF.

Fonts are pinned: a style placed before the page's own sets ``Liberation Serif`` (then DejaVu) as the default
family and a body margin; the page's CSS may override it with the fonts installed. A page that prints on more
than one Letter page is printed again at a smaller scale (0.9, 0.8, … down to ``MIN_SCALE``), else it is refused;
content wider than the paper (measured in the page laid out at the paper's width) starts at the scale that fits
it, or is refused below ``MIN_SCALE``.
The PDF's creation and modification dates are set to a fixed value, so the same HTML gives the same bytes.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Renderer", "RenderedPage", "KatexError", "PageTooLongError", "PageTooWideError", "BrowserMissingError",
           "find_browser", "find_katex", "katex_file", "fix_pdf_dates", "tool_versions", "check_setup",
           "BROWSER_PACKAGE", "MIN_SCALE", "PAGE_ORIGIN", "PAGE_PX"]

BROWSER_PACKAGE = "chromium-headless-shell"
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
PAGE_ORIGIN = "http://synth.invalid"
MIN_SCALE = 0.5
PAGE_PX = (816, 1056)  # US Letter in CSS pixels (8.5 x 11 in at 96 px/in): the width the page is laid out in
FIXED_DATE = b"D:20000101000000+00'00'"
_PDF_DATE = re.compile(rb"/(CreationDate|ModDate) \(D:\d{14}[+\-Z][0-9']*\)")
DEFAULT_STYLE = ("<meta charset=\"utf-8\"><style>html{font-family:'Liberation Serif','DejaVu Serif',serif;font-size:12pt}"
                 "body{margin:0.6in}</style>")
SETUP_HINT = "bash scripts/setup_browser.sh"


class BrowserMissingError(RuntimeError):
    """No Chromium, no Playwright or no KaTeX: the message is one line naming what to install."""


class KatexError(ValueError):
    """KaTeX refuses an equation (its parse error)."""


class PageTooLongError(ValueError):
    """The page prints on more than one page even at MIN_SCALE."""


class PageTooWideError(ValueError):
    """The page's content is wider than the paper even at MIN_SCALE (or at scale 1 when scaling is not allowed)."""


@dataclass
class RenderedPage:
    pdf: bytes
    scale: float
    blocked: list[str]  # requests aborted (the network is off)


def find_browser() -> str:
    """``OLMOCR_RL_CHROMIUM`` or the first Chromium on PATH; BrowserMissingError naming the package otherwise."""
    given = os.environ.get("OLMOCR_RL_CHROMIUM")
    if given:
        if Path(given).is_file() and os.access(given, os.X_OK):
            return given
        raise BrowserMissingError(f"OLMOCR_RL_CHROMIUM={given} is not an executable file; unset it or fix the path")
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserMissingError(
        f"no headless Chromium found: install the Debian package {BROWSER_PACKAGE} (`apt-get install -y "
        f"--no-install-recommends {BROWSER_PACKAGE}`, or `{SETUP_HINT}`), or set OLMOCR_RL_CHROMIUM=/path/to/chrome")


def default_katex_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "olmocr_rl" / "katex" / "node_modules" / "katex" / "dist"


def find_katex() -> Path:
    """KaTeX's ``dist`` folder: ``OLMOCR_RL_KATEX_DIR``, else the cache ``scripts/setup_browser.sh`` fills."""
    folder = Path(os.environ.get("OLMOCR_RL_KATEX_DIR") or default_katex_dir())
    if not (folder / "katex.min.js").is_file() or not (folder / "katex.min.css").is_file():
        raise BrowserMissingError(
            f"KaTeX not found in {folder}: run `{SETUP_HINT}` (npm install katex into the cache) or set "
            "OLMOCR_RL_KATEX_DIR to a KaTeX dist/ folder")
    return folder


def katex_file(katex_root: Path, url: str) -> Path | None:
    """The file of KaTeX's folder that ``url`` (``PAGE_ORIGIN/katex/...``) names, or None: the path is
    percent-decoded, and the file must lie inside ``katex_root`` (resolved: symlinks followed, ``..`` removed)
    after that, so no URL (``/katex//etc/x``, ``%2e%2e``, ``%2F``, a symlink pointing out) reaches another file."""
    parts = urllib.parse.urlsplit(url)
    if f"{parts.scheme}://{parts.netloc}" != PAGE_ORIGIN or not parts.path.startswith("/katex/"):
        return None
    relative = urllib.parse.unquote(parts.path[len("/katex/"):])
    if not relative or "\x00" in relative or relative.startswith("/"):
        return None
    try:
        path = (katex_root / relative).resolve()
        inside = path.is_relative_to(katex_root) and path.is_file()
    except (OSError, ValueError, RuntimeError):  # a name too long, a symlink loop
        return None
    return path if inside else None


def katex_version(folder: Path) -> str:
    try:
        return json.loads((folder.parent / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return "unknown"


def fix_pdf_dates(pdf: bytes) -> bytes:
    """The PDF with its creation/modification dates set to FIXED_DATE (same length: offsets stay valid)."""
    def same_length(match: re.Match) -> bytes:
        old = match.group(0)
        new = b"/" + match.group(1) + b" (" + FIXED_DATE + b")"
        return new if len(new) == len(old) else old
    return _PDF_DATE.sub(same_length, pdf)


def _import_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise BrowserMissingError("Playwright is not installed: pip install 'olmocr_rl[synth]' (or "
                                  "`pip install playwright`; no `playwright install` needed)") from None
    return sync_playwright


class Renderer:
    """One headless Chromium for many pages: ``typeset`` equations, ``render`` pages. Use as a context manager."""

    def __init__(self, timeout_s: float = 20.0) -> None:
        self.timeout_ms = int(timeout_s * 1000)
        self.executable = find_browser()
        self.katex_dir = find_katex()
        self._katex_root = self.katex_dir.resolve()
        self._start = _import_playwright()
        self._playwright = self._browser = None
        self._html = ""
        self._blocked: list[str] = []

    def __enter__(self) -> "Renderer":
        try:
            self._playwright = self._start().start()
            self._open()
        except Exception as error:  # noqa: BLE001 - the browser did not start: one line, not Playwright's log
            self.close()
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise BrowserMissingError(f"the browser {self.executable} did not start: {first[:200]}") from None
        return self

    def _open(self) -> None:
        self._browser = self._playwright.chromium.launch(executable_path=self.executable)
        self._math = self._browser.new_context().new_page()
        self._math.route("**/*", lambda route: route.abort())
        self._math.add_script_tag(path=str(self.katex_dir / "katex.min.js"))
        # Laid out as printed (the paper's width, print media), so its width can be measured before printing.
        self._page = self._browser.new_context(java_script_enabled=False, viewport={
            "width": PAGE_PX[0], "height": PAGE_PX[1]}).new_page()
        self._page.emulate_media(media="print")
        self._page.set_default_timeout(self.timeout_ms)
        self._page.route("**/*", self._route)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for thing in (self._browser, self._playwright):
            try:
                if thing is not None:
                    thing.close() if thing is self._browser else thing.stop()
            except Exception:  # noqa: BLE001 - closing a browser that already died
                pass
        self._browser = self._playwright = None

    def versions(self) -> dict[str, str]:
        return {"chromium": self._browser.version if self._browser else "unknown",
                "katex": katex_version(self.katex_dir), "playwright": importlib.metadata.version("playwright"),
                "browser_executable": self.executable}

    def _route(self, route) -> None:
        url = route.request.url
        if url == f"{PAGE_ORIGIN}/page.html":
            route.fulfill(body=self._html, content_type="text/html; charset=utf-8")
            return
        path = katex_file(self._katex_root, url)
        if path is not None:
            route.fulfill(path=str(path))
        else:
            self._blocked.append(url[:200])
            route.abort()

    def typeset(self, tex: str, display: bool) -> str:
        """KaTeX's HTML for one equation; KatexError with KaTeX's message when it refuses it."""
        try:
            return self._math.evaluate(
                "([t, d]) => katex.renderToString(t, {displayMode: d, throwOnError: true, output: 'html'})",
                [tex, display])
        except Exception as error:  # playwright.Error carrying KaTeX's ParseError
            message = str(error).split("\n")[0]
            message = message.split("ParseError: ", 1)[-1]
            raise KatexError(message) from None

    def _print(self, scale: float) -> bytes:
        return self._page.pdf(format="Letter", print_background=True, scale=scale,
                              margin={"top": "0", "bottom": "0", "left": "0", "right": "0"})

    def _math_head(self) -> str:
        """KaTeX's stylesheet, and its fonts preloaded: the load event (and so the print) waits for them."""
        fonts = sorted(p.name for p in (self.katex_dir / "fonts").glob("*.woff2"))
        return (f'<link rel="stylesheet" href="{PAGE_ORIGIN}/katex/katex.min.css">' + "".join(
            f'<link rel="preload" as="font" type="font/woff2" crossorigin href="{PAGE_ORIGIN}/katex/fonts/{name}">'
            for name in fonts))

    def _start_scale(self, allow_scaling: bool) -> float:
        """1, or the scale at which content wider than the paper fits its width; PageTooWideError below MIN_SCALE.
        (Printed wider than the paper, the content past its right edge is cut off: not on the page at all.)"""
        width = self._page.evaluate("() => Math.max(document.documentElement.scrollWidth, "
                                    "document.body ? document.body.scrollWidth : 0)")
        if width <= PAGE_PX[0] + 1:
            return 1.0
        scale = int(100 * PAGE_PX[0] / width) / 100  # rounded down
        if scale < MIN_SCALE or not allow_scaling:
            fits = f"fits the paper only at scale {scale:.2f}" + (f", under {MIN_SCALE}" if allow_scaling else "")
            raise PageTooWideError(f"its content is {width} px wide, the paper {PAGE_PX[0]} px: it {fits}; make "
                                   "the page narrower")
        return scale

    def render(self, body_html: str, allow_scaling: bool = True, math: bool = True) -> RenderedPage:
        """Print ``body_html`` (the page with its math already typeset) on one Letter page, scaled down to fit
        the paper's width and to MIN_SCALE if need be (``allow_scaling``), else PageTooWideError or
        PageTooLongError."""
        import pypdfium2 as pdfium

        self._html = "<!doctype html>" + DEFAULT_STYLE + (self._math_head() if math else "") + body_html
        self._blocked = []
        self._page.goto(f"{PAGE_ORIGIN}/page.html", wait_until="load", timeout=self.timeout_ms)
        scale = self._start_scale(allow_scaling)
        while True:
            pdf = self._print(scale)
            pages = len(pdfium.PdfDocument(pdf))
            if pages == 1:
                return RenderedPage(fix_pdf_dates(pdf), scale, list(self._blocked))
            if scale <= MIN_SCALE + 1e-9 or not allow_scaling:
                raise PageTooLongError(f"prints on {pages} pages even at scale {MIN_SCALE}; shorten the page")
            scale = round(max(MIN_SCALE, scale - 0.1), 2)


@functools.lru_cache(maxsize=8)
def browser_version(executable: str) -> str:
    """The first line ``executable --version`` prints ("Chromium 156.0..."); BrowserMissingError when it is not a
    Chromium (``OLMOCR_RL_CHROMIUM`` set to another program) or does not answer."""
    import subprocess

    try:
        done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
        line = (done.stdout.strip().splitlines() or [""])[0]
    except (OSError, subprocess.SubprocessError) as error:
        line = f"no answer: {type(error).__name__}"
    if not re.search(r"\b(Chromium|Chrome)\b", line):
        raise BrowserMissingError(f"{executable} is not a Chromium (its --version printed {line[:80]!r}); set "
                                  f"OLMOCR_RL_CHROMIUM to a Chromium, or unset it to use {BROWSER_PACKAGE}")
    return line


def tool_versions() -> dict[str, str]:
    """The versions the manifest names, read without starting a browser (Chromium's ``--version``)."""
    executable = find_browser()
    line = browser_version(executable)
    try:
        playwright = importlib.metadata.version("playwright")
    except importlib.metadata.PackageNotFoundError:
        playwright = "not installed"
    return {"chromium": line.split()[-1] if line else "unknown", "chromium_executable": executable,
            "katex": katex_version(find_katex()), "playwright": playwright}


def check_setup() -> None:
    """BrowserMissingError (one line: what to install) unless Chromium (one that answers ``--version`` as
    Chromium), KaTeX and Playwright are all there."""
    browser_version(find_browser())
    find_katex()
    _import_playwright()
