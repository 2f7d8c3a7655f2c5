"""Rendering: olmOCR's size rule, MediaBox and /Rotate handling, and the page cache."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
import pytest

from olmocr_rl.data.render import PageRenderCache, RenderError, render_page, target_size


@pytest.mark.parametrize(
    "width, height, target, expected",
    [
        (612, 792, 1288, (996, 1288)),  # US letter: 612 * 1288 / 792 = 995.27 -> rounded up
        (792, 612, 1288, (1288, 996)),  # landscape
        (720, 540, 1288, (1288, 966)),  # 540 * 1288 / 720 = 966 exactly: no extra pixel from float noise
        (273.6, 485.8, 1288, (726, 1288)),  # 725.39 -> 726 (what pdftoppm gives)
        (180, 300, 1024, (615, 1024)),  # 614.4 -> 615
        (100, 100, 10, (10, 10)),  # square
        (1000, 1, 50, (50, 1)),  # a sliver keeps at least one pixel
    ],
)
def test_target_size_hand_worked(width, height, target, expected):
    assert target_size(width, height, target) == expected


def test_target_size_rejects_nonsense():
    with pytest.raises(ValueError):
        target_size(0, 10, 100)
    with pytest.raises(ValueError):
        target_size(10, 10, 0)


def _pdf(tmp_path, name, pages):
    """Write a PDF whose pages are (width, height, rotation, cropbox or None), each with a red
    square in the bottom-left 100x100 points of its MediaBox."""
    document = pdfium.PdfDocument.new()
    for width, height, rotation, cropbox in pages:
        page = document.new_page(width, height)
        square = pdfium_c.FPDFPageObj_CreateNewRect(0, 0, 100, 100)
        pdfium_c.FPDFPageObj_SetFillColor(square, 255, 0, 0, 255)
        pdfium_c.FPDFPath_SetDrawMode(square, pdfium_c.FPDF_FILLMODE_WINDING, 0)
        pdfium_c.FPDFPage_InsertObject(page.raw, square)
        pdfium_c.FPDFPage_GenerateContent(page.raw)
        if rotation:
            page.set_rotation(rotation)
        if cropbox:
            page.set_cropbox(*cropbox)
    path = tmp_path / name
    document.save(path)
    document.close()
    return path


def _red_pixels(image):
    pixels = np.asarray(image).astype(int)
    return int(((pixels[..., 0] > 200) & (pixels[..., 1] < 60) & (pixels[..., 2] < 60)).sum())


def test_render_sizes_mode_and_pages(tmp_path):
    path = _pdf(tmp_path, "three.pdf", [(612, 792, 0, None), (792, 612, 0, None), (612, 792, 90, None)])
    first = render_page(path, 1)
    assert first.mode == "RGB" and first.size == (996, 1288)
    assert render_page(path, 2).size == (1288, 996)
    assert render_page(path, 3).size == (1288, 996)  # /Rotate 90 turns the page on its side
    assert render_page(path, 1, target_longest_image_dim=200).size == (155, 200)  # 612 * 200 / 792 = 154.5


def test_render_draws_the_whole_mediabox_like_pdftoppm(tmp_path):
    # CropBox (200,200)-(500,600) hides the red square; pdftoppm draws the MediaBox, so must we.
    path = _pdf(tmp_path, "cropped.pdf", [(600, 800, 0, (200, 200, 500, 600))])
    image = render_page(path, 1, target_longest_image_dim=800)
    assert image.size == (600, 800)
    assert _red_pixels(image) == pytest.approx(100 * 100, rel=0.03)
    assert image.getpixel((50, 750))[0] > 200 and image.getpixel((50, 750))[1] < 60  # bottom-left corner
    assert image.getpixel((300, 400)) == (255, 255, 255)


def test_render_errors_name_file_and_page(tmp_path):
    path = _pdf(tmp_path, "one.pdf", [(612, 792, 0, None)])
    for page in (0, 2):
        with pytest.raises(RenderError, match=r"one\.pdf page \d: page out of range: the PDF has 1 page") as info:
            render_page(path, page)
        assert info.value.reason == "page_out_of_range" and info.value.page == page
    with pytest.raises(RenderError, match=r"nope\.pdf page 3: PDF file not found") as info:
        render_page(tmp_path / "nope.pdf", 3)
    assert info.value.reason == "missing"
    garbage = tmp_path / "garbage.pdf"
    garbage.write_bytes(b"%PDF-1.4\nthis is not a pdf\n" * 5)
    with pytest.raises(RenderError, match=r"garbage\.pdf page 1: PDF cannot be read \(not a valid PDF\)") as info:
        render_page(garbage, 1)
    assert info.value.reason == "corrupt"


@pytest.mark.parametrize("vanishes_in", ["pypdfium2's check", "PDFium's open"])
def test_a_pdf_gone_between_the_check_and_the_open_is_missing(tmp_path, monkeypatch, vanishes_in):
    """A PDF whose folder is renamed while a run reads it (tests/integration/test_fault_runs.py) can pass the
    existence check and be gone when PDFium opens it: the same one-line "missing" error, not PDFium's exception."""
    from olmocr_rl.data import render

    path = _pdf(tmp_path, "one.pdf", [(612, 792, 0, None)])
    opened = pdfium.PdfDocument

    def vanishing(source, *args, **kwargs):
        path.unlink()
        if vanishes_in == "PDFium's open":  # pypdfium2's check passed, PDFium then failed to open the file
            raise pdfium.PdfiumError("Failed to load document (PDFium: File access error).",
                                     err_code=pdfium_c.FPDF_ERR_FILE)
        return opened(source, *args, **kwargs)  # pypdfium2 finds it gone: FileNotFoundError

    monkeypatch.setattr(render.pdfium, "PdfDocument", vanishing)
    with pytest.raises(RenderError, match=r"one\.pdf page 1: PDF file not found") as info:
        render_page(path, 1)
    assert info.value.reason == "missing"


@pytest.fixture()
def letter_pdf(tmp_path):
    return _pdf(tmp_path, "pages.pdf", [(612, 792, 0, None)] * 3)


def test_cache_renders_a_page_once_for_g_requests(letter_pdf):
    cache = PageRenderCache()
    images = [cache.get(letter_pdf, 1, 400) for _ in range(8)]  # G = 8 samples of one page
    stats = cache.stats
    assert (stats.renders, stats.hits, stats.max_renders_per_page) == (1, 7, 1)
    assert all(image.size == (310, 400) for image in images)
    assert len({id(image) for image in images}) == 8  # each caller gets its own copy
    assert images[0].tobytes() == images[7].tobytes()


def test_cache_copies_protect_the_cached_image(letter_pdf):
    cache = PageRenderCache()
    first = cache.get(letter_pdf, 1, 400)
    first.paste((0, 0, 255), (0, 0, first.width, first.height))  # a caller scribbles on its image
    assert cache.get(letter_pdf, 1, 400).getpixel((200, 20)) == (255, 255, 255)


def test_cache_is_bounded_by_bytes_lru(letter_pdf):
    page_bytes = 310 * 400 * 3
    cache = PageRenderCache(max_bytes=2 * page_bytes)
    for page in (1, 2, 1, 3):  # page 3 evicts page 2, the least recently used
        cache.get(letter_pdf, page, 400)
    stats = cache.stats
    assert (stats.renders, stats.hits, stats.evictions, stats.entries, stats.bytes) == (3, 1, 1, 2, 2 * page_bytes)
    cache.get(letter_pdf, 1, 400)  # still cached
    cache.get(letter_pdf, 2, 400)  # evicted: rendered again
    assert cache.stats.renders == 4 and cache.stats.max_renders_per_page == 2
    key = next(key for key in cache.renders_per_page() if key[1] == 2)
    assert cache.renders_per_page()[key] == 2


def test_cache_size_zero_disables_caching(letter_pdf):
    cache = PageRenderCache(max_bytes=0)
    for _ in range(3):
        cache.get(letter_pdf, 1, 100)
    assert (cache.stats.renders, cache.stats.hits, cache.stats.entries) == (3, 0, 0)


def test_cache_concurrent_requests_render_once(letter_pdf):
    cache = PageRenderCache()
    sizes = []
    threads = [threading.Thread(target=lambda: sizes.append(cache.get(letter_pdf, 2, 300).size)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sizes == [(232, 300)] * 8  # 612 * 300 / 792 = 231.8
    assert cache.stats.renders == 1 and cache.stats.hits == 7


def test_cache_pickles_as_an_empty_cache_with_the_same_budget(letter_pdf):
    cache = PageRenderCache(max_bytes=12345678)
    cache.get(letter_pdf, 1, 100)
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.max_bytes == 12345678 and clone.stats.entries == 0 and clone.stats.renders == 0
    clone.get(letter_pdf, 1, 100)
    assert clone.stats.renders == 1
