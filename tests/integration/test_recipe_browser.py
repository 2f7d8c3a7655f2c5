"""The recipe's pages printed for real: a few generated pages of each kind through python -m olmocr_rl.synth
(Chromium), then, on the PDFs: no page skipped or rescaled, every glyph of the grid font on the model's patch
grid (rendered as the dataset renders, resized as the image processor resizes: left edges within 1.5 px of a
multiple of 14 px, one baseline offset in every 28 px line), the lines printed where the generator laid them
out, no equation over the text, and the teacher's transcripts scored (the fault-free one passes every test, each
fault fails its tests). Skips with the set-up line where the browser, KaTeX or Playwright is missing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from olmocr_rl.recipe import pages, teacher
from olmocr_rl.recipe.compose import KINDS
from olmocr_rl.recipe.grid import PrintGrid, measure_alignment
from olmocr_rl.synth import cli
from olmocr_rl.synth.render import BrowserMissingError, check_setup
from recipe_helpers import every_construct, sparse_columns

PER_KIND = 2


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    try:
        check_setup()
    except BrowserMissingError as error:
        pytest.skip(str(error))
    root = tmp_path_factory.mktemp("recipe_browser")
    pages.generate("heldout", PER_KIND * len(KINDS), 7, root / "pages")
    grid = PrintGrid()
    (root / "pages" / "sink").mkdir()
    for n, spec in enumerate(every_construct()):  # every construct, laid out by hand
        pages._check_fits(spec, grid, f"sink {n}")
        (root / "pages" / "sink" / f"sink_{n}.html").write_text(pages.page_html(spec, grid))
        sidecar = pages.sidecar(spec, grid, f"sink_{n}", "heldout", 0)
        (root / "pages" / "sink" / f"sink_{n}.json").write_text(json.dumps(sidecar))
    assert cli.main(["--html", str(root / "pages"), "--out", str(root / "bench")]) == 0
    return root


def _expected_rows(sidecar: dict) -> dict[int, str]:
    rows: dict[int, str] = {}
    for line in sidecar["lines"]:
        rows[line["row"]] = rows.get(line["row"], "").ljust(line["cell"]) + line["text"]
    return rows


def test_every_page_prints_at_scale_1_and_every_glyph_sits_on_the_patch_grid(made, tmp_path):
    manifest = json.loads((made / "bench" / "synth_manifest.json").read_text())
    assert not manifest["skipped_pages"] and len(manifest["pages"]) == PER_KIND * len(KINDS) + 2
    assert {page["scale"] for page in manifest["pages"]} == {1.0}
    assert all(manifest["tests_by_type"][kind] > 0 for kind in
               ("present", "absent", "order", "table", "math", "baseline", "format", "footnote"))
    grid = PrintGrid()
    glyphs = Counter()
    for page in manifest["pages"]:
        image = tmp_path / f"{Path(page['pdf']).stem}.png"
        found = measure_alignment(made / "bench" / "pdfs" / page["pdf"], grid, image_out=image)
        assert found.final_size == (336, 448) and found.render_size == (347, 448)
        assert found.chars > 40 and found.on_grid == found.chars, (page["pdf"], found.summary())
        assert found.baseline_spread <= 0.5, (page["pdf"], found.summary())  # one baseline offset in every line
        assert found.small_on_grid == found.small  # footnote markers start on a cell too
        sidecar = json.loads((made / "pages" / page["html"]).with_suffix(".json").read_text())
        assert found.rows == _expected_rows(sidecar), page["pdf"]  # each line where the generator put it
        glyphs.update(on=found.on_grid, all=found.chars, markers=found.small, math=found.other)
    assert glyphs["markers"] >= 1 and glyphs["math"] >= 10, glyphs
    argv = ["--check", str(made / "bench"), "--pages", str(made / "pages"), "--png", str(tmp_path / "png")]
    assert pages.main(argv) == 0  # the command's check: the same measures, one line per page and a verdict
    assert len(list((tmp_path / "png").glob("*.png"))) == len(manifest["pages"])


def test_inline_math_stays_inside_its_cells(made):
    """No KaTeX glyph of an inline equation overlaps the cell of a grid-font character of its line."""
    import pypdfium2 as pdfium

    from olmocr_rl.recipe.grid import MONO_FONT, _font_name

    grid = PrintGrid()
    checked = 0
    for pdf in sorted((made / "bench" / "pdfs").rglob("*.pdf")):
        document = pdfium.PdfDocument(str(pdf))
        page = document[0]
        width, height = page.get_size()
        text = page.get_textpage()
        boxes = {"mono": [], "math": []}
        for i in range(text.count_chars()):
            left, bottom, right, top = text.get_charbox(i)
            if right <= left:
                continue
            kind = "mono" if MONO_FONT.replace(" ", "") in _font_name(text, i).replace(" ", "") else "math"
            boxes[kind].append((left * grid.final_size[0] / width, right * grid.final_size[0] / width,
                                (height - top) * grid.final_size[1] / height, (height - bottom) * grid.final_size[1] / height))
        for ml, mr, mt, mb in boxes["math"]:
            for cl, cr, ct, cb in boxes["mono"]:
                same_line = min(mb, cb) - max(mt, ct) > 4
                assert not (same_line and mr > grid.patch * round(cl / grid.patch) + 0.5 and ml < cr), pdf
            checked += 1
        document.close()
    assert checked >= 10


def test_pdfium_reads_the_page_the_generator_refuses_as_vertical_text(made):
    """The premise of olmocr_rl.recipe.flow, on a real print: two columns of short lines alone come out of
    PDFium's text layer one character a line (synth would skip the page), a generated page line by line."""
    from olmocr_rl.synth.pipeline import pdf_text_layer
    from olmocr_rl.synth.render import Renderer

    grid = PrintGrid()
    with Renderer(20) as browser:
        sparse = pdf_text_layer(browser.render(pages.page_html(sparse_columns(), grid), math=False).pdf)[1]
    assert sparse.startswith("Y\r\no\r\nt\r\nr\r\ne"), sparse[:40]
    generated = (made / "bench" / "pdfs").rglob("*.pdf")
    layer = pdf_text_layer(next(generated).read_bytes())[1]
    assert max(len(line) for line in layer.split("\r\n")) >= 8


def test_the_teacher_on_the_printed_pages(made, tmp_path):
    clean = teacher.score_folder(made / "bench")
    assert all(passed == total for passed, total in clean.values())
    record = teacher.run_teacher(made / "bench", made / "pages", tmp_path / "t", rates=dict.fromkeys(teacher.FAULTS, 1.0))
    assert all(real["rate"] == 1.0 for real in record["realised"].values())
    taught = teacher.score_folder(made / "bench", tmp_path / "t")
    absent_pages = sum("furniture" in faults for faults in record["pages"].values())
    assert absent_pages >= 4 and taught["absent"][0] == 0 and taught["table"][0] == 0
    assert taught["order"][0] < clean["order"][0] and taught["present"][0] <= clean["present"][0]
    assert taught["math"] == clean["math"] and taught["format"] == clean["format"]
