"""A page's reference transcription: front matter, then the body as olmOCR's model writes it (docs/synth.md).

Headings as ``#`` lines, paragraphs and list items as markdown, bold as ``**x**`` and italics as ``*x*``, inline
math as ``\\(tex\\)`` and display math as ``\\[tex\\]``, footnote markers as ``<sup>m</sup>`` and footnotes as
their own paragraphs, tables kept as HTML (spans as ``rowspan``/``colspan``); headers, footers and page numbers
left out. The front matter is olmOCR's five keys (``data.front_matter.format_front_matter``).
"""

from __future__ import annotations

import html

from olmocr_rl.data.front_matter import PageResponse, format_front_matter

from .content import Block, PageContent, Run, Table

__all__ = ["reference_text", "body_markdown"]


def _inline(runs: list[Run], skip_marker: str = "", br: str = "\n") -> str:
    """The runs as markdown; each ``<br>`` becomes ``br`` (a line break; a space in a heading), empty lines dropped."""
    lines: list[list[Run]] = [[]]
    for run in runs:
        if run.br:
            lines.append([])
        else:
            lines[-1].append(run)
    leading = next((r for r in runs if r.text.strip()), None)  # a footnote's own marker, if it leads
    texts = [_inline_line(line, skip_marker, leading) for line in lines]
    return br.join(text for text in texts if text)


def _inline_line(runs: list[Run], skip_marker: str, leading: Run | None) -> str:
    parts: list[str] = []
    for run in runs:
        if run.tex is not None:
            parts.append(f"\\({run.tex}\\)")
            continue
        if run.sup and skip_marker and run is leading and run.text.strip() == skip_marker:
            continue  # a footnote's own leading marker: written as the note's prefix
        text = " ".join(run.text.split())
        lead = " " if run.text[:1].isspace() else ""
        trail = " " if run.text[-1:].isspace() else ""
        if not text:
            parts.append(lead or trail)
            continue
        if run.sup:
            text = f"<sup>{html.escape(text, quote=False)}</sup>"
        elif run.bold and run.italic:
            text = f"***{text}***"
        elif run.bold:
            text = f"**{text}**"
        elif run.italic:
            text = f"*{text}*"
        parts.append(lead + text + trail)
    joined = "".join(parts)
    # adjacent runs of the same style ("**a** **b**" is fine; "**a****b**" is not): merge markers
    joined = joined.replace("****", "").replace("</sup><sup>", "")
    return " ".join(joined.split())


def _table_html(table: Table) -> str:
    lines = ["<table>"]
    for row in table.rows:
        cells = []
        for cell in row:
            tag = "th" if cell.header else "td"
            spans = (f' rowspan="{cell.rowspan}"' if cell.rowspan > 1 else "") + (
                f' colspan="{cell.colspan}"' if cell.colspan > 1 else "")
            cells.append(f"<{tag}{spans}>{html.escape(cell.text, quote=False)}</{tag}>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _block_markdown(block: Block, number: int) -> str:
    if block.kind == "heading":
        return "#" * block.level + " " + _inline(block.runs, br=" ")  # a heading is one line
    if block.kind == "math":
        return f"\\[{block.tex}\\]"
    if block.kind == "table":
        return _table_html(block.table)
    if block.kind == "item":
        indent = "  " * max(0, block.level - 1)
        return f"{indent}{f'{number}.' if block.ordered else '-'} {_inline(block.runs)}"
    if block.kind == "footnote":
        text = _inline(block.runs, skip_marker=block.marker)
        return f"<sup>{block.marker}</sup> {text}" if block.marker else text
    if block.kind == "pre":
        return block.runs[0].text
    return _inline(block.runs)


def body_markdown(content: PageContent) -> str:
    """The body: blocks separated by blank lines (consecutive list items by single newlines)."""
    out: list[str] = []
    number = 0
    previous = None
    for block in content.blocks:
        number = number + 1 if block.kind == "item" and previous == "item" else 1
        text = _block_markdown(block, number).strip()
        if not text:
            continue
        if out and not (block.kind == "item" and previous == "item"):
            out.append("")
        out.append(text)
        previous = block.kind
    return "\n".join(out)


def reference_text(content: PageContent) -> str:
    """The whole reference file: front matter and body."""
    response = PageResponse(
        primary_language=content.language,
        is_rotation_valid=True,
        rotation_correction=0,
        is_table=any(b.kind == "table" for b in content.blocks),
        is_diagram=False,
        natural_text=body_markdown(content) or None,
    )
    return format_front_matter(response) + "\n"
