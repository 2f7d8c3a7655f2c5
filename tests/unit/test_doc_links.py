"""Every relative link in README.md and docs/*.md points at a file of the repository, and a `#heading` part at
a heading that file has (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO_ROOT

LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _prose(markdown: str) -> str:
    """The text outside code blocks and code spans (a `# comment` in a bash block is no heading)."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", markdown).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """`page: target (why)` for each relative link of the page that does not resolve."""
    problems = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            problems.append(f"{page.relative_to(REPO_ROOT)}: {target} (no heading #{anchor})")
    return problems


def test_the_anchor_rules():
    text = "# Resume: `--resume_from_checkpoint`\n## 1 GPU\n```bash\n# not a heading\n```\n## 1 GPU\n"
    assert anchors(text) == {"resume---resume_from_checkpoint", "1-gpu", "1-gpu-1"}


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO_ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Top\n[ok](b.md#there) [gone](c.md) [bad](b.md#elsewhere) `[code](x.md)`\n")
    (tmp_path / "b.md").write_text("## There\n")
    assert broken_links(tmp_path / "a.md") == ["a.md: c.md (no such file)", "a.md: b.md#elsewhere (no heading #elsewhere)"]


def test_readme_and_docs_links_resolve():
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    assert len(pages) > 10
    problems = [problem for page in pages for problem in broken_links(page)]
    assert not problems, "\n".join(problems)


def test_the_readme_links_every_docs_page():
    readme = (REPO_ROOT / "README.md").read_text()
    linked = {Path(target.partition("#")[0]).name for target in LINK.findall(_prose(readme))}
    missing = [page.name for page in sorted((REPO_ROOT / "docs").glob("*.md")) if page.name not in linked]
    assert not missing, f"README's table of docs lacks: {missing}"
