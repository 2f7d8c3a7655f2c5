"""Pages and folders the synth tests share: the local-file leak tricks (a KaTeX folder with symlinks pointing out,
and URLs that try to leave it)."""

from __future__ import annotations

import shutil
from pathlib import Path

LEAK_PARAGRAPHS = ("<p>This page carries a paragraph of ordinary words so that a few tests survive the checks.</p>"
                   "<p>A second paragraph follows it with some more ordinary words for the order test.</p>")


def leak_tricks(secrets: Path) -> dict[str, str]:
    """Page name -> the URL of a local file outside KaTeX's folder, each written as a trick to reach it."""
    text, html, css, data = (str(secrets / f"secret.{ext}") for ext in ("txt", "html", "css", "json"))
    up = "../" * 12
    return {"absolute": f"/katex/{text}", "double_slash": f"/katex//{html}", "full_url": f"http://synth.invalid/katex/{css}",
            "dotdot": f"/katex/{up}{data[1:]}", "dotdot_encoded": f"/katex/{'%2e%2e/' * 12}{text[1:]}",
            "slash_encoded": f"/katex/{'..%2F' * 12}{text[1:].replace('/', '%2F')}",
            "backslash": "/katex/" + "..\\" * 12 + text[1:].replace("/", "\\"),
            "symlink_file": "/katex/leak.txt", "symlink_folder": "/katex/outside/secret.json"}


def leaky_katex(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of KaTeX's folder holding two symlinks out (a file and a folder), and the secret files."""
    from olmocr_rl.synth.render import find_katex

    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for ext in ("txt", "html", "css", "json"):
        (secrets / f"secret.{ext}").write_text(f"SECRETTOKEN{ext.upper()} the operator's private notes")
    katex = tmp_path / "katex" / "dist"
    shutil.copytree(find_katex(), katex)
    shutil.copy(find_katex().parent / "package.json", katex.parent)
    (katex / "leak.txt").symlink_to(secrets / "secret.txt")
    (katex / "outside").symlink_to(secrets)
    return katex, secrets


# ---- random pages for the property test (hypothesis): the kinds of page a report generator makes -------------

WORDS = ("harbour river market station budget council report season harvest figure meadow lantern window garden "
         "survey sample method result tonnes rainfall export import ledger account quarter office branch region "
         "district station railway bridge tunnel engine signal timber copper silver marble granite cotton wool "
         "pepper ginger salmon herring orchard vineyard mill forge quarry canal dock ferry wagon trailer depot "
         "clinic school library museum theatre gallery archive charter treaty survey census average median "
         "northern southern eastern western coastal inland upland lowland annual monthly weekly").split()
MATH = ("x^2 + y^2 = z^2", r"\frac{a + b}{2}", r"\sqrt{2}", r"\alpha + \beta = \gamma", "E = mc^2",
        r"\sum_{i=1}^{n} i^2", r"\int_0^1 f(x)\,dx", r"\lim_{n \to \infty} a_n")


def _strategies():
    from hypothesis import strategies as st

    words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
    number = st.integers(min_value=0, max_value=99_999).map(lambda n: f"{n:,}")

    @st.composite
    def sentence(draw):
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=4, max_size=14)))
        return text[0].upper() + text[1:] + draw(st.sampled_from(".!?."))

    @st.composite
    def inline(draw, markers: list):
        """A paragraph's inline HTML: sentences, bold/italic spans, <br>, inline math, footnote markers."""
        parts = []
        for _ in range(draw(st.integers(1, 5))):
            kind = draw(st.sampled_from(["sentence", "sentence", "bold", "italic", "br", "math", "marker", "number",
                                         "address"]))
            if kind == "address":  # lines broken by <br> with no space around it: "14 Quay Street<br>Bristol"
                lines = draw(st.lists(st.one_of(words, st.tuples(number, words).map(" ".join)), min_size=2,
                                      max_size=4))
                parts.append("<br>".join(lines))
            elif kind == "sentence":
                parts.append(draw(sentence()))
            elif kind in ("bold", "italic"):
                tag = "b" if kind == "bold" else draw(st.sampled_from(["i", "em"]))
                parts.append(f"<{tag}>{draw(words)}</{tag}>")
            elif kind == "br" and parts:
                parts[-1] += "<br>" + draw(sentence())
            elif kind == "math":
                parts.append(f"the value \\({draw(st.sampled_from(MATH))}\\) holds")
            elif kind == "marker" and parts and not parts[-1].endswith(">"):
                markers.append(str(len(markers) + 1))
                parts[-1] += f"<sup>{markers[-1]}</sup>"
            elif kind == "number":
                parts.append(f"a total of {draw(number)} {draw(words)}")
        return " ".join(parts)

    @st.composite
    def table(draw):
        rows, cols = draw(st.integers(3, 5)), draw(st.integers(3, 4))
        taken = [[False] * cols for _ in range(rows)]
        out = ["<table border=1>"]
        for r in range(rows):
            cells = []
            for c in range(cols):
                if taken[r][c]:
                    continue
                rowspan = draw(st.sampled_from([1, 1, 1, 2])) if r + 1 < rows else 1
                colspan = draw(st.sampled_from([1, 1, 1, 2])) if c + 1 < cols and not taken[r][c + 1] else 1
                for dr in range(rowspan):
                    for dc in range(colspan):
                        taken[r + dr][c + dc] = True
                tag = "th" if r == 0 else "td"
                text = draw(words) if r == 0 or c == 0 else draw(st.one_of(number, words))
                spans = (f' rowspan="{rowspan}"' if rowspan > 1 else "") + (f' colspan="{colspan}"' if colspan > 1 else "")
                cells.append(f"<{tag}{spans}>{text}</{tag}>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        return "".join(out) + "</table>"

    @st.composite
    def block(draw, markers: list, depth: int = 0, flowing: bool = False):
        """One block; in CSS columns (``flowing``) no table and no columns again: a table or a column layout
        split across two columns reads apart on the page (the check skips such a page, as it should)."""
        kinds = ["p", "p", "p", "h", "list", "display"] + ([] if flowing else ["table"])
        kinds += (["wrap"] if depth < 2 else []) + (["columns"] if depth < 1 and not flowing else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "p":
            return f"<p>{draw(inline(markers))}</p>"
        if kind == "h":
            level = draw(st.integers(1, 3))
            return f"<h{level}>{draw(words).capitalize()} {draw(words)}</h{level}>"
        if kind == "list":
            tag = draw(st.sampled_from(["ul", "ol"]))
            items = draw(st.lists(inline(markers), min_size=2, max_size=4))
            return f"<{tag}>" + "".join(f"<li>{item}</li>" for item in items) + f"</{tag}>"
        if kind == "table":
            return draw(table())
        if kind == "display":
            return f"<p>\\[{draw(st.sampled_from(MATH))}\\]</p>"
        if kind == "wrap":
            return '<div class="section">' + "".join(draw(st.lists(block(markers, depth + 1, flowing), min_size=1,
                                                                   max_size=3))) + "</div>"
        style = draw(st.sampled_from(["column-count:2;column-gap:2em", "display:flex;gap:2em",
                                      "display:grid;grid-template-columns:1fr 1fr;gap:2em"]))
        flowing = style.startswith("column")
        first, second = (draw(st.lists(block(markers, depth + 1, flowing), min_size=1, max_size=3)) for _ in "12")
        if flowing:
            return f'<div style="{style}">{"".join(first + second)}</div>'
        return f'<div style="{style}"><div>{"".join(first)}</div><div>{"".join(second)}</div></div>'

    @st.composite
    def page(draw):
        """(html, furniture strings): a report page with running head and foot, blocks, footnotes."""
        markers: list[str] = []
        furniture = []
        parts = []
        if draw(st.booleans()):
            head = f"{draw(words).title()} Review · {draw(words).title()}"
            furniture.append(head)
            style = draw(st.sampled_from(["", ' style="position:absolute;top:0.2in"']))
            parts.append(f'<header{style}>{head}</header>')
        parts += draw(st.lists(block(markers), min_size=1, max_size=6))
        if markers:
            notes = "".join(f"<p><sup>{m}</sup> {draw(sentence())}</p>" for m in markers)
            parts.append(f'<div class="footnotes">{notes}</div>')
        if draw(st.booleans()):
            number = f"Page {draw(st.integers(1, 400))}"
            furniture.append(number)
            parts.append(f'<footer><span class="page-number">{number}</span></footer>')
        return "<html><body>" + "".join(parts) + "</body></html>", furniture

    return page


def random_page():
    """The hypothesis strategy of a random report page: (html, furniture strings)."""
    return _strategies()()


def layer_transcription(raw_layer: str, furniture: list[str]) -> str:
    """A transcription made from a page's own text layer: its lines as printed, the running head and foot (the
    lines made only of furniture text) left out, as a transcription leaves them out."""
    skip = sorted((" ".join(f.split()) for f in furniture if f.strip()), key=len, reverse=True)

    def furniture_only(line: str) -> bool:  # part of one furniture string, or made of whole ones
        if any(line in f for f in skip):
            return True
        for f in skip:
            line = line.replace(f, " ")
        return not line.strip(" ·|-")

    lines = [" ".join(line.split()) for line in raw_layer.replace("\r\n", "\n").split("\n")]
    return "\n".join(line for line in lines if line and not furniture_only(line))
