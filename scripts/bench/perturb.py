"""Deterministic perturbed copies of page transcriptions, for benchmarking the bench tests.

Standard library only, so both olmocr_rl's benchmark and a timing script run under the original
olmOCR package can import it (``sys.path.insert(0, "scripts/bench")``) and see the same texts.

``perturbed_copies(text, n, seed)`` returns ``n`` variants of ``text``, each with one to three edits
of the kinds an OCR model makes: character noise, dropped or swapped lines, typography changes
(smart quotes, dashes, emphasis markers), case changes, a markdown table turned into HTML, LaTeX
rewrites (braces, ``\\frac``/``\\dfrac``, ``\\left``), truncation, and a degenerate repeated tail.
The same (text, n, seed) always gives the same copies.
"""

from __future__ import annotations

import random
import re

__all__ = ["perturbed_copies", "EDITS"]

_NOISE = "abcdefghijklmnopqrstuvwxyz0123456789 .,"


def _char_noise(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(max(1, len(chars) // rng.choice((30, 60, 120)))):
        if not chars:
            break
        i = rng.randrange(len(chars))
        op = rng.random()
        if op < 0.4:
            chars[i] = rng.choice(_NOISE)
        elif op < 0.7:
            del chars[i]
        else:
            chars.insert(i, rng.choice(_NOISE))
    return "".join(chars)


def _drop_lines(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    keep = [line for line in lines if rng.random() > 0.15]
    return "\n".join(keep)


def _swap_paragraphs(text: str, rng: random.Random) -> str:
    paragraphs = text.split("\n\n")
    if len(paragraphs) > 1:
        i, j = rng.sample(range(len(paragraphs)), 2)
        paragraphs[i], paragraphs[j] = paragraphs[j], paragraphs[i]
    return "\n\n".join(paragraphs)


def _typography(text: str, rng: random.Random) -> str:
    text = re.sub(r"'", "’", text) if rng.random() < 0.5 else text.replace("’", "'")
    text = text.replace(" - ", " — ") if rng.random() < 0.5 else text
    words = text.split(" ")
    for _ in range(max(1, len(words) // 40)):
        i = rng.randrange(len(words))
        if words[i].strip():
            words[i] = rng.choice(("**{}**", "*{}*", "_{}_", "<b>{}</b>")).format(words[i])
    return " ".join(words)


def _case(text: str, rng: random.Random) -> str:
    return text.upper() if rng.random() < 0.3 else text.lower()


def _markdown_table_to_html(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    out, block = [], []

    def flush() -> None:
        if len(block) >= 2:
            rows = [line.strip().strip("|").split("|") for line in block if not set(line.replace("|", "").strip()) <= set("-: ")]
            html = ["<table>"]
            for r, row in enumerate(rows):
                tag = "th" if r == 0 else "td"
                cells = [f"<{tag}>{cell.strip()}</{tag}>" for cell in row]
                if r > 0 and len(cells) > 2 and rng.random() < 0.2:
                    cells[1:3] = [f'<td colspan="2">{row[1].strip()}</td>']
                html.append("<tr>" + "".join(cells) + "</tr>")
            html.append("</table>")
            out.extend(html)
        else:
            out.extend(block)
        block.clear()

    for line in lines:
        if "|" in line:
            block.append(line)
        else:
            flush()
            out.append(line)
    flush()
    return "\n".join(out)


def _latex(text: str, rng: random.Random) -> str:
    text = re.sub(r"\^\{(\w)\}", r"^\1", text) if rng.random() < 0.5 else re.sub(r"\^(\w)", r"^{\1}", text)
    if rng.random() < 0.5:
        text = text.replace("\\frac", "\\dfrac")
    if rng.random() < 0.3:
        text = text.replace("\\left(", "(").replace("\\right)", ")")
    if rng.random() < 0.3:
        text = text.replace("\\(", "$").replace("\\)", "$")
    if rng.random() < 0.3:
        text = text.replace("=", " = ")
    return text


def _truncate(text: str, rng: random.Random) -> str:
    return text[: int(len(text) * rng.uniform(0.3, 0.95))]


def _repeat_tail(text: str, rng: random.Random) -> str:
    unit = rng.choice(("the ", "a", "| --- ", "1. ", "\\\\ "))
    return text + unit * rng.randint(10, 400)


EDITS = (_char_noise, _drop_lines, _swap_paragraphs, _typography, _case, _markdown_table_to_html, _latex, _truncate, _repeat_tail)


def perturbed_copies(text: str, n: int, seed: int) -> list[str]:
    """``n`` perturbed variants of ``text``; deterministic in (text, n, seed)."""
    rng = random.Random(f"{seed}:{len(text)}:{text[:64]}")
    copies = []
    for _ in range(n):
        variant = text
        for edit in rng.sample(EDITS, rng.randint(1, 3)):
            variant = edit(variant, rng)
        copies.append(variant)
    return copies
