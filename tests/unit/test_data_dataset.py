"""OlmOCRBenchDataset on bench_data_sample/ and on the real olmOCR-bench sample."""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from olmocr_rl.data import OlmOCRBenchDataset, PageRenderCache, RenderError
import olmocr_rl.data.dataset as dataset_module
from olmocr_rl.data.dataset import page_key
from olmocr_rl.data.front_matter import parse_page_response
from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "bench_data_sample"
SHARED_SAMPLE = Path(__file__).parents[2].parent / "shared" / "olmocr-bench-sample"


def _tests_by_page(folder: Path) -> dict[tuple[str, int], list[tuple[str, str]]]:
    """(pdf, page) -> [(test id, jsonl file name)] read straight from the JSONL files."""
    grouped = defaultdict(list)
    for jsonl in sorted(folder.glob("*.jsonl")):
        for line in jsonl.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                entry = json.loads(line)
                grouped[(entry["pdf"], entry["page"])].append((entry["id"], jsonl.name))
    return grouped


def _check_grouping(dataset: OlmOCRBenchDataset, folder: Path) -> None:
    expected = _tests_by_page(folder)
    assert len(dataset) == len(expected)
    keys = [(Path(sample["pdf_path"]).relative_to(folder / "pdfs").as_posix(), sample["page"]) for sample in dataset.samples]
    assert keys == sorted(expected)  # one sample per (pdf, page), sorted
    for key, sample in zip(keys, dataset.samples):
        assert sorted(sample["test_ids"]) == sorted(test_id for test_id, _ in expected[key])
        files = sorted({name for _, name in expected[key]})
        assert [Path(path).name for path in sample["jsonl_files"]] == files
        assert Path(sample["jsonl_file"]).name == files[0]


@pytest.fixture(scope="module")
def sample_dataset() -> OlmOCRBenchDataset:
    return OlmOCRBenchDataset(SAMPLE, render_cache=PageRenderCache())


def test_sample_pages_and_test_ids_grouped(sample_dataset):
    _check_grouping(sample_dataset, SAMPLE)
    assert len(sample_dataset) == 10  # nine PDFs, one of them with two pages
    several_files = [sample for sample in sample_dataset.samples if len(sample["jsonl_files"]) > 1]
    assert len(several_files) >= 1


# Page sizes chosen in scripts/make_bench_sample.py, scaled by hand so the longest side is 1288.
SAMPLE_SIZES = {
    ("blank.pdf", 1): (834, 1288),  # 396 x 612 pt: 396 * 1288 / 612 = 833.4
    ("counting.pdf", 1): (910, 1288),  # 420 x 595: 909.2
    ("counting.pdf", 2): (910, 1288),
    ("simple_lines.pdf", 1): (966, 1288),  # 360 x 480: 966 exactly
    ("synth/doc0042_page3.pdf", 1): (1031, 1288),  # 400 x 500: 1030.4
    ("table.pdf", 1): (1288, 996),  # 792 x 612 landscape
    ("paragraphs.pdf", 1): (996, 1288),  # US letter: 995.3
}


def test_sample_items(sample_dataset):
    prompt = build_no_anchoring_v4_yaml_prompt()
    for index, sample in enumerate(sample_dataset.samples):
        item = sample_dataset[index]
        assert item["prompt"] == [{"role": "user", "content": [{"type": "text", "text": prompt}, {"type": "image"}]}]
        assert item["image"].mode == "RGB" and max(item["image"].size) == 1288
        key = (item["pdf_path"].split("/pdfs/", 1)[1], item["page"])
        assert item["pdf"] == key[0] and page_key(item["pdf"], item["page"]) == f"{key[0]}:{key[1]}"
        if key in SAMPLE_SIZES:
            assert item["image"].size == SAMPLE_SIZES[key]
        assert isinstance(item["pdf_path"], str) and Path(item["pdf_path"]).is_file()
        assert item["test_ids"] == sample["test_ids"] and item["jsonl_files"] == sample["jsonl_files"]
        parse_page_response(item["claude_original"])  # every sample page has a valid reference


def test_sample_reference_follows_olmocr_naming(sample_dataset):
    by_pdf = {(Path(s["pdf_path"]).name, s["page"]): s["claude_original"] for s in sample_dataset.samples}
    expected = (SAMPLE / "claude_original" / "synth" / "doc0042_page3_pg1_repeat1.md").read_text(encoding="utf-8")
    assert by_pdf[("doc0042_page3.pdf", 1)] == expected
    assert by_pdf[("counting.pdf", 2)] == (SAMPLE / "claude_original" / "counting_page2_pg1_repeat1.md").read_text(encoding="utf-8")


def test_summary_counts_match_the_jsonl(sample_dataset):
    types = defaultdict(int)
    for jsonl in SAMPLE.glob("*.jsonl"):
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            types[json.loads(line)["type"]] += 1
    summary = sample_dataset.summary
    assert summary["pages"] == 10 and summary["tests"] == sum(types.values())
    assert summary["tests_by_type"] == dict(types)  # every type present, counted right
    assert set(types) == {"present", "absent", "order", "table", "math", "baseline", "format", "footnote"}
    assert sorted(summary["jsonl_files"]) == ["basic.jsonl", "layout.jsonl", "tables_math.jsonl"]
    assert summary["pages_with_reference"] == 10
    table = sample_dataset.describe()
    assert "pages        10  (10 with a claude_original reference)" in table
    assert re.search(rf"^\s+math\s+{types['math']}\s+1$", table, re.MULTILINE)  # tests, pages
    assert re.search(rf"^\s+total\s+{sum(types.values())}\s+10$", table, re.MULTILINE)


def test_max_samples_truncates_after_sorting(sample_dataset):
    small = OlmOCRBenchDataset(SAMPLE, max_samples=3, render_cache=PageRenderCache())
    assert [s["pdf_path"] for s in small.samples] == [s["pdf_path"] for s in sample_dataset.samples[:3]]
    assert small.summary["dropped"]["pages_by_max_samples"] == 7
    with pytest.raises(ValueError, match="max_samples"):
        OlmOCRBenchDataset(SAMPLE, max_samples=0)


def test_jsonl_filter_keeps_matching_files_only():
    dataset = OlmOCRBenchDataset(SAMPLE, jsonl_filter="LAYOUT", render_cache=PageRenderCache())  # case-insensitive
    assert {Path(s["pdf_path"]).name for s in dataset.samples} == {"header_footer.pdf", "paragraphs.pdf", "two_columns.pdf"}
    for sample in dataset.samples:
        assert [Path(path).name for path in sample["jsonl_files"]] == ["layout.jsonl"]
    assert dataset.summary["jsonl_files"] == {"layout.jsonl": 9}


def test_type_filter_drops_tests_and_empty_pages(sample_dataset):
    dataset = OlmOCRBenchDataset(SAMPLE, test_types=["math", "table"], render_cache=PageRenderCache())
    assert {Path(s["pdf_path"]).name for s in dataset.samples} == {"equations.pdf", "table.pdf"}
    summary = dataset.summary
    assert summary["tests_by_type"] == {"table": 4, "math": 3}
    full = sample_dataset.summary["tests_by_type"]
    assert summary["dropped"]["tests_by_type_filter"] == {k: v for k, v in full.items() if k not in ("table", "math")}
    assert summary["dropped"]["pages_by_type_filter"] == 8
    assert "left out by --bench_type_filter" in dataset.describe()
    for sample in dataset.samples:
        assert all(("_math_" in test_id) or ("_table_" in test_id) for test_id in sample["test_ids"])


def test_render_failure_after_construction_raises_naming_pdf_and_page(tmp_path):
    folder = tmp_path / "bench"
    shutil.copytree(SAMPLE, folder)
    dataset = OlmOCRBenchDataset(folder, render_cache=PageRenderCache())
    index = next(i for i, s in enumerate(dataset.samples) if s["pdf_path"].endswith("counting.pdf") and s["page"] == 2)
    (folder / "pdfs" / "counting.pdf").unlink()
    with pytest.raises(RenderError, match=r"counting\.pdf page 2: PDF file not found"):
        dataset[index]


def test_repeated_requests_render_each_page_once():
    cache = PageRenderCache()
    dataset = OlmOCRBenchDataset(SAMPLE, render_cache=cache, target_longest_image_dim=256)
    group_size = 8
    for index in (0, 1):
        for _ in range(group_size):
            assert max(dataset[index]["image"].size) == 256
    assert cache.stats.renders == 2 and cache.stats.hits == 2 * group_size - 2


def _collate(items):
    return items


def test_dataloader_workers_render_each_page_once_per_worker():
    dataset = OlmOCRBenchDataset(SAMPLE, render_cache=PageRenderCache(), target_longest_image_dim=128)
    group_size = 4
    order = [index for index in range(4) for _ in range(group_size)]  # TRL's repeat sampler: G in a row
    loader = DataLoader(dataset, batch_size=2 * group_size, sampler=order, num_workers=2, collate_fn=_collate)
    batches = list(loader)
    assert len(batches) == 2
    seen = [item for batch in batches for item in batch]
    assert [item["test_ids"] for item in seen] == [dataset.samples[i]["test_ids"] for i in order]
    assert all(max(item["image"].size) == 128 for item in seen)
    # The parent process rendered nothing: the workers did, each with its own cache.
    assert dataset.render_cache.stats.renders == 0


# Sizes pdftoppm gives at 1288 px (olmOCR's path), measured with poppler 22.12.
SHARED_SIZES = {
    ("blank_book_pg1.pdf", 1): (726, 1288),
    ("lincoln_letter.pdf", 1): (1044, 1288),
    ("mathfuncs.pdf", 1): (1288, 996),
    ("small_page_size.pdf", 1): (773, 1288),
    ("mattsnotes.pdf", 3): (982, 1288),
    ("headers_footers/ff518b1240a66978f22035528ccb029450b5_pg2.pdf", 1): (808, 1288),
}


def test_real_bench_sample_grouping_and_sizes():
    if not SHARED_SAMPLE.is_dir():
        pytest.skip(f"real olmOCR-bench sample absent: {SHARED_SAMPLE} (it lives beside the repo in ../shared)")
    dataset = OlmOCRBenchDataset(SHARED_SAMPLE, render_cache=PageRenderCache(max_bytes=0))
    _check_grouping(dataset, SHARED_SAMPLE)
    assert len(dataset) == 23  # mattsnotes.pdf contributes pages 1, 2 and 3
    seen = set()
    for index, sample in enumerate(dataset.samples):
        key = (Path(sample["pdf_path"]).relative_to(SHARED_SAMPLE / "pdfs").as_posix(), sample["page"])
        image = dataset[index]["image"]
        assert image.mode == "RGB" and max(image.size) == 1288
        if key in SHARED_SIZES:
            assert image.size == SHARED_SIZES[key]
            seen.add(key)
        assert sample["claude_original"] is None  # that folder has no claude_original/
    assert seen == set(SHARED_SIZES)


def test_validation_and_the_dataset_read_the_folder_once(monkeypatch):
    """The training CLI's start-up: the dataset is built from validate_bench_folder's report, so the folder is
    scanned once, every PDF opens once, every reference is parsed once and the summary is validation's."""
    from collections import Counter

    import olmocr_rl.data.references as references_module
    import olmocr_rl.data.render as render_module
    import olmocr_rl.data.summary as summary_module
    import olmocr_rl.data.validation as validation_module
    from olmocr_rl.data.validation import validate_bench_folder

    opened, scans, parsed, summaries = Counter(), [], Counter(), []
    real_open, real_scan = render_module._open_document, validation_module.scan_bench_folder
    real_parse, real_summarize = references_module.parse_page_response, summary_module.summarize
    monkeypatch.setattr(render_module, "_open_document", lambda path: opened.update([Path(path).name]) or real_open(path))
    monkeypatch.setattr(references_module, "parse_page_response", lambda text: parsed.update([text]) or real_parse(text))

    def counting_scan(*args, **kwargs):
        scans.append(args[0])
        return real_scan(*args, **kwargs)

    def counting_summarize(*args, **kwargs):
        summaries.append(args[0])
        return real_summarize(*args, **kwargs)

    monkeypatch.setattr(validation_module, "scan_bench_folder", counting_scan)
    monkeypatch.setattr(validation_module, "summarize", counting_summarize)
    monkeypatch.setattr(dataset_module, "summarize", counting_summarize)
    report = validate_bench_folder(SAMPLE, test_types=["present", "absent"])
    dataset = OlmOCRBenchDataset(SAMPLE, test_types=["present", "absent"], report=report,
                                 render_cache=PageRenderCache())
    assert report.ok and len(dataset) == len(report.scan.pages) > 0
    assert scans == [SAMPLE] and summaries == [str(SAMPLE)]  # one scan, one summary
    assert opened and set(opened.values()) == {1}, opened  # each PDF opened once, by that scan
    assert parsed and set(parsed.values()) == {1}, parsed  # each reference parsed once, by validation
    assert dataset.summary == {**report.summary.as_dict(), "dropped_pages_by_page_filter": 0}
    assert [s["claude_original"] for s in dataset.samples] == [report.references[(s["pdf"], s["page"])]
                                                                for s in dataset.samples]
    fewer = OlmOCRBenchDataset(SAMPLE, test_types=["present", "absent"], report=report, max_samples=1)
    assert fewer.summary["pages"] == 1 and fewer.summary["dropped"]["pages_by_max_samples"] == len(dataset) - 1

    with pytest.raises(ValueError, match=r"report= is of .* \(jsonl_filter=None, test_types=\('present', 'absent'\)\)"):
        OlmOCRBenchDataset(SAMPLE, test_types=["present"], report=report)
    with pytest.raises(ValueError, match="pass the matching report or none"):
        OlmOCRBenchDataset(SAMPLE, jsonl_filter="basic", test_types=["present", "absent"], report=report)


def test_evaluate_reads_the_bench_folder_once(monkeypatch):
    """evaluate's load_bench_pages validates the folder and builds the dataset from that one report."""
    from olmocr_rl import evaluate
    from olmocr_rl.data import validation

    calls = []
    real = validation.scan_bench_folder

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(validation, "scan_bench_folder", counting)
    dataset, selected = evaluate.load_bench_pages(str(SAMPLE), None, None, None)
    assert len(calls) == 1
    assert selected == list(range(len(dataset.samples))) and selected
