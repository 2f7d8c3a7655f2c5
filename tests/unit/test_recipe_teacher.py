"""olmocr_rl.recipe.teacher without a browser: on a folder of generated pages made as synth makes them (its tree,
content, reference and test rules; no print), each fault fails the tests it is meant to and no other, the
fault-free transcript passes every test, the rates are the stated ones, the draws are seeded, bad input is one
line. The same on real prints: tests/integration/test_recipe_browser.py."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from olmocr_rl.bench import evaluate_page, load_tests
from olmocr_rl.data.front_matter import split_front_matter
from olmocr_rl.data.references import reference_path
from olmocr_rl.recipe import pages, teacher
from olmocr_rl.synth.pipeline import PageOptions, make_page
from olmocr_rl.synth.output import plan_pages
from recipe_helpers import needs_font

PAGES = 48  # 8 of each kind
pytestmark = needs_font


def _write_bench(html: Path, out: Path) -> None:
    """A bench folder from the pages as synth derives it (references, JSONL, the manifest's pages; empty PDFs)."""
    listed, lines = [], {}
    for job in plan_pages(html, "synth"):
        result = make_page(job, PageOptions(), None)
        path = reference_path(out, job.pdf, 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.reference)
        (out / "pdfs" / job.pdf).parent.mkdir(parents=True, exist_ok=True)
        (out / "pdfs" / job.pdf).write_bytes(b"")  # not printed (as synth's golden tests make pages)
        lines.setdefault(job.subset, []).extend(json.dumps(t) for t in result.tests)
        listed.append({"html": job.rel, "pdf": job.pdf})
    for subset, tests in lines.items():
        (out / f"{subset}.jsonl").write_text("\n".join(tests) + "\n")
    (out / teacher.SYNTH_MANIFEST).write_text(json.dumps({"pages": listed}))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe_teacher")
    pages.generate("train", PAGES, 0, root / "pages")
    _write_bench(root / "pages", root / "bench")
    return root


def _results(bench: Path, transcripts: Path) -> dict[str, list]:
    """Per page key (subset/stem): [(test, passed)] of the transcript in ``transcripts``."""
    out = {}
    for jsonl in sorted(bench.glob("*.jsonl")):
        by_pdf: dict[str, list] = {}
        for test in load_tests(jsonl):
            by_pdf.setdefault(test.pdf, []).append(test)
        for pdf, tests in by_pdf.items():
            path = transcripts / reference_path(bench, pdf, 1).relative_to(bench / "claude_original")
            body = split_front_matter(path.read_text())[1]
            out[pdf[:-4]] = [(test, passed) for test, passed, _ in evaluate_page(tests, body)]
    return out


def _sidecar(root: Path, key: str) -> dict:
    subset, stem = key.split("/")
    return json.loads((root / "pages" / subset.removeprefix("synth_") / f"{stem}.json").read_text())


def test_the_fault_free_transcript_passes_every_test(folder, tmp_path):
    record = teacher.run_teacher(folder / "bench", folder / "pages", tmp_path / "t", rates=dict.fromkeys(teacher.FAULTS, 0.0))
    assert all(faults == [] for faults in record["pages"].values()) and len(record["pages"]) == PAGES
    results = _results(folder / "bench", tmp_path / "t")
    assert sum(len(r) for r in results.values()) > 10 * PAGES
    assert all(passed for page in results.values() for _, passed in page)
    for md in (folder / "bench" / "claude_original").rglob("*.md"):  # the same bytes as the references
        assert (tmp_path / "t" / md.relative_to(folder / "bench" / "claude_original")).read_text() == md.read_text()


def _only(fault: str) -> dict[str, float]:
    return {f: float(f == fault) for f in teacher.FAULTS}


@pytest.mark.parametrize("fault, kind", [("furniture", "absent"), ("flatten", "table")])
def test_kept_furniture_fails_the_absent_tests_and_flattened_tables_the_table_tests(folder, tmp_path, fault, kind):
    record = teacher.run_teacher(folder / "bench", folder / "pages", tmp_path / "t", rates=_only(fault))
    hit = [key for key, faults in record["pages"].items() if faults == [fault]]
    assert len(hit) >= 6 and record["realised"][fault]["rate"] == 1.0
    results = _results(folder / "bench", tmp_path / "t")
    failed = Counter()
    for key, page in results.items():
        for test, passed in page:
            if test.type == kind and key in hit:
                assert not passed, (key, test)  # every test of the fault's type fails on a page that has it
                failed[kind] += 1
            else:
                assert passed, (fault, key, test)  # and nothing else does
    assert failed[kind] >= 10


def _column_sentences(sidecar: dict) -> tuple[set[str], set[str]]:
    """The sentences of the page's columns, and those that reading across breaks: a sentence with a line break
    after a row where the other column's text follows (the left column: the right one on the same row; the right
    column: the left one on the next row)."""
    every, broken = set(), set()
    for block in sidecar["columns"]:
        rows = [[re.sub(r"<sup>\w+</sup>", "", side) for side in row] for row in block["rows"]]
        for side in (0, 1):
            text, row_of = "", []
            for r, row in enumerate(rows):
                if row[side]:
                    row_of += [r] * (len(row[side]) + 1)
                    text += row[side] + " "
            for match in re.finditer(r"[A-Z][^.]*\.", text):
                every.add(match.group(0))
                lines = sorted({row_of[i] for i in range(match.start(), match.end())})
                if any(rows[r][1] if side == 0 else r + 1 < len(rows) and rows[r + 1][0] for r in lines[:-1]):
                    broken.add(match.group(0))
    return every, broken


def test_reading_two_columns_across_fails_the_order_tests_of_the_sentences_it_breaks(folder, tmp_path):
    record = teacher.run_teacher(folder / "bench", folder / "pages", tmp_path / "t", rates=_only("across"))
    hit = [key for key, faults in record["pages"].items() if faults == ["across"]]
    assert len(hit) == PAGES // 6
    results = _results(folder / "bench", tmp_path / "t")
    in_columns, failed = 0, 0
    for key, page in results.items():
        every, broken = _column_sentences(_sidecar(folder, key)) if key in hit else (set(), set())
        for test, passed in page:
            strings = {test.before, test.after} if test.type == "order" else set()
            if strings & broken:
                assert not passed, (key, test)  # a broken sentence is not found
                failed += 1
            elif test.type in ("absent", "table", "math", "baseline", "format") or (
                    test.type == "order" and not strings & every):
                assert passed, (key, test)  # nothing outside the columns changes
            in_columns += bool(strings & every)
    assert failed >= 10 and failed >= 0.7 * in_columns, (failed, in_columns)


def test_faults_are_drawn_at_their_rates_and_seeded(folder, tmp_path):
    first = teacher.run_teacher(folder / "bench", folder / "pages", tmp_path / "a", seed=1)
    again = teacher.run_teacher(folder / "bench", folder / "pages", tmp_path / "b", seed=1)
    assert first == again
    for md in (tmp_path / "a").rglob("*.md"):
        assert md.read_bytes() == (tmp_path / "b" / md.relative_to(tmp_path / "a")).read_bytes()
    other = teacher.run_teacher(folder / "bench", folder / "pages", tmp_path / "c", seed=2)
    assert other["pages"] != first["pages"]
    assert first["rates"] == teacher.DEFAULT_RATES == dict.fromkeys(teacher.FAULTS, 0.5)
    for fault in teacher.FAULTS:
        real = first["realised"][fault]
        applicable = sum(fault in teacher.applicable_faults(_sidecar(folder, k)) for k in first["pages"])
        assert real["applicable"] == applicable >= 8
        assert real["applied"] == sum(fault in f for f in first["pages"].values())
        assert abs(real["rate"] - 0.5) <= 3.5 * math.sqrt(0.25 / applicable)  # binomial, 3.5 sigma
        assert all(set(f) <= set(teacher.applicable_faults(_sidecar(folder, k))) for k, f in first["pages"].items())
    mostly = teacher.run_teacher(folder / "bench", folder / "pages", tmp_path / "d", rates={"furniture": 0.9})
    assert mostly["realised"]["furniture"]["rate"] > first["realised"]["furniture"]["rate"]
    assert json.loads((tmp_path / "d" / teacher.FAULTS_FILE).read_text())["rates"]["furniture"] == 0.9


def test_the_command_prints_the_rates_and_pass_rates_and_bad_input_is_one_line(folder, tmp_path, capsys):
    out = tmp_path / "t"
    argv = ["--bench", str(folder / "bench"), "--pages", str(folder / "pages"), "--out", str(out)]
    assert teacher.main(argv + ["--rate", "flatten=1", "--as_bench", str(tmp_path / "sft")]) == 0
    text = capsys.readouterr().out
    transcripts = sorted(p.relative_to(out) for p in out.rglob("*.md"))
    assert transcripts == sorted(p.relative_to(tmp_path / "sft/claude_original")
                                 for p in (tmp_path / "sft/claude_original").rglob("*.md"))
    assert len(transcripts) == PAGES and len(list((tmp_path / "sft/pdfs").rglob("*.pdf"))) == PAGES
    assert sorted(p.name for p in (tmp_path / "sft").glob("*.jsonl")) == sorted(
        p.name for p in (folder / "bench").glob("*.jsonl"))
    assert teacher.main(argv + ["--as_bench", str(tmp_path / "sft")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert f"{PAGES} transcript(s)" in text and re.search(r"flatten\s+rate 1.00: (\d+)/\1 pages", text)
    assert re.search(r"table\s+1.000\s+0.000", text)  # every table test fails with every table flattened
    with pytest.raises(SystemExit):
        teacher.main(argv + ["--rate", "tables=0.5"])
    assert "give FAULT=P" in capsys.readouterr().err
    side = next((folder / "pages").glob("columns/*.json"))
    saved = side.read_text()
    try:
        data = json.loads(saved)
        data["columns"][0]["left"][0][0] = "Nothing like it"
        side.write_text(json.dumps(data))
        assert teacher.main(argv + ["--rate", "across=1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "does not hold the sidecar's two columns" in err
        side.unlink()
        assert teacher.main(argv) == 2
        assert "no sidecar" in capsys.readouterr().err
    finally:
        side.write_text(saved)
    assert teacher.main(["--bench", str(tmp_path), "--pages", str(tmp_path), "--out", str(out)]) == 2
    assert "has no synth_manifest.json" in capsys.readouterr().err
