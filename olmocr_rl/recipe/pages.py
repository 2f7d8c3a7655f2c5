"""Generated pages for the recipe: seeded HTML documents printed on the model's patch grid, in two disjoint splits.

    python -m olmocr_rl.recipe.pages --split train --n 300 --seed 0 --out recipe/pages_train
    python -m olmocr_rl.recipe.pages --split heldout --n 60 --seed 0 --out recipe/pages_heldout
    python -m olmocr_rl.synth --html recipe/pages_train --out recipe/bench_train
    python -m olmocr_rl.recipe.pages --check recipe/bench_train --pages recipe/pages_train   # on the patch grid?

Each page is one of :data:`~.compose.KINDS` (``report``: running head, heading, paragraphs, footnotes, footer
with page number; ``table``: a table with row/column spans and a sentence; ``list``: ordered or unordered, maybe
nested; ``columns``: two columns with footnote markers and footnotes; ``math``: display and inline equations;
``mixed``: a few of these), written to ``<out>/<kind>/<split>_<i>.html`` (one synth subset per kind) with a
sidecar ``<split>_<i>.json``: the page's furniture, tables and two-column blocks as the teacher
(``python -m olmocr_rl.recipe.teacher``) needs them, and every line it prints. ``<out>/recipe_pages.json`` records
the settings and counts. The same ``--split``, ``--n``, ``--seed``, ``--dim`` and ``--pool_seed`` give the same
bytes. docs/recipe.md explains the grid, the kinds and the splits.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .compose import KINDS, Composer, PageSpec
from .grid import DEFAULT_DIM, PrintGrid, measure_alignment
from .flow import FontMissingError, reads_horizontal
from .layout import Columns, DisplayMath, TableBlock, tokens_markdown
from .words import SPLITS, Vocabulary

__all__ = ["generate", "page_html", "sidecar", "printed_lines", "main", "MANIFEST", "check_bench",
           "BenchCheck"]

MANIFEST = "recipe_pages.json"
FORMAT = 1
MAX_DRAWS = 50


def printed_lines(spec: PageSpec, grid: PrintGrid, math_rows: list[int] | None = None) -> list[dict]:
    """Every line the page prints in the grid font: ``{"row", "cell", "text"}``, row and cell counted from the
    image's top and left edges (markers and math as spaces, blank lines left out); the lines of display math are
    added to ``math_rows`` when given."""
    top, left = grid.margin_rows[0], grid.margin_cells[0]
    lines: list[dict] = []

    def furniture(row: int, spans: list[str]) -> None:
        text = spans[0] if len(spans) == 1 else spans[0].ljust(grid.text_cols - len(spans[1])) + spans[1]
        lines.append({"row": row, "cell": left, "text": text})

    row = top
    if spec.header:
        furniture(row, spec.header)
        row += 1 + spec.gap
    for block in spec.blocks:
        for cell, text in block.printed(grid):
            if isinstance(block, DisplayMath) and math_rows is not None:
                math_rows.append(row)
            if text.strip():
                lead = len(text) - len(text.lstrip())
                lines.append({"row": row, "cell": left + cell + lead, "text": text.strip()})
            row += 1
        row += spec.gap
    if spec.footer:
        furniture(top + grid.text_rows - 1, spec.footer)
    return lines


def _check_fits(spec: PageSpec, grid: PrintGrid, name: str) -> None:
    """The page's text lies inside its margins (so synth prints it at scale 1, on one page)."""
    used = spec.used_rows(grid)
    if used > spec.body_rows(grid):
        raise RuntimeError(f"{name}: {used} lines of blocks, the page holds {spec.body_rows(grid)} (a generator bug)")
    for line in printed_lines(spec, grid):
        end = line["cell"] + len(line["text"])
        if end > grid.margin_cells[0] + grid.text_cols or not grid.margin_rows[0] <= line["row"] < grid.rows - \
                grid.margin_rows[1]:
            raise RuntimeError(f"{name}: line {line} runs outside the {grid.text_cols} x {grid.text_rows} text area "
                               "(a generator bug)")


def _draw_page(composer: Composer, kind: str, rng: random.Random, grid: PrintGrid, name: str
               ) -> tuple[PageSpec, int]:
    """A page of ``kind`` that fits its text area and that PDFium reads as horizontal lines (:mod:`.flow`): drawn
    again with the same generator until it does; and how many draws it took."""
    for draw in range(1, MAX_DRAWS + 1):
        spec = composer.compose(kind, rng)
        _check_fits(spec, grid, name)
        math_rows: list[int] = []
        if reads_horizontal(printed_lines(spec, grid, math_rows), grid, math_rows):
            return spec, draw
    raise RuntimeError(f"{name}: no {kind} page in {MAX_DRAWS} draws reads as horizontal lines (a generator bug)")


def page_html(spec: PageSpec, grid: PrintGrid) -> str:
    """The page as one HTML document (its style sheet keeps every line on the grid)."""
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">', f"<style>{grid.css(spec.gap)}</style>",
             "</head><body>"]

    def spans(values: list[str], number: bool) -> str:
        out = []
        for i, value in enumerate(values):
            cls = ' class="page-number"' if number and i == len(values) - 1 else ""
            out.append(f"<span{cls}>{html.escape(value)}</span>")
        return "".join(out)

    sheet = spec.body_rows(grid) + (spec.gap if spec.footer else 0)
    if spec.header:
        parts.append(f'<header class="running-head" style="margin-bottom:{grid.lines(spec.gap)}">'
                     f"{spans(spec.header, False)}</header>")
    parts.append(f'<div class="sheet" style="height:{grid.lines(sheet)}">')
    parts += [block.html(grid) for block in spec.blocks]
    parts.append("</div>")
    if spec.footer:
        parts.append(f'<footer class="page-footer">{spans(spec.footer, True)}</footer>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def sidecar(spec: PageSpec, grid: PrintGrid, name: str, split: str, seed: int) -> dict:
    """What the teacher needs of the page, and what it prints (see the module docstring)."""
    tables = [{"rows": [[cell.text for cell in row] for row in block.rows], "head": block.head}
              for block in spec.blocks if isinstance(block, TableBlock)]
    columns = []
    for block in spec.blocks:
        if isinstance(block, Columns):
            columns.append({
                "left": [[tokens_markdown(line) for line in p] for p in block.left],
                "right": [[tokens_markdown(line) for line in p] for p in block.right],
                "rows": [[tokens_markdown(a) if a else "", tokens_markdown(b) if b else ""]
                         for a, b in block.row_pairs()]})
    lines = printed_lines(spec, grid)
    return {"format": FORMAT, "name": name, "kind": spec.kind, "split": split, "seed": seed,
            "furniture": {"header": spec.header, "footer": spec.footer}, "tables": tables, "columns": columns,
            "blocks": [type(b).__name__ for b in spec.blocks], "lines": lines,
            "chars": sum(len(line["text"].replace(" ", "")) for line in lines), "grid": grid.describe()}


def _clear_previous(out: Path) -> None:
    """Remove the pages a previous run wrote into ``out`` (listed in its manifest), so none is left over."""
    manifest = out / MANIFEST
    if manifest.exists():
        try:
            previous = json.loads(manifest.read_text())
        except (OSError, ValueError):
            previous = {}
        for page in previous.get("pages", []):
            for suffix in (".html", ".json"):
                (out / f"{page}{suffix}").unlink(missing_ok=True)
    elif out.exists() and any(out.iterdir()):
        raise ValueError(f"--out {out} holds files that are not generated pages (no {MANIFEST}); give an empty or "
                         "new folder")


def generate(split: str, n: int, seed: int = 0, out_dir: str | Path = "pages", grid: PrintGrid | None = None,
             kinds: Sequence[str] = KINDS, pool_seed: int = 0) -> dict:
    """Write ``n`` pages of ``split`` into ``out_dir`` (kinds in turn), with sidecars and the manifest; returns
    the manifest. Page ``i`` is drawn with its own generator (seed, split, i): the same arguments give the same
    bytes, and a page does not change when ``n`` grows."""
    grid = grid or PrintGrid()
    if split not in SPLITS:
        raise ValueError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown page kind(s) {unknown or kinds}; the kinds are {', '.join(KINDS)}")
    if n < 1:
        raise ValueError(f"--n must be at least 1, got {n}")
    out = Path(out_dir)
    _clear_previous(out)
    composer = Composer(Vocabulary(split, pool_seed), grid)
    pages, per_kind, chars, redrawn = [], Counter(), 0, 0
    for i in range(n):
        kind = kinds[i % len(kinds)]
        name = f"{split}_{i:04d}"
        rng = random.Random(f"olmocr_rl.recipe.pages:{seed}:{split}:{pool_seed}:{i}")
        spec, draws = _draw_page(composer, kind, rng, grid, name)
        redrawn += draws > 1
        (out / kind).mkdir(parents=True, exist_ok=True)
        (out / kind / f"{name}.html").write_text(page_html(spec, grid))
        data = sidecar(spec, grid, name, split, seed)
        (out / kind / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        pages.append(f"{kind}/{name}")
        per_kind[kind] += 1
        chars += data["chars"]
    manifest = {"format": FORMAT, "split": split, "n": n, "seed": seed, "pool_seed": pool_seed, "kinds": list(kinds),
                "grid": grid.describe(), "pages_per_kind": dict(sorted(per_kind.items())),
                "chars_per_page": round(chars / n, 1), "pages": pages, "redrawn": redrawn}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


@dataclass
class BenchCheck:
    """What :func:`check_bench` found: glyphs on the grid, glyphs, pages whose lines are not where the generator
    laid them out (with ``pages``), and one line per page."""

    on_grid: int = 0
    glyphs: int = 0
    misplaced: list[str] = field(default_factory=list)
    report: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.on_grid / self.glyphs if self.glyphs else 0.0


def _sidecar_rows(sidecar: dict) -> dict[int, str]:
    rows: dict[int, str] = {}
    for line in sidecar["lines"]:
        rows[line["row"]] = rows.get(line["row"], "").ljust(line["cell"]) + line["text"]
    return rows


def check_bench(bench: Path, grid: PrintGrid, png_dir: Path | None = None, pages_dir: Path | None = None,
                tolerance: float = 1.5) -> BenchCheck:
    """Measure every page of a synth folder on the model's image (:func:`~.grid.measure_alignment`); with
    ``pages_dir`` (synth's ``--html``: the generated pages), also compare each line with its sidecar's."""
    manifest = bench / "synth_manifest.json"
    if not manifest.is_file():
        raise ValueError(f"{bench} has no synth_manifest.json; give a folder python -m olmocr_rl.synth wrote")
    found = BenchCheck()
    for page in json.loads(manifest.read_text())["pages"]:
        pdf = bench / "pdfs" / page["pdf"]
        image = png_dir / f"{pdf.parent.name}_{pdf.stem}.png" if png_dir else None
        result = measure_alignment(pdf, grid, tolerance, image)
        found.on_grid, found.glyphs = found.on_grid + result.on_grid, found.glyphs + result.chars
        note = ""
        if pages_dir is not None:
            sidecar = (pages_dir / page["html"]).with_suffix(".json")
            if not sidecar.is_file():
                raise ValueError(f"no sidecar {sidecar}; give --pages the folder synth's --html was")
            if result.rows != _sidecar_rows(json.loads(sidecar.read_text())):
                found.misplaced.append(page["pdf"])
                note = "; its lines are NOT where the generator laid them out"
        found.report.append(f"{page['pdf']}: {result.summary()}{note}")
    if not found.report:
        raise ValueError(f"no page in {bench}; give a folder python -m olmocr_rl.synth wrote")
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m olmocr_rl.recipe.pages", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--split", choices=SPLITS, help="which pool of words and numbers the pages use")
    parser.add_argument("--n", type=int, default=60, help="pages to write (default 60; the kinds in turn)")
    parser.add_argument("--seed", type=int, default=0, help="the pages' random draws (default 0)")
    parser.add_argument("--out", help="folder to write (<out>/<kind>/<split>_<i>.html and .json)")
    parser.add_argument("--dim", type=int, default=DEFAULT_DIM,
                        help=f"the page's longest side in pixels when rendered (--target_longest_image_dim; "
                             f"default {DEFAULT_DIM}): the grid is computed for it")
    parser.add_argument("--max_pixels", type=int, default=PrintGrid.max_pixels,
                        help="the image processor's max_pixels (default Qwen2-VL's, 28*28*1280)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), metavar="KIND",
                        help=f"page kinds, in turn (default all: {' '.join(KINDS)})")
    parser.add_argument("--pool_seed", type=int, default=0,
                        help="the hash that splits words and numbers between train and heldout (default 0; give "
                             "both splits the same)")
    parser.add_argument("--check", metavar="BENCH", help="instead: measure the pages of this synth folder on the "
                        "model's image (glyphs within 1.5 px of the patch grid); exit 1 under 99 %%")
    parser.add_argument("--png", metavar="DIR", help="with --check: save each page as the model sees it")
    parser.add_argument("--pages", metavar="DIR", help="with --check: the generated pages (synth's --html); each "
                        "printed line is compared with where the generator laid it out")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        grid = PrintGrid(args.dim, max_pixels=args.max_pixels)
        if args.check:
            png = Path(args.png) if args.png else None
            if png:
                png.mkdir(parents=True, exist_ok=True)
            found = check_bench(Path(args.check), grid, png, Path(args.pages) if args.pages else None)
            print("\n".join(found.report))
            good = found.share >= 0.99 and not found.misplaced
            lines = f"; {len(found.misplaced)} page(s) with lines off their layout" if args.pages else ""
            print(f"{'OK' if good else 'error'}: {found.on_grid}/{found.glyphs} glyphs ({100 * found.share:.2f} %) "
                  f"within 1.5 px of the {grid.patch} px patch grid at --dim {args.dim}{lines}")
            return 0 if good else 1
        if not args.split or not args.out:
            raise ValueError("give --split and --out (or --check BENCH)")
        start = time.perf_counter()
        manifest = generate(args.split, args.n, args.seed, args.out, grid, args.kinds, args.pool_seed)
    except (ValueError, FontMissingError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    g = manifest["grid"]
    print(f"[pages] {args.n} {args.split} page(s) in {time.perf_counter() - start:.1f} s -> {args.out}: "
          + ", ".join(f"{k} {v}" for k, v in manifest["pages_per_kind"].items())
          + f"; {manifest['chars_per_page']} characters a page on a {g['text_cols']} x {g['text_rows']} grid "
            f"(image {g['final_px'][0]} x {g['final_px'][1]} px, {g['cell_pt']} pt cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
