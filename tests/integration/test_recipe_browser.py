"""The recipe's pages printed for real: a few generated pages of each kind through python -m olmocr_rl.synth
(Chromium), then, on the PDFs: no page skipped or rescaled, every glyph of the grid font on the model's patch
grid (rendered as the dataset renders, resized as the image processor resizes: left edges within 1.5 px of a
multiple of 14 px, one baseline offset in every 28 px line), the lines printed where the generator laid them
out, no equation over the text, and the teacher's transcripts scored (the fault-free one passes every test, each
fault fails its tests). Skips with the set-up line where the browser, KaTeX or Playwright is missing."""

from __future__ import annotations

import json
import re
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


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Path:
    from olmocr_rl.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("reader") / "base", seed=0, shape="reader", tokenizer="chars")


def _warm_start_pages(made, reader, tmp_path):
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.recipe import sft

    teacher.run_teacher(made / "bench", made / "pages", tmp_path / "clean", rates=dict.fromkeys(teacher.FAULTS, 0.0))
    _, processor = load_model_and_processor(str(reader))
    grid = sft._Grid.of(processor)
    return grid, sft.load_pages(made / "bench", tmp_path / "clean", grid, 448)


def test_the_warm_start_cuts_each_printed_line_and_aligns_the_transcript_with_the_glyphs(made, reader, tmp_path):
    grid, loaded = _warm_start_pages(made, reader, tmp_path)
    assert (grid.cell_px, grid.row_px) == (14, 28)
    sidecars = {p.stem: json.loads(p.read_text()) for p in (made / "pages").rglob("*.json")}
    lines = guided = body = 0
    for page in loaded:
        assert page.lines and page.image.size[0] % 28 == 0 and page.image.size[1] % 28 == 0
        for strip in page.lines:
            left, top, right, bottom = strip.box
            assert 0 <= left < right <= page.image.size[0] and 0 <= top < bottom <= page.image.size[1]
            assert (bottom - top) == 28 and top % 28 == 0 and left % 14 == 0
            assert strip.text.strip() and len(strip.cells) == len(strip.text)
            lines += 1
        for block in page.blocks:
            assert 2 <= block.text.count("\n") + 1 <= 4 and (block.box[3] - block.box[1]) % 28 == 0
        at = {(glyph.row, glyph.col): glyph.char for glyph in page.glyphs if glyph.on_grid}
        for char, cell in zip(page.transcript, page.cells):
            if cell is not None:  # a guided character is the glyph printed in its cell (a space: an empty cell)
                assert at.get(cell, " ") == char, (char, cell)
                guided += 1
        body += len(page.transcript)
    assert lines >= 10 * len(loaded) and guided > 0.3 * body
    # each page's printed lines are the lines its generator laid out (sidecar rows; a footnote's marker is
    # printed as a superscript digit beside its word, which the layout does not hold)
    for page, sidecar in zip(loaded, (sidecars[p.stem] for p in sorted((made / "pages").rglob("*.html")))):
        laid_out = set(re.findall("[A-Za-z]+", " ".join(_expected_rows(sidecar).values())))
        missing = [strip.text for strip in page.lines if not set(re.findall("[A-Za-z]+", strip.text)) <= laid_out]
        assert not missing, (missing, laid_out)


def test_the_warm_start_trains_writes_a_plain_checkpoint_and_its_loss_falls(made, reader, tmp_path):
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.recipe import sft

    teacher.run_teacher(made / "bench", made / "pages", tmp_path / "t", seed=1)
    logged = []
    schedule = sft.Schedule(line_steps=24, page_steps=2, line_batch=4, page_batch=2, warmup_steps=2, log_every=2)
    summary = sft.warm_start_reader(reader, made / "bench", tmp_path / "t", tmp_path / "sft", schedule,
                                    log=logged.append)
    assert logged[0].startswith(f"[sft] {PER_KIND * len(KINDS) + 2} pages") and "step 26/26 (pages)" in logged[-1]
    loss = [float(line.split("loss ")[1].split()[0]) for line in logged[1:]]
    assert loss[-2] < 0.8 * loss[0], loss  # end of the lines stage against its start
    assert {"loss", "guide", "glyphs"} <= set(summary["final"])
    assert json.loads((tmp_path / "sft" / "olmocr_rl_sft.json").read_text())["schedule"]["line_steps"] == 24
    model, processor = load_model_and_processor(str(tmp_path / "sft"))  # no probe weights, the base's processor
    assert model.config._attn_implementation == "sdpa"
    assert (tmp_path / "sft" / "tokenizer.json").read_bytes() == (reader / "tokenizer.json").read_bytes()


def test_the_warm_start_command_says_what_is_missing_in_one_line(made, reader, tmp_path, capsys):
    from olmocr_rl.recipe import sft

    base = ["--transcripts", str(tmp_path), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        sft.main([str(reader), "--bench", str(tmp_path / "nope"), *base])
    assert f"error: --bench: {tmp_path / 'nope'} does not exist; pass a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sft.main([str(tmp_path), "--bench", str(made / "bench"), *base])
    assert "error: the model folder: " in capsys.readouterr().err
    assert sft.main([str(reader), "--bench", str(made / "bench"), *base]) == 2  # an empty transcripts folder
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "no teacher transcription for" in err[-1] and "Traceback" not in err[0]
