"""What a bench folder amounts to: pages, tests by type, JSONL files, what filters left out.

Shared by the dataset (`dataset.summary`, `dataset.describe()`) and the validator's report, so both
print the same table.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from olmocr_rl.bench import test_types
from olmocr_rl.data.scan import BenchPage


@dataclass(frozen=True)
class BenchSummary:
    """Counts for a set of bench pages. `pages_with_reference` is None when references were not looked up."""

    folder: str
    pages: int
    tests_by_type: dict[str, int]
    pages_by_type: dict[str, int]
    tests_by_jsonl: dict[str, int]  # JSONL file name -> tests kept from it
    pages_with_reference: int | None = None
    dropped_tests_by_type: dict[str, int] = field(default_factory=dict)  # by --bench_type_filter
    dropped_pages_by_type: int = 0  # pages with no test left after --bench_type_filter
    dropped_pages_by_max_samples: int = 0

    @property
    def tests(self) -> int:
        return sum(self.tests_by_type.values())

    def as_dict(self) -> dict:
        """Plain-data form: pages, tests, tests_by_type, pages_by_type, jsonl_files, dropped, ..."""
        return {
            "folder": self.folder,
            "pages": self.pages,
            "tests": self.tests,
            "tests_by_type": dict(self.tests_by_type),
            "pages_by_type": dict(self.pages_by_type),
            "jsonl_files": dict(self.tests_by_jsonl),
            "pages_with_reference": self.pages_with_reference,
            "dropped": {
                "tests_by_type_filter": dict(self.dropped_tests_by_type),
                "pages_by_type_filter": self.dropped_pages_by_type,
                "pages_by_max_samples": self.dropped_pages_by_max_samples,
            },
        }

    def table(self) -> str:
        """A human-readable multi-line table of the counts."""
        pages_line = f"pages        {self.pages}"
        if self.pages_with_reference is not None:
            pages_line += f"  ({self.pages_with_reference} with a claude_original reference)"
        lines = [f"bench folder {self.folder}", pages_line, f"JSONL files  {len(self.tests_by_jsonl)}"]
        width = max([len(name) for name in self.tests_by_jsonl] + [10])
        lines += [f"  {name:<{width}}  {count:>6} tests" for name, count in self.tests_by_jsonl.items()]
        lines.append(f"  {'test type':<10}  {'tests':>6}  {'pages':>6}")
        for test_type, count in self.tests_by_type.items():
            lines.append(f"  {test_type:<10}  {count:>6}  {self.pages_by_type[test_type]:>6}")
        lines.append(f"  {'total':<10}  {self.tests:>6}  {self.pages:>6}")
        if self.dropped_tests_by_type or self.dropped_pages_by_type:
            detail = ", ".join(f"{name} {count}" for name, count in self.dropped_tests_by_type.items())
            lines.append(
                f"left out by --bench_type_filter: {sum(self.dropped_tests_by_type.values())} tests ({detail}), "
                f"{self.dropped_pages_by_type} pages with no test left"
            )
        if self.dropped_pages_by_max_samples:
            lines.append(f"left out by max_samples: {self.dropped_pages_by_max_samples} pages")
        return "\n".join(lines)


def _in_type_order(counts: Counter) -> dict[str, int]:
    order = {name: index for index, name in enumerate(test_types())}
    return {name: counts[name] for name in sorted(counts, key=lambda name: (order.get(name, len(order)), name))}


def summarize(
    folder: str,
    pages: list[BenchPage],
    jsonl_files: list[str],
    *,
    pages_with_reference: int | None = None,
    dropped_tests_by_type: Counter | None = None,
    dropped_pages_by_type: int = 0,
    dropped_pages_by_max_samples: int = 0,
) -> BenchSummary:
    """Count the tests of `pages` by type and by JSONL file (every file in `jsonl_files` listed)."""
    tests_by_type: Counter = Counter()
    pages_by_type: Counter = Counter()
    tests_by_jsonl: Counter = Counter({os.path.basename(path): 0 for path in jsonl_files})
    for page in pages:
        types = Counter(test.type for test in page.tests)
        tests_by_type.update(types)
        pages_by_type.update(types.keys())
        tests_by_jsonl.update(os.path.basename(test.jsonl_file) for test in page.tests)
    return BenchSummary(
        folder=folder,
        pages=len(pages),
        tests_by_type=_in_type_order(tests_by_type),
        pages_by_type=_in_type_order(pages_by_type),
        tests_by_jsonl=dict(sorted(tests_by_jsonl.items())),
        pages_with_reference=pages_with_reference,
        dropped_tests_by_type=_in_type_order(dropped_tests_by_type or Counter()),
        dropped_pages_by_type=dropped_pages_by_type,
        dropped_pages_by_max_samples=dropped_pages_by_max_samples,
    )
