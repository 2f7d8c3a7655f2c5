"""olmocr_rl.recipe.pages without a browser: the grid's numbers (against the image processor), the generator's
determinism, the disjoint and equally hard splits, every page inside its text area, line breaking, the command.
The grid on real prints (Chromium, pypdfium2) is tests/integration/test_recipe_browser.py."""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter
from pathlib import Path

import pytest

from olmocr_rl.recipe import pages
from olmocr_rl.recipe.compose import KINDS, Composer, PageSpec
from olmocr_rl.recipe.grid import MONO_ADVANCE_EM, PrintGrid, smart_resize
from olmocr_rl.recipe.layout import Paragraph, Tok, wrap
from olmocr_rl.recipe.words import Vocabulary, content_tokens, split_of
from recipe_helpers import needs_font, sparse_columns


def test_the_grid_at_448_puts_a_cell_on_a_patch_and_a_line_on_a_token_row():
    grid = PrintGrid()
    assert grid.render_size == (347, 448) and grid.final_size == (336, 448)
    assert (grid.cols, grid.rows, grid.text_cols, grid.text_rows) == (24, 16, 21, 14)
    assert grid.cell_pt == pytest.approx(25.5) and grid.row_pt == pytest.approx(49.5)
    assert grid.font_pt == pytest.approx(25.5 / MONO_ADVANCE_EM) == pytest.approx(42.355, abs=1e-3)
    # a point of the page lands at x * W / 612 px of the final image: a cell is 14 px, a line 28 px
    assert grid.cell_pt * grid.final_size[0] / 612 == pytest.approx(14)
    assert grid.row_pt * grid.final_size[1] / 792 == pytest.approx(28)
    css = grid.css()
    assert "body{margin:66px 0 0 68px" in css  # one line (49.5 pt) and two cells (51 pt) of margin, in CSS px
    assert "line-height:66px" in css and "font-size:56.4736px" in css


@pytest.mark.parametrize("dim", [448, 560, 896, 1288])
def test_the_grid_follows_the_page_size(dim):
    grid = PrintGrid(dim)
    width, height = grid.final_size
    assert width % 28 == 0 and height % 28 == 0
    assert grid.cell_pt * width / 612 == pytest.approx(14) and grid.row_pt * height / 792 == pytest.approx(28)
    assert (grid.text_cols, grid.text_rows) == (width // 14 - 3, height // 28 - 2)


def test_smart_resize_is_the_image_processors():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as theirs

    sizes = [(448, 347), (1288, 996), (560, 433), (200, 155), (3000, 2319), (60, 47)]
    for height, width in sizes:
        for budget in (28 * 28 * 16, 28 * 28 * 256, 28 * 28 * 1280):
            assert smart_resize(height, width, max_pixels=budget) == theirs(height, width, max_pixels=budget)
    assert PrintGrid(1288, max_pixels=28 * 28 * 256).final_size[0] % 28 == 0


def test_a_page_too_small_for_the_kinds_is_refused_with_the_flag():
    with pytest.raises(ValueError, match="--dim 448 or more"):
        PrintGrid(336)
    with pytest.raises(ValueError, match="raise --max_pixels"):  # the tiny preset's 16 image tokens
        PrintGrid(448, max_pixels=28 * 28 * 16)


def test_wrap_breaks_greedily_at_spaces_as_the_browser_does():
    def lines(text: str, width: int) -> list[str]:
        return [" ".join(t.text for t in line) for line in wrap([Tok(w) for w in text.split()], width)]

    assert lines("aaaa bbbb cc dddd e", 10) == ["aaaa bbbb", "cc dddd e"]  # 10 cells fill a line of 10
    assert lines("aaaa bbbbb cc ddddddddd e", 10) == ["aaaa bbbbb", "cc", "ddddddddd", "e"]
    assert len(wrap([Tok("aaaaaaaaa", marker="1")], 10)) == 1  # a word and its marker: one unbreakable unit
    assert [[t.text for t in line] for line in wrap([Tok("ab"), Tok("cd")], 5, first=2)] == [["ab"], ["cd"]]
    with pytest.raises(ValueError, match="wider than a line"):
        wrap([Tok("x" * 11)], 10)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@needs_font
def test_the_same_seed_gives_the_same_bytes_and_pages_do_not_move_when_n_grows(tmp_path):
    first = pages.generate("train", 12, 3, tmp_path / "a")
    pages.generate("train", 12, 3, tmp_path / "b")
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert first["pages_per_kind"] == {kind: 2 for kind in KINDS}
    pages.generate("train", 18, 3, tmp_path / "c")
    grown = _tree(tmp_path / "c")
    assert all(grown[name] == data for name, data in _tree(tmp_path / "a").items() if name != pages.MANIFEST)
    pages.generate("train", 12, 4, tmp_path / "d")
    assert _tree(tmp_path / "d")["report/train_0000.html"] != _tree(tmp_path / "a")["report/train_0000.html"]


def _sidecars(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*/*.json"))]


def _printed_text(sidecar: dict) -> str:
    return " ".join(line["text"] for line in sidecar["lines"])


@needs_font
def test_train_and_heldout_share_no_word_or_number_and_are_drawn_alike(tmp_path):
    pages.generate("train", 60, 0, tmp_path / "t")
    pages.generate("heldout", 60, 0, tmp_path / "h")
    train, held = _sidecars(tmp_path / "t"), _sidecars(tmp_path / "h")
    vocab = {}
    for name, side in (("train", train), ("heldout", held)):
        words, numbers = set(), set()
        for sidecar in side:
            w, n = content_tokens(_printed_text(sidecar) + " " + " ".join(sidecar["furniture"]["header"]))
            words, numbers = words | w, numbers | n
        assert all(split_of(w) == name for w in words) and all(split_of(n) == name for n in numbers)
        vocab[name] = (words, numbers)
    assert len(vocab["train"][0]) > 1000 and len(vocab["train"][1]) > 100
    assert not vocab["train"][0] & vocab["heldout"][0] and not vocab["train"][1] & vocab["heldout"][1]
    # same kinds page by page, same amounts of text and word lengths (not an easier held-out set)
    assert [s["kind"] for s in train] == [s["kind"] for s in held]
    chars = [statistics.mean(s["chars"] for s in side) for side in (train, held)]
    assert abs(chars[0] - chars[1]) / chars[0] < 0.1
    lengths = [Counter(len(w) for s in side for w in content_tokens(_printed_text(s))[0]) for side in (train, held)]
    total = [sum(c.values()) for c in lengths]
    assert sum(abs(lengths[0][k] / total[0] - lengths[1][k] / total[1]) for k in range(2, 11)) < 0.1


def test_the_vocabulary_splits_every_word_and_number_one_way():
    rng = random.Random(0)
    for split in ("train", "heldout"):
        vocab = Vocabulary(split)
        assert all(split_of(vocab.word(rng)) == split for _ in range(200))
        assert all(split_of(vocab.number(rng, 4, commas=True)) == split for _ in range(200))
    assert split_of("4,128") == split_of("4128") == split_of(4128)
    assert split_of("Kelo") == split_of("kelo")
    assert {split_of(w, 1) for w in Vocabulary("train", 0).words[5][:50]} == {"train", "heldout"}  # seeded hash
    with pytest.raises(ValueError, match="split must be one of"):
        Vocabulary("test")


def test_every_page_of_every_kind_stays_inside_its_text_area():
    grid = PrintGrid()
    composer = Composer(Vocabulary("train"), grid)
    seen = Counter()
    for i in range(240):
        spec = composer.compose(KINDS[i % len(KINDS)], random.Random(i))
        pages._check_fits(spec, grid, f"page {i}")  # raises on a line outside the 21 x 14 area
        lines = pages.printed_lines(spec, grid)
        assert len({line["row"] for line in lines}) == len([line["row"] for line in lines])
        seen.update(type(b).__name__ for b in spec.blocks)
        seen.update(["header"] * bool(spec.header) + ["footer"] * bool(spec.footer))
    for block in ("Heading", "Paragraph", "ListBlock", "TableBlock", "DisplayMath", "Columns", "Footnotes",
                  "header", "footer"):
        assert seen[block] >= 20, (block, seen)
    tall = PageSpec("report", blocks=[Paragraph([Tok("kelo")])] * 15)
    with pytest.raises(RuntimeError, match="the page holds 14"):
        pages._check_fits(tall, grid, "tall")
    wide = PageSpec("report", header=["x" * 22])
    with pytest.raises(RuntimeError, match="outside the 21 x 14 text area"):
        pages._check_fits(wide, grid, "wide")


@needs_font
def test_the_command_writes_pages_and_says_what_it_wrote(tmp_path, capsys):
    out = tmp_path / "pages"
    assert pages.main(["--split", "heldout", "--n", "6", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert "6 heldout page(s)" in line and "21 x 14 grid (image 336 x 448 px, 25.5 pt cells)" in line
    assert sorted(p.name for p in out.iterdir()) == sorted([*KINDS, pages.MANIFEST])
    html = (out / "table" / "heldout_0001.html").read_text()
    assert "<table" in html and "DejaVu Sans Mono" in html
    assert pages.main(["--split", "heldout", "--n", "3", "--out", str(out)]) == 0  # a rerun replaces its pages
    assert len(list(out.glob("*/*.html"))) == 3
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    for argv, message in ((["--split", "train", "--out", str(tmp_path / "mine")], "not generated pages"),
                          (["--split", "train", "--out", str(out), "--dim", "300"], "give --dim 448 or more"),
                          (["--split", "train", "--out", str(out), "--kinds", "poem"], "unknown page kind"),
                          (["--out", str(out)], "give --split and --out"),
                          (["--check", str(tmp_path / "mine")], "has no synth_manifest.json")):
        assert pages.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1, (argv, err)


@needs_font
def test_a_page_pdfium_would_read_as_vertical_lines_is_drawn_again(tmp_path):
    from olmocr_rl.recipe.flow import glyph_box, reads_horizontal, shares

    grid = PrintGrid()
    assert glyph_box("m")[2] - glyph_box("m")[0] > 2 * (glyph_box(".")[2] - glyph_box(".")[0])
    assert glyph_box("g")[1] < 0 < glyph_box("l")[3]  # below and above the baseline
    lines = pages.printed_lines(sparse_columns(), grid)
    width, height = shares(lines, grid)
    assert width < 0.8 and width < height and not reads_horizontal(lines, grid)
    composer = Composer(Vocabulary("train"), grid)
    spec, draws = pages._draw_page(composer, "report", random.Random(0), grid, "report")
    assert draws >= 1 and reads_horizontal(pages.printed_lines(spec, grid), grid)
    manifest = pages.generate("train", 60, 0, tmp_path / "p")
    assert 0 < manifest["redrawn"] < 12  # some pages are drawn again, most are not
