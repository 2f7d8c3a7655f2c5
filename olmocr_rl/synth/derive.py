"""Unit tests from a page's structure, one rule per type (docs/synth.md has the rules with worked examples).

Each rule returns candidate tests as JSON dicts without ``pdf``/``page``/``id``; the guarantee
(:mod:`.guarantee`) keeps only those that load, pass on the page's reference and are on the PDF's text layer.
Choices among candidates are made by a ``random.Random`` seeded with the run's seed and the page's name, so the
same page and seed give the same tests. ``caps`` bounds the candidates per type and page.
"""

from __future__ import annotations

import random
import re
from collections import Counter

from .content import Block, PageContent, Table

__all__ = ["derive_tests", "DEFAULT_CAPS", "SYNTH_TYPES"]

SYNTH_TYPES = ("present", "absent", "order", "table", "math", "baseline", "format", "footnote")
DEFAULT_CAPS = {"present": 6, "absent": 4, "order": 3, "table": 5, "math": 4, "baseline": 1, "format": 3,
                "footnote": 3}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]{6,}[A-Za-z]")
_NUMBER = re.compile(r"(?<![\w.,])\d[\d,.]*\d(?![\w])")
_PAGE_NUMBER = re.compile(r"(?:page|p\.|pg\.?)?\s*\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?|[ivxlcdm]{1,6}", re.IGNORECASE)
SENTENCE_WORDS = (5, 40)
ORDER_WORDS = (3, 30)


def _text_blocks(content: PageContent) -> list[Block]:
    return [b for b in content.blocks if b.kind in ("paragraph", "item", "footnote", "heading") and b.text]


def sentences(block: Block) -> list[str]:
    """The block's sentences (math-free runs only: a sentence holding inline math is left out)."""
    if any(r.tex is not None for r in block.runs):
        pieces, current = [], []
        for run in block.runs:
            if run.tex is not None:
                pieces.append("".join(current))
                current = []
            elif not run.sup:
                current.append(run.text)
        pieces.append("".join(current))
        found = []
        for piece in pieces:  # only the sentences wholly inside a math-free piece
            parts = _SENTENCE_END.split(" ".join(piece.split()))
            found += parts[1:-1] if len(parts) > 2 else []
        return [s for s in found if s]
    return [s for s in _SENTENCE_END.split(block.text) if s]


def _words(text: str) -> int:
    return len(text.split())


def present_tests(content: PageContent, rng: random.Random, cap: int) -> list[dict]:
    """Whole sentences (5–40 words), then words of 8+ letters and numbers of 3+ digits used once on the page."""
    pool = [s for b in _text_blocks(content) if b.kind != "heading" for s in sentences(b)
            if SENTENCE_WORDS[0] <= _words(s) <= SENTENCE_WORDS[1]]
    chosen = rng.sample(pool, min(len(pool), (cap + 1) // 2))
    body = " ".join(b.text for b in content.blocks if b.kind != "table") + " " + " ".join(
        c.text for b in content.blocks if b.table for row in b.table.rows for c in row)
    counts = Counter(w.lower() for w in _WORD.findall(body)) + Counter(_NUMBER.findall(body))
    rare = sorted({w for w in _WORD.findall(body) if counts[w.lower()] == 1} |
                  {n for n in _NUMBER.findall(body) if counts[n] == 1 and sum(ch.isdigit() for ch in n) >= 3})
    chosen += rng.sample(rare, min(len(rare), cap - len(chosen)))
    return [{"type": "present", "text": text, "max_diffs": 0} for text in chosen]


def absent_tests(content: PageContent, rng: random.Random, cap: int) -> list[dict]:
    """Each distinct header/footer line, page numbers included (the guarantee drops those the body holds)."""
    lines = list(dict.fromkeys(line for line in content.furniture if line.strip()))
    numbers = [line for line in lines if _PAGE_NUMBER.fullmatch(line.strip())]
    others = [line for line in lines if line not in numbers]
    chosen = numbers[:cap] + rng.sample(others, min(len(others), max(0, cap - len(numbers))))
    return [{"type": "absent", "text": text, "max_diffs": 0} for text in chosen]


def order_tests(content: PageContent, rng: random.Random, cap: int) -> list[dict]:
    """Sentence pairs in reading order, from different blocks where the page has them."""
    found = [(i, s) for i, b in enumerate(_text_blocks(content)) if b.kind != "footnote" for s in sentences(b)
             if ORDER_WORDS[0] <= _words(s) <= ORDER_WORDS[1]]
    pairs = [(a, b) for x, (i, a) in enumerate(found) for (j, b) in found[x + 1:] if a != b]
    across = [(a, b) for x, (i, a) in enumerate(found) for (j, b) in found[x + 1:] if i != j and a != b]
    pool = across if len(across) >= cap else pairs
    chosen = rng.sample(pool, min(len(pool), cap))
    return [{"type": "order", "before": a, "after": b, "max_diffs": 0} for a, b in chosen]


def _unique(table: Table) -> Counter:
    return Counter(cell.text for row in table.rows for cell in row)


def _relations(table: Table, cell) -> dict[str, str]:
    grid, (height, width) = table.grid, table.shape
    counts = _unique(table)
    out: dict[str, str] = {}
    steps = {"up": (-1, 0, cell.row, cell.col), "down": (cell.rowspan, 0, cell.row, cell.col),
             "left": (0, -1, cell.row, cell.col), "right": (0, cell.colspan, cell.row, cell.col)}
    for name, (dr, dc, r, c) in steps.items():
        rr, cc = r + dr, c + dc
        if 0 <= rr < height and 0 <= cc < width and grid[rr][cc] is not None:
            other = grid[rr][cc]
            if other is not cell and other.text and counts[other.text] == 1 and not other.header:
                out[name] = other.text
    top = next((grid[r][cell.col] for r in range(cell.row) if grid[r][cell.col] is not None
                and grid[r][cell.col].header), None)
    if top is not None and top.text and counts[top.text] == 1:
        out["top_heading"] = top.text
    left = next((grid[cell.row][c] for c in range(cell.col) if grid[cell.row][c] is not None
                 and grid[cell.row][c].header), None)
    if left is not None and left.text and counts[left.text] == 1:
        out["left_heading"] = left.text
    return out


def table_tests(content: PageContent, rng: random.Random, cap: int) -> list[dict]:
    """Cells of tables of 3x3 or more (spans included), each with its neighbours and headings."""
    out: list[dict] = []
    for block in content.blocks:
        table = block.table
        if table is None or min(table.shape) < 3:
            continue
        counts = _unique(table)
        cells = [c for row in table.rows for c in row if c.text and counts[c.text] == 1 and not c.header
                 and "\\(" not in c.text]
        for cell in rng.sample(cells, len(cells)):
            relations = _relations(table, cell)
            if relations:
                out.append({"type": "table", "cell": cell.text, **relations, "max_diffs": 0})
            if len(out) >= cap:
                return out
    return out


def math_tests(content: PageContent, rng: random.Random, cap: int) -> list[dict]:
    """Each equation, display and inline (inline ones of 3 or more characters)."""
    tex = [b.tex for b in content.blocks if b.kind == "math"]
    tex += [r.tex for b in content.blocks for r in b.runs if r.tex is not None and len(r.tex) >= 3]
    tex = list(dict.fromkeys(t for t in tex if t.strip()))
    chosen = tex if len(tex) <= cap else [tex[i] for i in sorted(rng.sample(range(len(tex)), cap))]
    return [{"type": "math", "math": t, "max_diffs": 0} for t in chosen]


def format_tests(content: PageContent, rng: random.Random, cap: int) -> list[dict]:
    """Headings, and bold or italic spans of 2+ words in the body."""
    pool = [("heading", b.text) for b in content.blocks if b.kind == "heading" and _words(b.text) >= 2]
    for block in content.blocks:
        if block.kind in ("paragraph", "item"):
            for run in block.runs:
                text = " ".join(run.text.split())
                if run.tex is None and not run.sup and _words(text) >= 2 and (run.bold != run.italic):
                    pool.append(("bold" if run.bold else "italic", text))
    pool = list(dict.fromkeys(pool))
    chosen = rng.sample(pool, min(len(pool), cap))
    return [{"type": "format", "format": kind, "text": text, "max_diffs": 0} for kind, text in chosen]


def footnote_tests(content: PageContent, rng: random.Random, cap: int) -> list[dict]:
    """Each superscript marker in the body that a footnote of the page carries, with the words before it."""
    notes = {b.marker for b in content.blocks if b.kind == "footnote" and b.marker}
    out: list[dict] = []
    for block in content.blocks:
        if block.kind not in ("paragraph", "item"):
            continue
        before = ""
        for run in block.runs:
            marker = run.text.strip()
            if run.sup and marker in notes and _words(before) >= 3:
                out.append({"type": "footnote", "marker": marker,
                            "appears_before_marker": " ".join(before.split()[-5:]), "max_diffs": 0})
            before += run.text if run.tex is None else " "
    return rng.sample(out, min(len(out), cap))


RULES = {"present": present_tests, "absent": absent_tests, "order": order_tests, "table": table_tests,
         "math": math_tests, "format": format_tests, "footnote": footnote_tests}


def derive_tests(content: PageContent, seed: int, page_key: str, caps: dict[str, int],
                 types: tuple[str, ...] = SYNTH_TYPES) -> list[dict]:
    """Every candidate test of the page, type by type in ``SYNTH_TYPES`` order."""
    out: list[dict] = []
    for kind in SYNTH_TYPES:
        cap = caps.get(kind, DEFAULT_CAPS[kind])
        if kind not in types or cap <= 0:
            continue
        if kind == "baseline":
            out.append({"type": "baseline"})
            continue
        out += RULES[kind](content, random.Random(f"{seed}:{page_key}:{kind}"), cap)
    return out
