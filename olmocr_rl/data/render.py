"""PDF page -> PIL image, in-process with pypdfium2, and a bounded per-process cache of rendered pages.

Size rule (olmOCR's): the page's MediaBox is scaled so that its longest side is exactly
`target_longest_image_dim` pixels (poppler's `pdftoppm -r target*72/longest_side`); the other side
is rounded up, as pdftoppm does. Like pdftoppm, the whole MediaBox is drawn even when the page has
a smaller CropBox, and the page's /Rotate is applied.

Why a cache: TRL samples every page G times per step (G = 28 in olmOCR's recipe) and asks the
dataset for it G times; without a cache the same page would be rendered G times.

pypdfium2 is not thread-safe: every call into PDFium here holds one process-wide lock.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

# olmOCR's page size (longest side, px), the renderer's default: declared with --target_longest_image_dim.
from olmocr_rl.config.values import DEFAULT_TARGET_LONGEST_IMAGE_DIM

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024  # ~130 US-letter pages at 1288 px, per process

_PDFIUM_LOCK = threading.RLock()


class RenderError(ValueError):
    """A PDF page that cannot be rendered: missing file, encrypted, corrupt, or page out of range.

    Attributes: `path` (the PDF), `page` (1-based, or None for whole-file problems), `detail` (the
    message without the location) and `reason`, one of "missing", "encrypted", "corrupt",
    "no_pages", "page_out_of_range", "render_failed".
    """

    def __init__(self, path: str | os.PathLike, page: int | None, reason: str, message: str) -> None:
        where = f"{path}" if page is None else f"{path} page {page}"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.page = page
        self.reason = reason
        self.detail = message


def target_size(width: float, height: float, target_longest_image_dim: int) -> tuple[int, int]:
    """Pixel size (width, height) of a width x height page (any unit) whose longest side is the target.

    The other side is rounded up, as pdftoppm does; the 1e-6 keeps floating-point noise such as
    996.0000000001 from adding a pixel.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"page size must be positive, got {width} x {height}")
    if target_longest_image_dim < 1:
        raise ValueError(f"target_longest_image_dim must be >= 1, got {target_longest_image_dim}")
    scale = target_longest_image_dim / max(width, height)

    def side(length: float) -> int:
        if length == max(width, height):
            return target_longest_image_dim
        return max(1, math.ceil(length * scale - 1e-6))

    return side(width), side(height)


def _open_document(pdf_path: str | os.PathLike) -> pdfium.PdfDocument:
    """Open a PDF (caller holds _PDFIUM_LOCK), turning PDFium's failures into RenderError."""
    def missing() -> RenderError:
        return RenderError(pdf_path, None, "missing", "PDF file not found; check the path under pdfs/")

    if not os.path.isfile(pdf_path):
        raise missing()
    try:
        return pdfium.PdfDocument(str(pdf_path))
    except FileNotFoundError:  # gone since the check above (its folder renamed or deleted mid-run)
        raise missing() from None
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code == pdfium_c.FPDF_ERR_FILE and not os.path.isfile(pdf_path):  # gone inside PDFium's own open
            raise missing() from None
        if code == pdfium_c.FPDF_ERR_PASSWORD:
            raise RenderError(
                pdf_path, None, "encrypted", "PDF is encrypted with a password; decrypt it (e.g. qpdf --decrypt) or remove it"
            ) from None
        if code == pdfium_c.FPDF_ERR_SECURITY:
            raise RenderError(
                pdf_path, None, "encrypted", "PDF uses an unsupported security handler; decrypt it or remove it"
            ) from None
        if code == pdfium_c.FPDF_ERR_SUCCESS:
            raise RenderError(pdf_path, None, "no_pages", "PDF has no pages; remove it and its tests") from None
        why = {pdfium_c.FPDF_ERR_FORMAT: "not a valid PDF", pdfium_c.FPDF_ERR_FILE: "the file cannot be opened"}.get(
            code, f"PDFium error {code}"
        )
        raise RenderError(
            pdf_path, None, "corrupt", f"PDF cannot be read ({why}); re-export the file or remove it and its tests"
        ) from None


def pdf_page_count(pdf_path: str | os.PathLike) -> int:
    """Number of pages of a PDF; RenderError when it is missing, encrypted or corrupt."""
    with _PDFIUM_LOCK:
        document = _open_document(pdf_path)
        try:
            return len(document)
        finally:
            document.close()


def _check_page(pdf_path: str | os.PathLike, page: int, page_count: int) -> None:
    if isinstance(page, bool) or not isinstance(page, int):
        raise RenderError(pdf_path, None, "page_out_of_range", f"page must be an int (1-based), got {page!r}")
    if not 1 <= page <= page_count:
        raise RenderError(
            pdf_path,
            page,
            "page_out_of_range",
            f"page out of range: the PDF has {page_count} page(s), pages are numbered from 1",
        )


def _media_size(pdf_page: pdfium.PdfPage) -> tuple[float, float]:
    """Displayed (width, height) in points of the page's MediaBox, /Rotate applied.

    pdftoppm draws the MediaBox while PDFium draws the CropBox, so a page with a smaller CropBox
    gets its CropBox widened to the MediaBox (in memory only). PDFium does not report a MediaBox
    inherited from the page tree; then the page's own effective size is used.
    """
    media_box = pdf_page.get_mediabox(fallback_ok=False)
    if media_box is not None and pdf_page.get_cropbox(fallback_ok=False) not in (None, media_box):
        pdf_page.set_cropbox(*media_box)
    return pdf_page.get_size()  # PDFium swaps width and height for /Rotate 90 and 270


def render_page(
    pdf_path: str | os.PathLike, page: int, target_longest_image_dim: int = DEFAULT_TARGET_LONGEST_IMAGE_DIM
) -> Image.Image:
    """Render page `page` (1-based) of a PDF to an RGB PIL image whose longest side is the target.

    Uncached; see PageRenderCache. Raises RenderError naming the file and page when the PDF is
    missing, encrypted or corrupt, or the page is out of range.
    """
    with _PDFIUM_LOCK:
        try:
            document = _open_document(pdf_path)
        except RenderError as exc:  # a whole-file problem, reported for the page that was asked for
            raise RenderError(pdf_path, page, exc.reason, exc.detail) from None
        try:
            _check_page(pdf_path, page, len(document))
            pdf_page = document[page - 1]
            try:
                width, height = target_size(*_media_size(pdf_page), target_longest_image_dim)
                # 3-byte RGB straight from PDFium (reverse byte order of its native BGR): no conversion pass.
                bitmap = pdfium.PdfBitmap.new_native(width, height, pdfium_c.FPDFBitmap_BGR, rev_byteorder=True)
                bitmap.fill_rect((255, 255, 255, 255), 0, 0, width, height)
                flags = pdfium_c.FPDF_ANNOT | pdfium_c.FPDF_REVERSE_BYTE_ORDER  # poppler draws annotations too
                pdfium_c.FPDF_RenderPageBitmap(bitmap, pdf_page, 0, 0, width, height, 0, flags)
                image = bitmap.to_pil()  # PIL copies 3-byte RGB buffers, so the image outlives the bitmap
                bitmap.close()
            finally:
                pdf_page.close()
        except RenderError:
            raise
        except Exception as exc:  # noqa: BLE001 - a PDFium failure mid-page is still "this page cannot render"
            raise RenderError(pdf_path, page, "render_failed", f"rendering failed ({exc}); check the PDF") from exc
        finally:
            document.close()
    return image if image.mode == "RGB" else image.convert("RGB")


@dataclass(frozen=True)
class RenderStats:
    """Counters of one PageRenderCache (in this process only)."""

    renders: int  # pages actually rasterised (cache misses)
    hits: int  # requests answered from the cache
    evictions: int  # pages dropped to stay under max_bytes
    entries: int  # pages held now
    bytes: int  # bytes held now
    max_bytes: int
    render_seconds: float  # time spent rasterising
    pages_rendered: int  # distinct (pdf, page, size) ever rendered
    max_renders_per_page: int  # worst case; 1 means no page was ever rendered twice

    @property
    def requests(self) -> int:
        return self.renders + self.hits


_CACHES: "weakref.WeakSet[PageRenderCache]" = weakref.WeakSet()


class PageRenderCache:
    """LRU cache of rendered pages, bounded by bytes (width x height x 3 per page).

    One per process: in a dataloader worker (fork or spawn) it starts over with its own memory and
    counters. `get` returns a fresh copy of the cached image, so a caller that edits its image in
    place cannot corrupt what later samples of the same page see. `max_bytes=0` disables caching.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._reset()
        _CACHES.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple, Image.Image] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._evictions = 0
        self._render_seconds = 0.0
        self._renders_by_page: Counter[tuple] = Counter()

    # Pickling (spawned dataloader workers) sends the budget, not the images or the lock.
    def __getstate__(self) -> dict:
        return {"max_bytes": self.max_bytes}

    def __setstate__(self, state: dict) -> None:
        self.max_bytes = state["max_bytes"]
        self._reset()
        _CACHES.add(self)

    def get(
        self, pdf_path: str | os.PathLike, page: int, target_longest_image_dim: int = DEFAULT_TARGET_LONGEST_IMAGE_DIM
    ) -> Image.Image:
        """The rendered page (a copy), rendering it only on a miss. Errors as render_page."""
        key = (os.path.abspath(pdf_path), page, target_longest_image_dim)
        with self._lock:
            cached = self._lookup(key)
        if cached is not None:
            return cached
        # PDFium is serialised anyway; holding its lock while re-checking means concurrent requests
        # for one page render it once.
        with _PDFIUM_LOCK:
            with self._lock:
                cached = self._lookup(key)
            if cached is not None:
                return cached
            started = time.perf_counter()
            image = render_page(pdf_path, page, target_longest_image_dim)
            elapsed = time.perf_counter() - started
        with self._lock:
            self._render_seconds += elapsed
            self._renders_by_page[key] += 1
            self._store(key, image)
        return image.copy()

    def _lookup(self, key: tuple) -> Image.Image | None:
        image = self._entries.get(key)
        if image is None:
            return None
        self._entries.move_to_end(key)
        self._hits += 1
        return image.copy()

    def _store(self, key: tuple, image: Image.Image) -> None:
        size = image.width * image.height * len(image.getbands())
        if size > self.max_bytes or key in self._entries:
            return
        while self._entries and self._bytes + size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.width * evicted.height * len(evicted.getbands())
            self._evictions += 1
        self._entries[key] = image
        self._bytes += size

    def renders_per_page(self) -> dict[tuple[str, int, int], int]:
        """How many times each (absolute pdf path, page, target size) was rasterised in this process."""
        with self._lock:
            return dict(self._renders_by_page)

    @property
    def stats(self) -> RenderStats:
        with self._lock:
            return RenderStats(
                renders=sum(self._renders_by_page.values()),
                hits=self._hits,
                evictions=self._evictions,
                entries=len(self._entries),
                bytes=self._bytes,
                max_bytes=self.max_bytes,
                render_seconds=self._render_seconds,
                pages_rendered=len(self._renders_by_page),
                max_renders_per_page=max(self._renders_by_page.values(), default=0),
            )

    def clear(self) -> None:
        """Drop the cached images and reset the counters."""
        self._reset()


_DEFAULT_CACHE: PageRenderCache | None = None


def default_render_cache() -> PageRenderCache:
    """The process-wide cache datasets share unless given their own (DEFAULT_CACHE_BYTES)."""
    global _DEFAULT_CACHE
    if _DEFAULT_CACHE is None:
        _DEFAULT_CACHE = PageRenderCache()
    return _DEFAULT_CACHE


def _after_fork_in_child() -> None:
    # A lock held by another thread at fork time stays locked forever in the child: replace them.
    # Forked workers also start with empty caches, so their counters describe their own work.
    global _PDFIUM_LOCK
    _PDFIUM_LOCK = threading.RLock()
    for cache in list(_CACHES):
        cache._reset()


os.register_at_fork(after_in_child=_after_fork_in_child)

