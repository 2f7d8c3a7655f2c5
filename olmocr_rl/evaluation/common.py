"""What every backend and protocol shares: the request a page makes, the completion it gets back, the user-facing
error, the seeds, and where a transcription is written."""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class EvaluateError(ValueError):
    """A problem the user can fix (flag, folder, model path, server); the message is one line naming it."""


@dataclass(frozen=True)
class Sampling:
    """How each page is transcribed: ``num_samples`` sequences, greedy or at ``temperature``."""

    num_samples: int
    do_sample: bool
    temperature: float  # 0.0 when greedy

    def describe(self) -> str:
        how = "greedy" if not self.do_sample else f"sampled at temperature {self.temperature:g}"
        return f"{self.num_samples} transcription(s) per page, {how}"


@dataclass
class Request:
    """One generation call for one page: ``n`` sequences at ``temperature`` (0 = greedy), seeded by ``seed``.

    ``messages`` is the dataset's chat prompt (text part, then one image part); ``image`` the rendered page (already
    rotated where a protocol asked for it).
    """

    key: str
    messages: list
    image: Any
    temperature: float
    max_tokens: int
    seed: int
    n: int = 1
    item: dict = field(default_factory=dict)  # the dataset item the request is for (pdf, page, ...)


@dataclass
class Completion:
    """One generated sequence: its text (special tokens removed, front matter kept), how many tokens it has, why it
    stopped (``stop``: an end token; ``length``: the token cap; ``error``: the request failed, ``text`` says why),
    and the prompt's token count where the backend knows it (0 otherwise)."""

    text: str
    tokens: int
    finish: str
    prompt_tokens: int = 0
    extra: dict = field(default_factory=dict)


def batch_seed(seed: int, first_page: str) -> int:
    """The seed of a batch (or request): from the run's seed and its first page's name, not its position."""
    return (seed * 1_000_003 + zlib.crc32(first_page.encode("utf-8"))) % (2**32)


def output_path(outputs: str | os.PathLike, pdf: str, page: int, repeat: int) -> Path:
    """Where olmOCR-bench looks for transcription ``repeat`` (1-based) of ``pdf`` page ``page``.

    ``pdf`` is relative to the bench's ``pdfs/`` and keeps its sub-folders: ``synth/doc.pdf`` page 1,
    repeat 2 -> ``OUTPUTS/synth/doc_pg1_repeat2.md``.
    """
    if repeat < 1:
        raise ValueError(f"repeat is 1-based, got {repeat}")
    stem = os.path.splitext(pdf)[0]
    return Path(outputs) / f"{stem}_pg{page}_repeat{repeat}.md"


def strip_front_matter(text: str) -> str:
    """The page text olmOCR-bench scores: the completion without its YAML front matter.

    A completion without a parseable front-matter block is kept whole (stripped), as olmOCR treats
    it as page text.
    """
    from olmocr_rl.data.front_matter import split_front_matter

    return split_front_matter(text)[1]
