"""Print every verdict the bench scorer gives on the olmOCR-bench sample, one line each.

    python scripts/bench/verdict_dump.py [--bench ../shared/olmocr-bench-sample] [--copies 5] > verdicts.txt

Use it to show that a change to ``olmocr_rl.bench`` leaves behaviour untouched: dump before and
after, then ``diff`` the two files. Lines, tab-separated:

- ``score``: each test as the scorer CLI scores the sample's outputs (id, PASS/FAIL, passing repeats
  out of repeats, explanation);
- ``copy``: each test on ``--copies`` perturbed copies of its page's output (``perturb.py``, fixed
  seed), so failures and their explanations are covered too;
- ``katex``: each equation pair of the KaTeX fixture corpus (``tests/fixtures/bench/katex``):
  containment verdict, both parse errors, and a digest of the candidate's glyph positions;
- ``invalid``: each invalid reference of that corpus with its syntax problem.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]  # this checkout's olmocr_rl wins

from perturb import perturbed_copies  # noqa: E402

from olmocr_rl.bench import evaluate_page, latex  # noqa: E402
from olmocr_rl.bench.score import UsageError, load_bench_tests, output_files, score_bench  # noqa: E402

DEFAULT_BENCH = ROOT.parent / "shared" / "olmocr-bench-sample"
KATEX_FIXTURE = ROOT / "tests" / "fixtures" / "bench" / "katex" / "katex_math_verdicts.json"


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def _glyph_digest(layout: latex.Layout) -> str:
    plain = repr([tuple(glyph) for glyph in layout.glyphs])
    return hashlib.sha256(plain.encode("utf-8")).hexdigest()[:16]


def dump_scores(bench: Path) -> None:
    for score in score_bench(bench, bench / "olmocr_pipeline").tests:
        verdict = "PASS" if score.passed else "FAIL"
        print(f"score\t{score.test.id}\t{verdict}\t{score.repeat_passes}/{score.repeats}\t{_one_line(score.explanation)}")


def dump_copies(bench: Path, copies: int) -> None:
    pages: dict[tuple[str, int], list] = {}
    for test, _group in load_bench_tests(bench):
        pages.setdefault((test.pdf, test.page), []).append(test)
    for (pdf, page), tests in sorted(pages.items()):
        for path in output_files(bench / "olmocr_pipeline", pdf, page):
            text = path.read_text(encoding="utf-8")
            for index, variant in enumerate(perturbed_copies(text, copies, seed=0)):
                for test, passed, why in evaluate_page(tests, variant):
                    verdict = "PASS" if passed else "FAIL"
                    print(f"copy\t{path.name}#{index}\t{test.id}\t{verdict}\t{_one_line(why)}")


def dump_katex_pairs() -> None:
    fixture = json.loads(KATEX_FIXTURE.read_text(encoding="utf-8"))
    for index, (reference, candidate, _katex) in enumerate(fixture["pairs"]):
        ref_layout = latex.layout(reference)
        cand_layout = latex.layout(candidate.strip())
        verdict = latex.equation_contains(cand_layout, ref_layout)
        print(f"katex\t{index}\t{verdict}\t{ref_layout.error}\t{cand_layout.error}\t{_glyph_digest(cand_layout)}")
    for reference in fixture["invalid_references"]:
        print(f"invalid\t{_one_line(reference)}\t{latex.syntax_problem(reference)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH, help="olmOCR-bench folder with olmocr_pipeline/")
    parser.add_argument("--copies", type=int, default=5, help="perturbed copies of each page's output")
    args = parser.parse_args()
    try:
        dump_scores(args.bench)
        dump_copies(args.bench, args.copies)
    except UsageError as error:  # a wrong --bench: say so, as the scorer CLI does
        print(f"error: {error}", file=sys.stderr)
        return 2
    dump_katex_pairs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
