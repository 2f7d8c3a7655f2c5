"""Score a folder of page transcriptions against an olmOCR-bench folder, like olmOCR-bench does.

Usage::

    python -m olmocr_rl.bench.score --bench ../shared/olmocr-bench-sample \\
        --outputs ../shared/olmocr-bench-sample/olmocr_pipeline [--json] [--skip-baseline] [--show-failures]

The bench folder holds ``*.jsonl`` test files (and usually ``pdfs/``). The outputs folder holds one
markdown file per page and repeat, named ``<pdf stem>_pg<page>_repeat<k>.md``; a PDF in a sub-folder
of ``pdfs/`` (``headers_footers/x.pdf``) has its files in the same sub-folder of the outputs
(``headers_footers/x_pg1_repeat1.md``). The name rule is applied exactly, so a PDF whose own name
ends in ``_pg1`` gives ``…_pg1_pg1_repeat1.md``.

``--scoring`` picks the rule the tests apply: ``olmocr-rl`` (default, this project's: olmOCR-bench's tests plus
the near-empty guard of present/absent, see :mod:`.types.text`) or ``olmocr-bench`` (olmocr's scorer at its
pinned commit, without the guard: a one-character page passes a ``present`` test of any text containing that
character). docs/evaluate.md lists what else differs from olmocr's scorer.

Scoring (olmOCR-bench's): a test passes if more than half of its page's repeats pass; a test whose
page has no output file fails and is listed as missing. Each JSONL file's pass rate is the fraction
of its tests that pass; the overall score is the mean of the per-JSONL pass rates. As in
olmOCR-bench, every PDF without a ``baseline`` test gets one (page 1, default settings), scored as
an extra ``baseline`` group; ``--skip-baseline`` leaves them out.

Exit status: 0 after scoring, 2 when the folders or test files are unusable (the message says why).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .base import BenchTest
from .errors import TestLoadError
from .loading import load_tests
from .page import evaluate_page
from .prepared import PROJECT_RULE, SCORING_RULES
from .types import BaselineTest

__all__ = ["main", "score_bench", "load_bench_tests", "BenchScore", "UsageError", "output_files", "describe_rule"]

BASELINE_GROUP = "baseline"


class UsageError(Exception):
    """The bench or outputs folder cannot be scored; the message says why and what to do."""


def describe_rule(rule: str) -> str:
    """One line naming a scoring rule, for reports."""
    if rule == PROJECT_RULE:
        return ("olmocr-rl (this project's: olmOCR-bench's tests plus a near-empty guard on present/absent; "
                "--scoring olmocr-bench scores as olmocr's scorer)")
    return "olmocr-bench (olmocr's scorer: no near-empty guard; docs/evaluate.md lists the remaining differences)"


@dataclass
class TestScore:
    test: BenchTest
    group: str
    repeats: int = 0
    repeat_passes: int = 0
    explanation: str = ""

    @property
    def passed(self) -> bool:
        return self.repeats > 0 and self.repeat_passes > self.repeats / 2


@dataclass
class BenchScore:
    tests: list[TestScore] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # expected output patterns with no file

    def groups(self) -> dict[str, tuple[int, int]]:
        """Group (JSONL file name, or ``baseline``) -> (passed, total)."""
        totals: dict[str, list[int]] = {}
        for score in self.tests:
            entry = totals.setdefault(score.group, [0, 0])
            entry[0] += score.passed
            entry[1] += 1
        return {group: (passed, total) for group, (passed, total) in sorted(totals.items())}

    def overall(self) -> float:
        """Mean of the per-group pass rates (olmOCR-bench's headline number)."""
        rates = [passed / total for passed, total in self.groups().values() if total]
        return sum(rates) / len(rates) if rates else 0.0

    def by_type(self) -> dict[str, tuple[int, int]]:
        totals: dict[str, list[int]] = {}
        for score in self.tests:
            entry = totals.setdefault(score.test.type, [0, 0])
            entry[0] += score.passed
            entry[1] += 1
        return {kind: (passed, total) for kind, (passed, total) in sorted(totals.items())}

    def to_json(self) -> dict:
        return {
            "overall_pass_rate": self.overall(),
            "per_jsonl": {g: {"passed": p, "total": t, "pass_rate": p / t if t else 0.0} for g, (p, t) in self.groups().items()},
            "per_type": {k: {"passed": p, "total": t, "pass_rate": p / t if t else 0.0} for k, (p, t) in self.by_type().items()},
            "missing_outputs": self.missing,
            "tests": {
                s.test.id: {
                    "group": s.group,
                    "type": s.test.type,
                    "passed": s.passed,
                    "repeats": s.repeats,
                    "repeat_passes": s.repeat_passes,
                    "explanation": s.explanation,
                }
                for s in self.tests
            },
        }


def output_files(outputs: Path, pdf: str, page: int) -> list[Path]:
    """The repeats of one page: ``<pdf stem>_pg<page>_repeat<k>.md`` beside the PDF's sub-folder."""
    relative = Path(os.path.splitext(pdf)[0])
    folder = outputs / relative.parent
    pattern = re.compile(re.escape(relative.name) + rf"_pg{page}_repeat(\d+)\.md")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [(int(m.group(1)), name) for name in names if (m := pattern.fullmatch(name))]
    return [folder / name for _, name in sorted(found)]


def load_bench_tests(bench: Path, skip_baseline: bool = False) -> list[tuple[BenchTest, str]]:
    """Every test of a bench folder with its group (JSONL file name, or ``baseline`` for the default
    baseline tests added per PDF); raises :class:`UsageError` listing every invalid definition."""
    if not bench.is_dir():
        raise UsageError(f"bench folder {bench} does not exist or is not a folder; pass the folder holding the *.jsonl files")
    jsonl_files = sorted(bench.glob("*.jsonl"))
    if not jsonl_files:
        raise UsageError(f"no *.jsonl test files in {bench}; is this an olmOCR-bench folder?")
    tests: list[tuple[BenchTest, str]] = []
    problems: list[TestLoadError] = []
    seen: dict[str, str] = {}
    for path in jsonl_files:
        loaded, errors = load_tests(path, collect_errors=True)
        problems.extend(errors)
        for test in loaded:
            if test.id in seen:
                problems.append(TestLoadError(f"duplicate id {test.id!r}, also in {seen[test.id]}", path=str(path), field="id"))
                continue
            seen[test.id] = path.name
            tests.append((test, path.name))
    if problems:
        listing = "\n".join(f"  {error}" for error in problems)
        raise UsageError(f"{len(problems)} invalid test definition(s):\n{listing}")
    if not skip_baseline:
        pdfs = {test.pdf for test, _ in tests}
        pdf_folder = bench / "pdfs"
        if pdf_folder.is_dir():
            pdfs |= {path.relative_to(pdf_folder).as_posix() for path in pdf_folder.rglob("*.pdf")}
        with_baseline = {test.pdf for test, _ in tests if test.type == "baseline"}
        for pdf in sorted(pdfs - with_baseline):
            tests.append((BaselineTest(pdf=pdf, page=1, id=f"{pdf}_baseline", type="baseline"), BASELINE_GROUP))
    return tests


def score_bench(bench: Path, outputs: Path, *, skip_baseline: bool = False, rule: str = PROJECT_RULE) -> BenchScore:
    """Score every test of ``bench`` on the transcriptions in ``outputs`` under the scoring ``rule``
    (``prepared.SCORING_RULES``); raises :class:`UsageError`."""
    if rule not in SCORING_RULES:
        raise UsageError(f"unknown scoring rule {rule!r}; choose one of {', '.join(SCORING_RULES)}")
    tests = load_bench_tests(bench, skip_baseline)
    if not outputs.is_dir():
        raise UsageError(f"outputs folder {outputs} does not exist or is not a folder; pass the folder of <pdf stem>_pg<page>_repeat<k>.md files")
    # Group tests by page so each transcription is read and prepared once for all its tests.
    pages: dict[tuple[str, int], list[TestScore]] = {}
    result = BenchScore()
    for test, group in tests:
        score = TestScore(test, group)
        result.tests.append(score)
        pages.setdefault((test.pdf, test.page), []).append(score)
    for (pdf, page), scores in pages.items():
        files = output_files(outputs, pdf, page)
        if not files:
            stem = os.path.splitext(pdf)[0]
            result.missing.append(f"{stem}_pg{page}_repeat*.md")
            for score in scores:
                score.explanation = "no output file for this page"
            continue
        for path in files:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                text = None
                reason = f"cannot read {path}: {error}"
            results = evaluate_page([s.test for s in scores], text if text is not None else 0, rule)
            for score, (_, passed, why) in zip(scores, results):
                score.repeats += 1
                score.repeat_passes += passed
                if not passed and not score.explanation:
                    score.explanation = why if text is not None else reason
    return result


def _print_report(result: BenchScore, show_failures: bool, rule: str = PROJECT_RULE) -> None:
    print(f"scoring rule: {describe_rule(rule)}\n")
    print(f"{'JSONL':40s} {'pass rate':>9s}   passed/total")
    for group, (passed, total) in result.groups().items():
        print(f"{group:40s} {100 * passed / total:8.1f}%   {passed}/{total}")
    print(f"\n{'type':12s} {'pass rate':>9s}   passed/total")
    for kind, (passed, total) in result.by_type().items():
        print(f"{kind:12s} {100 * passed / total:8.1f}%   {passed}/{total}")
    total = len(result.tests)
    passed = sum(s.passed for s in result.tests)
    print(f"\nOverall (mean of per-JSONL pass rates): {100 * result.overall():.1f}%  ({passed}/{total} tests pass)")
    if result.missing:
        print(f"\nMissing outputs ({len(result.missing)} pages; their tests count as failures):")
        for pattern in result.missing:
            print(f"  {pattern}")
    if show_failures:
        failures = [s for s in result.tests if not s.passed]
        if failures:
            print(f"\nFailed tests ({len(failures)}):")
            for s in failures:
                print(f"  {s.test.id} [{s.test.type}] ({s.repeat_passes}/{s.repeats} repeats): {s.explanation}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.bench.score",
        description="Score <pdf stem>_pg<page>_repeat<k>.md transcriptions against an olmOCR-bench folder.",
    )
    parser.add_argument("--bench", required=True, type=Path, help="folder with the *.jsonl test files (and pdfs/)")
    parser.add_argument("--outputs", required=True, type=Path, help="folder with the <pdf stem>_pg<page>_repeat<k>.md files")
    parser.add_argument("--json", action="store_true", help="print one JSON object (per-JSONL, per-type, per-test results)")
    parser.add_argument("--skip-baseline", action="store_true", help="do not add a baseline test for PDFs that have none")
    parser.add_argument("--show-failures", action="store_true", help="list every failing test with its explanation")
    parser.add_argument("--scoring", choices=SCORING_RULES, default=PROJECT_RULE,
                        help="olmocr-rl (default): with the near-empty guard on present/absent; olmocr-bench: as "
                             "olmocr's scorer (no guard)")
    args = parser.parse_args(argv)
    try:
        result = score_bench(args.bench, args.outputs, skip_baseline=args.skip_baseline, rule=args.scoring)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"scoring": args.scoring, **result.to_json()}, indent=1, ensure_ascii=False))
    else:
        _print_report(result, args.show_failures, args.scoring)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
