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
