"""Rewrite tests/fixtures/synth/golden/ from tests/fixtures/synth/pages/ (no browser): each page's JSONL and reference
as ``make_page`` makes them with ``--seed 0`` and the default caps, before the text-layer check.

    python scripts/synth_golden.py      # then review `git diff tests/fixtures/synth/golden` before committing

tests/unit/test_synth.py compares the same output with these files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from olmocr_rl.synth.pipeline import PageOptions, make_page  # noqa: E402
from olmocr_rl.synth.output import plan_pages  # noqa: E402

PAGES = REPO / "tests" / "fixtures" / "synth" / "pages"
GOLDEN = REPO / "tests" / "fixtures" / "synth" / "golden"


def golden_files() -> dict[str, str]:
    """File name → content, for every page."""
    out = {}
    for job in plan_pages(PAGES, "synth"):
        result = make_page(job, PageOptions(), None)
        stem = Path(job.pdf).stem
        out[f"{stem}.jsonl"] = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in result.tests)
        out[f"{stem}.md"] = result.reference
    return out


if __name__ == "__main__":
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, text in golden_files().items():
        (GOLDEN / name).write_text(text, encoding="utf-8")
        print(GOLDEN / name)
