"""Bench folder -> pages -> prompts: scanning and grouping, rendering, the prompt, front matter, the Dataset.

Modules: `prompts` (the v4 instruction text), `front_matter` (PageResponse and the YAML header of
completions), `render` (pypdfium2 rendering and the page cache), `scan` (JSONL files -> pages, with
every problem collected), `references` (claude_original markdown), `summary` (the counts table),
`dataset` (OlmOCRBenchDataset). The Dataset is imported lazily so that rewards, which only need
`split_front_matter`, do not pay for importing torch here.
"""

from __future__ import annotations

from olmocr_rl.data.front_matter import (
    FrontMatterError,
    PageResponse,
    format_front_matter,
    parse_page_response,
    split_front_matter,
)
from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt
from olmocr_rl.data.render import PageRenderCache, RenderError, default_render_cache, render_page

__all__ = [
    "BenchDataError",
    "FrontMatterError",
    "OlmOCRBenchDataset",
    "PageRenderCache",
    "PageResponse",
    "RenderError",
    "build_no_anchoring_v4_yaml_prompt",
    "default_render_cache",
    "format_front_matter",
    "parse_page_response",
    "render_page",
    "split_front_matter",
]


def __getattr__(name: str):
    if name in ("OlmOCRBenchDataset", "BenchDataError"):
        from olmocr_rl.data import dataset

        return getattr(dataset, name)
    raise AttributeError(f"module 'olmocr_rl.data' has no attribute {name!r}")
