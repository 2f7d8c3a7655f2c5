"""A flawed teacher's transcripts of generated pages: the SFT data of the recipe, with faults the bench catches.

    python -m olmocr_rl.recipe.teacher --bench recipe/bench_train --pages recipe/pages_train \\
        --out recipe/teacher_train [--seed 0] [--rate furniture=0.5 --rate flatten=0.5 --rate across=0.5] \\
        [--as_bench recipe/bench_train_teacher]

olmOCR 2's warm start learned from a teacher model's transcriptions, faults included. This command writes, for
every page of a synth folder (``--bench``, made from pages of ``python -m olmocr_rl.recipe.pages``; ``--pages``
is that folder, holding each page's sidecar), the transcript such a teacher would have written: the page's clean
reference (``claude_original/<subset>/<stem>_page1_pg1_repeat1.md``) with faults drawn per page, each with its
own probability (``--rate``, default 0.5 each, so that a model imitating the teacher samples both behaviours):

- ``furniture``: running heads, footers and page numbers **kept**, where they print (the head's line first, the
  footer's last): the page's ``absent`` tests fail;
- ``flatten``: tables **flattened** to lines, each row's cell texts joined by spaces (no HTML): its ``table``
  tests fail;
- ``across``: two columns read **row by row across both columns**: the ``order`` (and ``present``) tests of
  sentences in the columns fail.

A fault is drawn only for a page it applies to (a page with furniture, a table, two columns), by a generator
seeded with ``--seed``, the page and the fault (the same command gives the same bytes). The transcripts go to
``<out>/<subset>/<stem>_page1_pg1_repeat1.md`` (claude_original's layout) and ``<out>/teacher_faults.json``
records the faults of every page and the realised rates; the command prints the rates and the pass rate per
test type of the teacher's transcripts next to the clean references'. ``--as_bench DIR`` also writes a bench
folder whose references are the transcripts (the tests and PDFs copied from ``--bench``), for a warm start that
learns from ``claude_original/`` (``python -m olmocr_rl.tiny_model --sft DIR``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from olmocr_rl.bench import evaluate_page, load_tests
from olmocr_rl.data.front_matter import split_front_matter
from olmocr_rl.data.references import reference_path

__all__ = ["FAULTS", "DEFAULT_RATES", "TeacherError", "applicable_faults", "faulty_transcript", "run_teacher",
           "score_folder", "as_bench", "main", "FAULTS_FILE"]

FAULTS = ("furniture", "flatten", "across")
DEFAULT_RATES = {fault: 0.5 for fault in FAULTS}
FAULTS_FILE = "teacher_faults.json"
SYNTH_MANIFEST = "synth_manifest.json"
_TABLE = re.compile(r"<table>.*?</table>", re.DOTALL)
_FRONT = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)


class TeacherError(ValueError):
    """A page whose reference does not hold what its sidecar says (one line, naming the page)."""


def applicable_faults(sidecar: dict) -> list[str]:
    """The faults a page can carry: furniture when it has a running head or footer, flatten when it has a table,
    across when it has two columns."""
    out = []
    if sidecar["furniture"]["header"] or sidecar["furniture"]["footer"]:
        out.append("furniture")
    if sidecar["tables"]:
        out.append("flatten")
    if sidecar["columns"]:
        out.append("across")
    return out


def _keep_furniture(body: str, sidecar: dict) -> str:
    head, foot = sidecar["furniture"]["header"], sidecar["furniture"]["footer"]
    parts = ([" ".join(head)] if head else []) + [body] + ([" ".join(foot)] if foot else [])
    return "\n\n".join(part for part in parts if part)


def _flatten_tables(body: str, sidecar: dict, page: str) -> str:
    found = _TABLE.findall(body)
    if len(found) != len(sidecar["tables"]):
        raise TeacherError(f"{page}: the reference holds {len(found)} table(s), its sidecar {len(sidecar['tables'])}")
    tables = iter(sidecar["tables"])

    def flat(match: re.Match) -> str:
        table = next(tables)
        missing = [cell for row in table["rows"] for cell in row if f">{cell}</t" not in match.group(0)]
        if missing:
            raise TeacherError(f"{page}: the reference's table lacks the sidecar's cell {missing[0]!r}")
        return "\n".join(" ".join(row) for row in table["rows"])

    return _TABLE.sub(flat, body)


def _read_across(body: str, sidecar: dict, page: str) -> str:
    for block in sidecar["columns"]:
        clean = "\n\n".join("\n".join(paragraph) for paragraph in block["left"] + block["right"])
        if clean not in body:
            raise TeacherError(f"{page}: the reference does not hold the sidecar's two columns as written "
                               f"(first line {block['left'][0][0]!r}); regenerate the pages and rerun synth")
        rows = [" ".join(side for side in row if side) for row in block["rows"]]
        across = re.sub(r"\n{3,}", "\n\n", "\n".join(rows)).strip()
        body = body.replace(clean, across, 1)
    return body


def faulty_transcript(reference: str, sidecar: dict, faults: Sequence[str], page: str = "page") -> str:
    """The reference with ``faults`` applied to its body (its front matter kept as written)."""
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown fault(s) {sorted(unknown)}; the faults are {', '.join(FAULTS)}")
    front = _FRONT.match(reference)
    head, body = (front.group(0), reference[front.end():].strip()) if front else ("", reference.strip())
    if "across" in faults:
        body = _read_across(body, sidecar, page)
    if "flatten" in faults:
        body = _flatten_tables(body, sidecar, page)
    if "furniture" in faults:
        body = _keep_furniture(body, sidecar)
    return head + body + "\n"


def _pages(bench: Path) -> list[dict]:
    manifest = bench / SYNTH_MANIFEST
    if not manifest.is_file():
        raise TeacherError(f"--bench {bench} has no {SYNTH_MANIFEST}; give a folder python -m olmocr_rl.synth wrote")
    return json.loads(manifest.read_text())["pages"]


def _draw(seed: int, page: str, fault: str, rate: float) -> bool:
    return random.Random(f"olmocr_rl.recipe.teacher:{seed}:{page}:{fault}").random() < rate


def run_teacher(bench: str | Path, pages: str | Path, out: str | Path, seed: int = 0,
                rates: dict[str, float] | None = None) -> dict:
    """Write the teacher's transcript of every page of ``bench`` into ``out``; returns (and writes) the record of
    faults: ``{"seed", "rates", "realised": {fault: {"applicable", "applied", "rate"}}, "pages": {page: [...]}}``."""
    rates = {**DEFAULT_RATES, **(rates or {})}
    bad = {k: v for k, v in rates.items() if k not in FAULTS or not 0.0 <= v <= 1.0}
    if bad:
        raise ValueError(f"--rate: {bad} (give FAULT=P with FAULT one of {', '.join(FAULTS)} and 0 <= P <= 1)")
    bench, pages, out = Path(bench), Path(pages), Path(out)
    record = {"seed": seed, "rates": rates, "pages": {}}
    applicable, applied = Counter(), Counter()
    for entry in _pages(bench):
        key = entry["pdf"][:-4]
        side_path = pages / Path(entry["html"]).with_suffix(".json")
        if not side_path.is_file():
            raise TeacherError(f"{key}: no sidecar {side_path}; give --pages the folder synth's --html was")
        sidecar = json.loads(side_path.read_text())
        source = reference_path(bench, entry["pdf"], 1)
        faults = []
        for fault in applicable_faults(sidecar):
            applicable[fault] += 1
            if _draw(seed, key, fault, rates[fault]):
                faults.append(fault)
                applied[fault] += 1
        text = faulty_transcript(source.read_text(), sidecar, faults, key)
        target = out / source.relative_to(bench / "claude_original")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        record["pages"][key] = faults
    record["realised"] = {f: {"applicable": applicable[f], "applied": applied[f],
                              "rate": round(applied[f] / applicable[f], 4) if applicable[f] else None} for f in FAULTS}
    out.mkdir(parents=True, exist_ok=True)
    (out / FAULTS_FILE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def as_bench(bench: str | Path, transcripts: str | Path, target: str | Path) -> Path:
    """A bench folder for the warm start (``python -m olmocr_rl.tiny_model --sft``, which learns from
    ``claude_original/``): ``bench``'s tests and PDFs with the teacher's transcripts as its references."""
    bench, transcripts, target = Path(bench), Path(transcripts), Path(target)
    if target.exists() and any(target.iterdir()):
        raise ValueError(f"--as_bench {target} is not empty; give a new folder")
    for path in sorted(bench.rglob("*")):
        rel = path.relative_to(bench)
        if path.is_file() and (path.suffix == ".jsonl" or rel.parts[0] == "pdfs"):
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / rel)
    shutil.copytree(transcripts, target / "claude_original", ignore=shutil.ignore_patterns(FAULTS_FILE))
    shutil.copyfile(transcripts / FAULTS_FILE, target / FAULTS_FILE)
    return target


def score_folder(bench: str | Path, transcripts: str | Path | None = None) -> dict[str, tuple[int, int]]:
    """Per test type, (passed, tests) of the transcripts in ``transcripts`` (claude_original's layout; default:
    the bench's own references) on the bench's tests, each read as the reward reads it (front matter removed)."""
    bench = Path(bench)
    folder = Path(transcripts) if transcripts is not None else bench / "claude_original"
    by_page: dict[str, list] = {}
    for jsonl in sorted(bench.glob("*.jsonl")):
        for test in load_tests(jsonl):
            by_page.setdefault(test.pdf, []).append(test)
    counts: dict[str, list[int]] = {}
    for pdf, tests in by_page.items():
        path = folder / reference_path(bench, pdf, 1).relative_to(bench / "claude_original")
        body = split_front_matter(path.read_text())[1] if path.is_file() else ""
        for test, passed, _ in evaluate_page(tests, body):
            tally = counts.setdefault(test.type, [0, 0])
            tally[0] += passed
            tally[1] += 1
    return {kind: (p, n) for kind, (p, n) in sorted(counts.items())}


def _rate(text: str) -> tuple[str, float]:
    fault, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if fault not in FAULTS or not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: give FAULT=P with FAULT one of {', '.join(FAULTS)}, 0 <= P <= 1")
    return fault, number


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m olmocr_rl.recipe.teacher", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--bench", required=True, help="the synth folder of the generated pages")
    parser.add_argument("--pages", required=True, help="the generated pages (synth's --html), with their sidecars")
    parser.add_argument("--out", required=True, help="folder for the transcripts and teacher_faults.json")
    parser.add_argument("--seed", type=int, default=0, help="the faults' random draws (default 0)")
    parser.add_argument("--rate", type=_rate, action="append", default=[], metavar="FAULT=P",
                        help="probability of a fault on a page it applies to (default 0.5 each); repeatable")
    parser.add_argument("--as_bench", metavar="DIR", help="also write a bench folder for the warm start: the tests "
                        "and PDFs of --bench with the transcripts as claude_original/ (tiny_model --sft DIR)")
    args = parser.parse_args(argv)
    try:
        if args.as_bench and Path(args.as_bench).exists() and any(Path(args.as_bench).iterdir()):
            raise ValueError(f"--as_bench {args.as_bench} is not empty; give a new folder")
        record = run_teacher(args.bench, args.pages, args.out, args.seed, dict(args.rate))
        clean, taught = score_folder(args.bench), score_folder(args.bench, args.out)
        if args.as_bench:
            as_bench(args.bench, args.out, args.as_bench)
    except (TeacherError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"[teacher] {len(record['pages'])} transcript(s) -> {args.out}"
          + (f"; bench folder for the warm start -> {args.as_bench}" if args.as_bench else ""))
    for fault, real in record["realised"].items():
        print(f"  {fault:10s} rate {record['rates'][fault]:.2f}: {real['applied']}/{real['applicable']} pages")
    print("  type        clean  teacher")
    for kind, (passed, total) in clean.items():
        print(f"  {kind:10s} {passed / total:6.3f}  {taught[kind][0] / total:6.3f}   ({total} tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
