"""Tests per type on the shipped pages (tests/fixtures/synth/pages): ``python -m olmocr_rl.synth`` next to olmOCR's
generator (``olmocr.synth.mine_html_templates.generate_tests_from_html``, run as it is, seed 0), and how many of
each side's tests load in olmocr_rl's strict loader and pass on their own page's reference (olmOCR's reference:
its own ``html_to_markdown_with_frontmatter``), under both scoring rules.

    PYTHONPATH=. /path/to/olmocr-venv/bin/python scripts/bench/compare_olmocr_synth.py

Runs where the ``olmocr`` package (allenai/olmocr, with bs4, markdownify, syntok, wordfreq) and olmocr_rl's synth
set-up (Playwright, Chromium, KaTeX) are both importable. Prints one table per side and the totals; docs/synth.md
("Compared with olmOCR's generator") has the figures.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from olmocr_rl.bench import TestLoadError, evaluate_page, load_single_test  # noqa: E402
from olmocr_rl.bench.prepared import SCORING_RULES  # noqa: E402
from olmocr_rl.data.front_matter import split_front_matter  # noqa: E402
from olmocr_rl.synth.derive import SYNTH_TYPES  # noqa: E402
from olmocr_rl.synth.output import plan_pages  # noqa: E402
from olmocr_rl.synth.pipeline import PageOptions, PageResult, make_page  # noqa: E402
from olmocr_rl.synth.render import Renderer  # noqa: E402

PAGES = REPO / "tests" / "fixtures" / "synth" / "pages"


def judge(tests: list[dict], reference: str) -> tuple[int, int, list[str]]:
    """(tests that do not load, tests that fail on the reference under some rule, the failures named)."""
    body = split_front_matter(reference)[1]
    bad_load, failing, named = 0, 0, []
    for data in tests:
        try:
            test = load_single_test(data)
        except TestLoadError as error:
            bad_load += 1
            named.append(f"does not load: {error}")
            continue
        for rule in SCORING_RULES:
            (_, passed, why), = evaluate_page([test], body, rule)
            if not passed:
                failing += 1
                named.append(f"{data['type']} {data.get('text') or data.get('cell') or data.get('math')!r}: {why}")
                break
    return bad_load, failing, named


def olmocr_side(html: str, stem: str) -> tuple[list[dict], str]:
    from olmocr.synth.mine_html_templates import generate_tests_from_html, html_to_markdown_with_frontmatter

    return generate_tests_from_html(html, stem, 1, random.Random(0)), html_to_markdown_with_frontmatter(html)


def main() -> int:
    rows, totals = [], {"ours": Counter(), "olmocr": Counter()}
    with Renderer() as renderer:
        for job in plan_pages(PAGES, "synth"):
            html = Path(job.source).read_text()
            ours = make_page(job, PageOptions(), renderer)
            assert isinstance(ours, PageResult), ours
            theirs, their_reference = olmocr_side(html, Path(job.source).stem)
            for side, tests, reference in (("ours", ours.tests, ours.reference), ("olmocr", theirs, their_reference)):
                counts = Counter(t["type"] for t in tests)
                bad_load, failing, named = judge(tests, reference)
                totals[side].update(counts)
                totals[side].update({"_load": bad_load, "_fail": failing})
                rows.append((job.rel, side, counts, bad_load, failing))
                for line in named:
                    print(f"  {job.rel} [{side}] {line}")
    header = f"{'page':<20}{'side':<8}" + "".join(f"{t:>9}" for t in SYNTH_TYPES) + f"{'all':>6}{'no load':>9}{'fail own':>9}"
    print(header)
    for page, side, counts, bad_load, failing in rows:
        print(f"{page:<20}{side:<8}" + "".join(f"{counts[t]:>9}" for t in SYNTH_TYPES)
              + f"{sum(counts.values()):>6}{bad_load:>9}{failing:>9}")
    for side, counts in totals.items():
        kept = {t: counts[t] for t in SYNTH_TYPES}
        print(f"{'total':<20}{side:<8}" + "".join(f"{kept[t]:>9}" for t in SYNTH_TYPES)
              + f"{sum(kept.values()):>6}{counts['_load']:>9}{counts['_fail']:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
