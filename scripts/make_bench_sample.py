"""Regenerate bench_data_sample/: a small olmOCR-bench folder drawn from scratch with pypdfium2.

    python scripts/make_bench_sample.py [--out bench_data_sample]

Ten pages in nine PDFs (short lines a tiny model can learn to copy, paragraphs with a heading,
a header and footer with a footnote, two columns, a ruled table, equations drawn as text, a blank
page, a two-page PDF, and a `<name>_page<N>.pdf` cut-out in a sub-folder), unit tests of every
olmOCR-bench type split over three JSONL files (several pages have tests in two files), and a
`claude_original/` reference per page whose tests all pass on it.

The output is byte-for-byte reproducible: PDFium stamps the save time and a time-derived file ID
into every PDF, so both are overwritten with fixed, content-derived values of the same length
(which keeps the cross-reference offsets valid).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from olmocr_rl.data.front_matter import PageResponse, format_front_matter  # noqa: E402
from olmocr_rl.data.references import reference_path  # noqa: E402

FIXED_DATE = b"D:20250101000000+00'00'"
LETTER = (612.0, 792.0)


# ---------------------------------------------------------------------------------------------
# Drawing: a thin layer over PDFium's page-object API (standard fonts, lines).


class Canvas:
    """One PDF page being drawn; coordinates in points from the bottom-left corner."""

    def __init__(self, document: pdfium.PdfDocument, width: float, height: float) -> None:
        self.document = document
        self.page = document.new_page(width, height)
        self.width, self.height = width, height

    def _text_object(self, text: str, font: str, size: float):
        obj = pdfium_c.FPDFPageObj_NewTextObj(self.document.raw, font.encode("ascii"), ctypes.c_float(size))
        buffer = ctypes.create_string_buffer((text + "\0").encode("utf-16-le"))
        pdfium_c.FPDFText_SetText(obj, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
        return obj

    def measure(self, text: str, font: str = "Helvetica", size: float = 11) -> float:
        """Advance width of `text` in points."""
        obj = self._text_object(text, font, size)
        left, bottom, right, top = (ctypes.c_float() for _ in range(4))
        pdfium_c.FPDFPageObj_GetBounds(obj, left, bottom, right, top)
        pdfium_c.FPDFPageObj_Destroy(obj)
        return right.value - left.value

    def text(self, x: float, y: float, text: str, font: str = "Helvetica", size: float = 11) -> float:
        """Draw `text` with its baseline starting at (x, y); returns its width."""
        obj = self._text_object(text, font, size)
        pdfium_c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, y)
        pdfium_c.FPDFPage_InsertObject(self.page.raw, obj)
        return self.measure(text, font, size)

    def centered(self, y: float, text: str, font: str = "Helvetica", size: float = 11, center: float | None = None) -> None:
        center = self.width / 2 if center is None else center
        self.text(center - self.measure(text, font, size) / 2, y, text, font, size)

    def right_aligned(self, x_right: float, y: float, text: str, font: str = "Helvetica", size: float = 11) -> None:
        self.text(x_right - self.measure(text, font, size), y, text, font, size)

    def lines(self, x: float, y: float, lines: list[str], font: str = "Times-Roman", size: float = 11, leading: float = 1.35) -> float:
        """Draw lines top to bottom from baseline y; returns the baseline after the last line."""
        for line in lines:
            self.text(x, y, line, font, size)
            y -= size * leading
        return y

    def rule(self, x1: float, y1: float, x2: float, y2: float, width: float = 0.8) -> None:
        path = pdfium_c.FPDFPageObj_CreateNewPath(x1, y1)
        pdfium_c.FPDFPath_LineTo(path, x2, y2)
        pdfium_c.FPDFPageObj_SetStrokeColor(path, 0, 0, 0, 255)
        pdfium_c.FPDFPageObj_SetStrokeWidth(path, width)
        pdfium_c.FPDFPath_SetDrawMode(path, pdfium_c.FPDF_FILLMODE_NONE, 1)
        pdfium_c.FPDFPage_InsertObject(self.page.raw, path)

    def finish(self) -> None:
        if not pdfium_c.FPDFPage_GenerateContent(self.page.raw):
            raise RuntimeError("PDFium could not write the page content stream")


def make_pdf(pages: list[tuple[tuple[float, float], callable]]) -> bytes:
    """A PDF with one page per (size, draw function), with fixed date and ID."""
    document = pdfium.PdfDocument.new()
    for (width, height), draw in pages:
        canvas = Canvas(document, width, height)
        if draw is not None:
            draw(canvas)
        canvas.finish()
    import io

    buffer = io.BytesIO()
    document.save(buffer)
    document.close()
    return _make_reproducible(buffer.getvalue())


def _make_reproducible(data: bytes) -> bytes:
    data, dates = re.subn(rb"D:\d{14}[+-]\d\d'\d\d'", FIXED_DATE, data)
    if dates != 1:
        raise RuntimeError(f"expected one CreationDate in PDFium's output, found {dates}")
    id_pattern = rb"/ID\[<([0-9A-F]{32})><([0-9A-F]{32})>\]"
    zeroed = re.sub(id_pattern, b"/ID[<" + b"0" * 32 + b"><" + b"0" * 32 + b">]", data)
    digest = hashlib.md5(zeroed).hexdigest().upper().encode("ascii")
    data, ids = re.subn(id_pattern, b"/ID[<" + digest + b"><" + digest + b">]", data)
    if ids != 1:
        raise RuntimeError(f"expected one /ID in PDFium's output, found {ids}")
    return data


# ---------------------------------------------------------------------------------------------
# The pages: what is drawn, the reference transcription, and the tests.


@dataclass
class SamplePage:
    pdf: str  # relative to pdfs/
    page: int
    reference_body: str  # markdown without front matter
    tests: list[tuple[str, dict]]  # (jsonl file, test fields without pdf/page/id)
    is_table: bool = False
    language: str | None = "en"


@dataclass
class SamplePdf:
    pdf: str
    pages: list[tuple[tuple[float, float], callable]]
    sample_pages: list[SamplePage] = field(default_factory=list)


BASIC, LAYOUT, TABLES_MATH = "basic.jsonl", "layout.jsonl", "tables_math.jsonl"


def draw_simple_lines(c: Canvas) -> None:
    c.lines(36, 420, ["The quick brown fox", "jumps over the lazy dog.", "One two three four five.", "Hello world."], "Helvetica", 22, 1.6)


def draw_counting_page_one(c: Canvas) -> None:
    c.lines(50, 520, ["Page one", "Apples and pears", "Red, green, blue."], "Helvetica", 24, 1.7)


def draw_counting_page_two(c: Canvas) -> None:
    c.lines(50, 520, ["Page two", "Cats and dogs", "Sun, moon, stars."], "Helvetica", 24, 1.7)


def draw_shopping_list(c: Canvas) -> None:
    y = c.lines(40, 380, ["Shopping list"], "Helvetica-Bold", 20)
    c.lines(48, y - 8, ["- milk", "- eggs", "- bread", "- apples"], "Helvetica", 18, 1.5)


PARAGRAPH_ONE = [
    "Paper was first made in China around the second century. Early sheets were",
    "pressed from mulberry bark, hemp and old rags, then dried in the sun.",
    "The craft spread slowly along the trade routes to the west.",
]
PARAGRAPH_TWO = [
    "By the thirteenth century mills in Spain and Italy used water power to beat",
    "the fibres. Printing with movable type later made cheap paper essential.",
]


def draw_paragraphs(c: Canvas) -> None:
    c.text(72, 700, "A Short History of Paper", "Helvetica-Bold", 18)
    y = c.lines(72, 664, PARAGRAPH_ONE)
    y = c.lines(72, y - 10, PARAGRAPH_TWO)
    x = 72 + c.text(72, y - 10, "Key fact:", "Times-Bold", 11)
    c.text(x + 3, y - 10, "modern paper is made mostly from wood pulp.", "Times-Roman", 11)


def draw_header_footer(c: Canvas) -> None:
    c.text(72, 750, "ACME Corp. Annual Report 2024", "Helvetica", 9)
    c.right_aligned(540, 750, "Confidential", "Helvetica-Oblique", 9)
    c.rule(72, 742, 540, 742, 0.6)
    c.text(72, 690, "Results for the year", "Helvetica-Bold", 16)
    x = 72 + c.text(72, 660, "Revenue grew by twelve percent this year.", "Times-Roman", 12)
    c.text(x + 1, 665, "1", "Times-Roman", 7)
    c.text(x + 9, 660, "Costs stayed flat.", "Times-Roman", 12)
    c.lines(72, 640, ["The board proposes a dividend of forty cents per share,", "payable in the spring."], "Times-Roman", 12)
    c.rule(72, 110, 200, 110, 0.5)
    c.text(72, 96, "1", "Times-Roman", 7)
    c.text(78, 92, "Figures are unaudited.", "Times-Roman", 9)
    c.centered(50, "Page 7", "Helvetica", 9)


LEFT_COLUMN = ["Rivers carry water from", "the hills down to the sea.", "Along the way they cut", "deep valleys into rock."]
RIGHT_COLUMN = ["Glaciers move far more", "slowly than rivers, yet", "they shape mountains", "over thousands of years."]


def draw_two_columns(c: Canvas) -> None:
    c.centered(720, "How Landscapes Form", "Helvetica-Bold", 18)
    c.lines(72, 680, LEFT_COLUMN, "Times-Roman", 13, 1.4)
    c.lines(320, 680, RIGHT_COLUMN, "Times-Roman", 13, 1.4)


TABLE_ROWS = [["Fruit", "Spring", "Summer", "Autumn"], ["Apples", "12", "30", "45"], ["Pears", "8", "22", "31"], ["Plums", "5", "40", "18"]]


def draw_table(c: Canvas) -> None:
    c.text(96, 520, "Table 1: Fruit harvest by season (tonnes)", "Helvetica-Bold", 13)
    left, top, col_width, row_height = 96.0, 496.0, 150.0, 30.0
    columns, rows = len(TABLE_ROWS[0]), len(TABLE_ROWS)
    for r in range(rows + 1):
        c.rule(left, top - r * row_height, left + columns * col_width, top - r * row_height)
    for k in range(columns + 1):
        c.rule(left + k * col_width, top, left + k * col_width, top - rows * row_height)
    for r, row in enumerate(TABLE_ROWS):
        font = "Helvetica-Bold" if r == 0 else "Helvetica"
        for k, cell in enumerate(row):
            c.centered(top - r * row_height - 20, cell, font, 12, center=left + (k + 0.5) * col_width)


def draw_equations(c: Canvas) -> None:
    c.text(72, 700, "Two famous equations", "Helvetica-Bold", 16)
    c.text(72, 670, "Einstein wrote the relation between energy and mass:", "Times-Roman", 12)
    x = 250 + c.text(250, 630, "E = mc", "Times-Italic", 16)
    c.text(x + 1, 638, "2", "Times-Roman", 10)
    c.text(72, 590, "For a right triangle with legs a and b and hypotenuse c:", "Times-Roman", 12)
    x = 230
    for piece, superscript in (("a", "2"), (" + b", "2"), (" = c", "2")):
        x += c.text(x, 550, piece, "Times-Italic", 16)
        x += c.text(x + 1, 558, superscript, "Times-Roman", 10) + 2
    c.text(72, 510, "The mean of two numbers is half their sum:", "Times-Roman", 12)
    c.text(230, 470, "m =", "Times-Italic", 16)
    c.centered(482, "a + b", "Times-Italic", 14, center=290)
    c.rule(268, 477, 312, 477, 0.8)
    c.centered(460, "2", "Times-Roman", 14, center=290)


def build_samples() -> list[SamplePdf]:
    absent_diffs = {"max_diffs": 1}
    return [
        SamplePdf(
            "simple_lines.pdf",
            [((360.0, 480.0), draw_simple_lines)],
            [
                SamplePage(
                    "simple_lines.pdf",
                    1,
                    "The quick brown fox\njumps over the lazy dog.\nOne two three four five.\nHello world.",
                    [
                        (BASIC, {"type": "present", "text": "The quick brown fox"}),
                        (BASIC, {"type": "present", "text": "Hello world."}),
                        (BASIC, {"type": "present", "text": "one two three four five", "case_sensitive": False}),
                        (BASIC, {"type": "order", "before": "lazy dog", "after": "Hello world"}),
                        (BASIC, {"type": "baseline"}),
                    ],
                )
            ],
        ),
        SamplePdf(
            "counting.pdf",
            [((420.0, 595.0), draw_counting_page_one), ((420.0, 595.0), draw_counting_page_two)],
            [
                SamplePage(
                    "counting.pdf",
                    1,
                    "Page one\nApples and pears\nRed, green, blue.",
                    [
                        (BASIC, {"type": "present", "text": "Apples and pears"}),
                        (BASIC, {"type": "absent", "text": "Cats and dogs"}),
                        (BASIC, {"type": "present", "text": "Page one", "first_n": 20}),
                        (BASIC, {"type": "baseline"}),
                    ],
                ),
                SamplePage(
                    "counting.pdf",
                    2,
                    "Page two\nCats and dogs\nSun, moon, stars.",
                    [
                        (BASIC, {"type": "present", "text": "Cats and dogs"}),
                        (BASIC, {"type": "absent", "text": "Apples and pears"}),
                        (BASIC, {"type": "present", "text": "Sun, moon, stars.", "last_n": 30}),
                        (BASIC, {"type": "baseline"}),
                    ],
                ),
            ],
        ),
        SamplePdf(
            "paragraphs.pdf",
            [(LETTER, draw_paragraphs)],
            [
                SamplePage(
                    "paragraphs.pdf",
                    1,
                    "# A Short History of Paper\n\n"
                    + " ".join(PARAGRAPH_ONE)
                    + "\n\n"
                    + " ".join(PARAGRAPH_TWO)
                    + "\n\n**Key fact:** modern paper is made mostly from wood pulp.",
                    [
                        (BASIC, {"type": "present", "text": "pressed from mulberry bark, hemp and old rags", "max_diffs": 2}),
                        (BASIC, {"type": "absent", "text": "Lorem ipsum dolor sit amet"}),
                        (BASIC, {"type": "baseline"}),
                        (LAYOUT, {"type": "order", "before": "first made in China", "after": "mills in Spain and Italy"}),
                        (LAYOUT, {"type": "format", "text": "A Short History of Paper", "format": "heading"}),
                        (LAYOUT, {"type": "format", "text": "Key fact:", "format": "bold"}),
                    ],
                )
            ],
        ),
        SamplePdf(
            "header_footer.pdf",
            [(LETTER, draw_header_footer)],
            [
                SamplePage(
                    "header_footer.pdf",
                    1,
                    "# Results for the year\n\n"
                    "Revenue grew by twelve percent this year.[^1] Costs stayed flat.\n\n"
                    "The board proposes a dividend of forty cents per share, payable in the spring.\n\n"
                    "[^1]: Figures are unaudited.",
                    [
                        (BASIC, {"type": "present", "text": "Revenue grew by twelve percent this year."}),
                        (BASIC, {"type": "present", "text": "dividend of forty cents per share", "max_diffs": 1}),
                        (BASIC, {"type": "baseline"}),
                        (LAYOUT, {"type": "absent", "text": "ACME Corp. Annual Report 2024", **absent_diffs}),
                        (LAYOUT, {"type": "absent", "text": "Confidential"}),
                        (LAYOUT, {"type": "absent", "text": "Page 7"}),
                        (
                            LAYOUT,
                            {
                                "type": "footnote",
                                "marker": "1",
                                "appears_before_marker": "twelve percent this year",
                                "appears_after_marker": "Costs stayed flat",
                            },
                        ),
                    ],
                )
            ],
        ),
        SamplePdf(
            "two_columns.pdf",
            [(LETTER, draw_two_columns)],
            [
                SamplePage(
                    "two_columns.pdf",
                    1,
                    "# How Landscapes Form\n\n" + " ".join(LEFT_COLUMN) + "\n\n" + " ".join(RIGHT_COLUMN),
                    [
                        (BASIC, {"type": "present", "text": "Rivers carry water from the hills down to the sea."}),
                        (BASIC, {"type": "present", "text": "they shape mountains over thousands of years"}),
                        (BASIC, {"type": "baseline"}),
                        (LAYOUT, {"type": "order", "before": "deep valleys into rock", "after": "Glaciers move far more slowly"}),
                        (LAYOUT, {"type": "order", "before": "How Landscapes Form", "after": "Rivers carry water"}),
                    ],
                )
            ],
        ),
        SamplePdf(
            "table.pdf",
            [((792.0, 612.0), draw_table)],
            [
                SamplePage(
                    "table.pdf",
                    1,
                    "Table 1: Fruit harvest by season (tonnes)\n\n"
                    "<table>\n<thead>\n<tr><th>Fruit</th><th>Spring</th><th>Summer</th><th>Autumn</th></tr>\n</thead>\n<tbody>\n"
                    + "\n".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in TABLE_ROWS[1:])
                    + "\n</tbody>\n</table>",
                    [
                        (BASIC, {"type": "present", "text": "Fruit harvest by season"}),
                        (BASIC, {"type": "baseline"}),
                        (TABLES_MATH, {"type": "table", "cell": "30", "up": "Summer", "down": "22", "left": "12", "right": "45"}),
                        (TABLES_MATH, {"type": "table", "cell": "31", "top_heading": "Autumn", "left_heading": "Pears"}),
                        (TABLES_MATH, {"type": "table", "cell": "Plums", "up": "Pears", "right": "5"}),
                        (TABLES_MATH, {"type": "table", "cell": "Spring", "left": "Fruit", "down": "12"}),
                    ],
                    is_table=True,
                )
            ],
        ),
        SamplePdf(
            "equations.pdf",
            [(LETTER, draw_equations)],
            [
                SamplePage(
                    "equations.pdf",
                    1,
                    "# Two famous equations\n\n"
                    "Einstein wrote the relation between energy and mass:\n\n\\[E = mc^2\\]\n\n"
                    "For a right triangle with legs \\(a\\) and \\(b\\) and hypotenuse \\(c\\):\n\n\\[a^2 + b^2 = c^2\\]\n\n"
                    "The mean of two numbers is half their sum:\n\n\\[m = \\frac{a + b}{2}\\]",
                    [
                        (BASIC, {"type": "present", "text": "Einstein wrote the relation between energy and mass"}),
                        (BASIC, {"type": "baseline"}),
                        (TABLES_MATH, {"type": "math", "math": "E = mc^2"}),
                        (TABLES_MATH, {"type": "math", "math": "a^2 + b^2 = c^2"}),
                        (TABLES_MATH, {"type": "math", "math": "m = \\frac{a + b}{2}"}),
                    ],
                )
            ],
        ),
        SamplePdf(
            "blank.pdf",
            [((396.0, 612.0), None)],
            [SamplePage("blank.pdf", 1, "", [(BASIC, {"type": "baseline", "max_length": 10})], language=None)],
        ),
        SamplePdf(
            "synth/doc0042_page3.pdf",
            [((400.0, 500.0), draw_shopping_list)],
            [
                SamplePage(
                    "synth/doc0042_page3.pdf",
                    1,
                    "## Shopping list\n\n- milk\n- eggs\n- bread\n- apples",
                    [
                        (BASIC, {"type": "present", "text": "milk"}),
                        (BASIC, {"type": "present", "text": "bread"}),
                        (BASIC, {"type": "order", "before": "eggs", "after": "apples"}),
                        (BASIC, {"type": "absent", "text": "butter"}),
                        (BASIC, {"type": "baseline"}),
                    ],
                )
            ],
        ),
    ]


README = """# bench_data_sample

A tiny olmOCR-bench folder for tests, examples and the learning-signal demo. Generated by
`python scripts/make_bench_sample.py` (deterministic: rerunning it gives identical bytes); do not
edit by hand.

- `pdfs/`: {pdfs} PDFs, {pages} pages, drawn with pypdfium2 using standard PDF fonts.
- `basic.jsonl`, `layout.jsonl`, `tables_math.jsonl`: {tests} unit tests ({types}).
  Several pages have tests in two files.
- `claude_original/`: a reference transcription per page (olmOCR naming,
  `<name>_page<N>_pg1_repeat1.md`), with valid front matter; every test passes on it.
"""


def write_sample(out: Path) -> dict[str, bytes]:
    """Build every file in memory, then replace `out` with them. Returns {relative path: bytes}."""
    files: dict[str, bytes] = {}
    jsonl_lines: dict[str, list[str]] = {BASIC: [], LAYOUT: [], TABLES_MATH: []}
    type_counts: dict[str, int] = {}
    samples = build_samples()
    for sample in samples:
        files[f"pdfs/{sample.pdf}"] = make_pdf(sample.pages)
        for page in sample.sample_pages:
            stem = Path(page.pdf).stem
            for number, (jsonl, fields) in enumerate(page.tests):
                test = {"pdf": page.pdf, "page": page.page, "id": f"{stem}_p{page.page}_{fields['type']}_{number:02d}", **fields}
                jsonl_lines[jsonl].append(json.dumps(test, ensure_ascii=False))
                type_counts[fields["type"]] = type_counts.get(fields["type"], 0) + 1
            response = PageResponse(
                primary_language=page.language,
                is_rotation_valid=True,
                rotation_correction=0,
                is_table=page.is_table,
                is_diagram=False,
                natural_text=page.reference_body or None,
            )
            relative = reference_path(".", page.pdf, page.page).relative_to(".")
            files[relative.as_posix()] = (format_front_matter(response) + "\n").encode("utf-8")
    for name, lines in jsonl_lines.items():
        files[name] = ("\n".join(lines) + "\n").encode("utf-8")
    files["README.md"] = README.format(
        pdfs=len(samples),
        pages=sum(len(sample.sample_pages) for sample in samples),
        tests=sum(type_counts.values()),
        types=", ".join(f"{count} {name}" for name, count in sorted(type_counts.items())),
    ).encode("utf-8")

    if out.exists():
        shutil.rmtree(out)
    for relative, data in sorted(files.items()):
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench_data_sample", help="folder to (re)create")
    args = parser.parse_args(argv)
    files = write_sample(args.out)
    total = sum(len(data) for data in files.values())
    print(f"wrote {len(files)} files, {total / 1024:.1f} KiB, to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
