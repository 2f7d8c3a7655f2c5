"""OlmOCRBenchDataset: an olmOCR-bench folder as GRPO prompts, one item per (pdf, page).

    from olmocr_rl.data import OlmOCRBenchDataset
    dataset = OlmOCRBenchDataset("bench_data_sample")
    print(dataset.describe())
    item = dataset[0]   # prompt, image, pdf, pdf_path, page, jsonl_file, jsonl_files, test_ids, claude_original

Follows olmOCR's dataset (docs/data.md) with these deliberate differences: a page gets the tests of
every JSONL file that names it (`jsonl_files`), bad data stops construction with every problem
listed instead of being skipped with a warning, pages are ordered by (pdf, page number) rather than
by the string "pdf::page", and `__getitem__` raises instead of returning None.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from torch.utils.data import Dataset

from olmocr_rl.data.page_names import list_pages_command, page_key, page_names_hint
from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt
from olmocr_rl.data.render import DEFAULT_TARGET_LONGEST_IMAGE_DIM, PageRenderCache, default_render_cache
from olmocr_rl.data.scan import BenchProblem
from olmocr_rl.data.summary import summarize
from olmocr_rl.data.validation import BenchReport, validate_bench_folder

_MAX_PROBLEMS_SHOWN = 20


class BenchDataError(ValueError):
    """A bench folder that cannot be used; `problems` lists everything found wrong."""

    def __init__(self, folder: str, problems: Sequence[BenchProblem]) -> None:
        self.folder = str(folder)
        self.problems = list(problems)
        shown = "\n".join(f"  {problem}" for problem in self.problems[:_MAX_PROBLEMS_SHOWN])
        more = len(self.problems) - _MAX_PROBLEMS_SHOWN
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"bench folder {folder} has {len(self.problems)} problem(s):\n{shown}{tail}\n"
            f"(python -m olmocr_rl.validate_bench {folder} lists them all)"
        )


class PageFilterError(BenchDataError):
    """The page filters (``pages``, ``exclude_pages``) leave no page of the folder. ``keys``: the folder's page names
    (after the JSONL and test-type filters); :meth:`explain` says where each filter came from and how to clear it."""

    def __init__(self, folder: str, keys: Sequence[str], pages: str | None, exclude_pages: str | None,
                 command: str) -> None:
        self.keys, self.pages, self.exclude_pages, self.command = list(keys), pages, exclude_pages, command
        self.folder = str(folder)
        self.problems = [BenchProblem(self.folder, None, None, self.explain())]
        ValueError.__init__(self, self.explain())

    def explain(self, sources: Mapping[str, str] | None = None) -> str:
        """One line: the filters, each with where it was set (``sources[name]``: ``"command line"`` or the path of the
        ``--config`` file that set it), the folder's real page names, and how to clear each filter."""
        sources = sources or {}
        given = [(name, value) for name, value in (("pages", self.pages), ("exclude_pages", self.exclude_pages))
                 if value]  # '' keeps every page
        shown, clear = [], []
        for name, value in given:
            source = sources.get(name)
            if source is None or source == "command line":
                shown.append(f"--{name} {value!r}" + (" (on the command line)" if source else ""))
                clear.append(f"pass --{name} ''")
            else:
                shown.append(f"--{name} {value!r} (the `{name}:` line of {source})")
                clear.append(f"delete the `{name}:` line of {source} or pass --{name} '' (the command line wins over "
                             "the file)")
        return (f"{' with '.join(shown)} leave{'s' if len(given) == 1 else ''} no page of {self.folder}: "
                f"{page_names_hint(self.keys, self.command)}; pass a regex that matches some of them, or, to train "
                f"on every page, {' and '.join(clear)}")


def select_pages(keys: Sequence[str], pages=None, exclude_pages=None) -> list[int]:
    """Indices of ``keys`` (see :func:`page_key`) kept by the filters, in order.

    A page is kept when ``pages`` (a compiled regex or None) searches into its name and
    ``exclude_pages`` does not. Pure; an empty result is the caller's to report.
    """
    return [
        i
        for i, key in enumerate(keys)
        if (pages is None or pages.search(key)) and (exclude_pages is None or not exclude_pages.search(key))
    ]


def _report_of(folder, jsonl_filter: str | None, test_types: Sequence[str] | None,
               report: BenchReport | None) -> BenchReport:
    """``report`` when it is of ``folder`` with these filters (ValueError when it is not), else a new validation."""
    types = list(test_types) if test_types is not None else None
    if report is None:
        return validate_bench_folder(folder, jsonl_filter, types)
    scan = report.scan
    if not scan.made_with(folder, jsonl_filter, types):
        raise ValueError(
            f"report= is of {scan.folder} (jsonl_filter={scan.jsonl_filter!r}, test_types={scan.test_types!r}), not "
            f"of {folder} (jsonl_filter={jsonl_filter!r}, test_types={types!r}); pass the matching report or none"
        )
    return report


class OlmOCRBenchDataset(Dataset):
    """Pages of an olmOCR-bench folder (`*.jsonl` + `pdfs/`, optional `claude_original/`) as prompts.

    One sample per distinct (pdf, page), carrying the ids of all its tests from every JSONL file,
    sorted by (pdf, page); `max_samples` keeps the first N after sorting. `jsonl_filter` is a regex
    searched (case-insensitively) in JSONL file names; `test_types` keeps only tests of those types
    (`--bench_type_filter`) and drops pages left with none. `pages` / `exclude_pages` are regexes
    searched in page names (`page_key`: "counting.pdf:2") to keep or drop pages (held-out splits). `processor` is kept for olmOCR
    compatibility and not used: TRL applies it. Pages are rendered on access through
    `render_cache` (default: the process-wide cache), so the G requests TRL makes for one page in a
    step render it once.

    Construction validates the folder (`data.validation.validate_bench_folder`: the scan opens every PDF
    once, every test's fields are checked, the references are read); any problem raises BenchDataError
    listing all of them (an invalid reference names its file); page filters that leave no page raise PageFilterError (a
    BenchDataError naming the folder's real page names). `report`: that validation already made for
    this folder and these filters (the training CLI and evaluate pass theirs), used as it is: nothing is read,
    opened, parsed or counted again (the summary is the report's when no page is left out); a report of
    another folder or other filters is a ValueError. Items are dicts:

    - prompt: [{"role": "user", "content": [{"type": "text", "text": PROMPT}, {"type": "image"}]}]
    - image: PIL RGB image, longest side `target_longest_image_dim`
    - pdf (str, below pdfs/; ``page_key(pdf, page)`` is the page's name), pdf_path (str), page (int, 1-based)
    - jsonl_file (str): the first JSONL naming this page (olmOCR's field); jsonl_files: all, sorted
    - test_ids (list[str]); claude_original (str | None): the reference markdown, front matter included
    """

    def __init__(
        self,
        bench_data_folder: str | os.PathLike,
        processor=None,
        max_samples: int | None = None,
        target_longest_image_dim: int = DEFAULT_TARGET_LONGEST_IMAGE_DIM,
        jsonl_filter: str | None = None,
        test_types: Sequence[str] | None = None,
        *,
        render_cache: PageRenderCache | None = None,
        pages: str | None = None,
        exclude_pages: str | None = None,
        report: BenchReport | None = None,
    ) -> None:
        if max_samples is not None and (isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1):
            raise ValueError(f"max_samples must be a positive integer or None, got {max_samples!r}")
        if isinstance(target_longest_image_dim, bool) or not isinstance(target_longest_image_dim, int) or target_longest_image_dim < 1:
            raise ValueError(f"target_longest_image_dim must be a positive integer, got {target_longest_image_dim!r}")
        self.bench_data_folder = str(bench_data_folder)
        self.processor = processor
        self.target_longest_image_dim = target_longest_image_dim
        self.render_cache = render_cache if render_cache is not None else default_render_cache()
        self.prompt_text = build_no_anchoring_v4_yaml_prompt()

        report = _report_of(bench_data_folder, jsonl_filter, test_types, report)
        if report.problems:
            raise BenchDataError(self.bench_data_folder, report.problems)
        scan = report.scan
        selected = scan.pages
        if pages is not None or exclude_pages is not None:
            include = re.compile(pages) if pages is not None else None
            exclude = re.compile(exclude_pages) if exclude_pages is not None else None
            keep = select_pages([page_key(p.pdf, p.page) for p in scan.pages], include, exclude)
            selected = [scan.pages[i] for i in keep]
            if not selected:
                raise PageFilterError(self.bench_data_folder, [page_key(p.pdf, p.page) for p in scan.pages], pages,
                                      exclude_pages, list_pages_command(bench_data_folder, jsonl_filter, test_types))
        dropped_by_page_filter = len(scan.pages) - len(selected)
        pages = selected[:max_samples] if max_samples is not None else selected
        self.samples: list[dict] = [
            {
                "pdf": page.pdf,
                "pdf_path": page.pdf_path,
                "page": page.page,
                "jsonl_file": page.jsonl_file,
                "jsonl_files": page.jsonl_files,
                "test_ids": page.test_ids,
                "claude_original": report.references[(page.pdf, page.page)],  # read and checked by validation
            }
            for page in pages
        ]
        self._summary = report.summary
        if len(pages) < len(scan.pages):  # the filters left pages out: count the pages kept
            self._summary = summarize(
                self.bench_data_folder,
                pages,
                scan.jsonl_files,
                pages_with_reference=sum(sample["claude_original"] is not None for sample in self.samples),
                dropped_tests_by_type=scan.dropped_tests_by_type,
                dropped_pages_by_type=scan.dropped_pages_by_type,
                dropped_pages_by_max_samples=len(selected) - len(pages),
            )
        self.summary: dict = self._summary.as_dict()
        self.summary["dropped_pages_by_page_filter"] = dropped_by_page_filter

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict:
        """The sample at `index`; RenderError (naming the PDF and page) if its page cannot be rendered."""
        sample = self.samples[index]
        image = self.render_cache.get(sample["pdf_path"], sample["page"], self.target_longest_image_dim)
        return {
            "prompt": [
                {"role": "user", "content": [{"type": "text", "text": self.prompt_text}, {"type": "image"}]}
            ],
            "image": image,
            "pdf": sample["pdf"],
            "pdf_path": sample["pdf_path"],
            "page": sample["page"],
            "jsonl_file": sample["jsonl_file"],
            "jsonl_files": list(sample["jsonl_files"]),
            "test_ids": list(sample["test_ids"]),
            "claude_original": sample["claude_original"],
        }

    def to_trl_dataset(self):
        """This dataset as a ``datasets.Dataset`` (TRL 1.16's GRPOTrainer accepts no other map-style type).

        Only the row index is stored in Arrow; a transform builds each item on access through
        ``__getitem__``, so pages are rendered lazily and through the same page cache.
        """
        from datasets import Dataset

        def build_items(batch: dict) -> dict:
            items = [self[int(i)] for i in batch["index"]]
            return {key: [item[key] for item in items] for key in items[0]}

        return Dataset.from_dict({"index": list(range(len(self)))}).with_transform(build_items)

    def describe(self) -> str:
        """A table of pages, tests by type, JSONL files and what the filters left out."""
        return self._summary.table()
