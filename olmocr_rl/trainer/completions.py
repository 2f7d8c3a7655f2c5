"""TRL's completions table (``--log_completions``) for page prompts: console, parquet file and W&B.

TRL 1.16 puts each sampled conversation as it is into the table it logs every logging step; a page prompt
(a text part and an image part) is a row W&B tables reject (``Data row contained incompatible types``).
:func:`log_page_column` and :func:`table_as_text` (called by ``trainer/plain.py``) make the rows loggable
without copying TRL's logging code: just before TRL builds the table the trainer turns the kept
conversations into their text (:func:`conversation_text`; an image part becomes ``<image>``), and it adds a ``page`` column (``data.dataset.page_key``: ``<pdf>:<page>``, as the
``--pages`` filters name it) so that a row says which page
it sampled. The page image is a column only with ``--log_multimodal`` (GRPOConfig's ``log_multimodal``,
whose TRL default is on): only then does TRL gather the page images across ranks, at every generation,
and log each row's as a list of one W&B image. W&B stores a table with media as a run artifact, so in
offline mode the image files wait in W&B's data folder (``WANDB_DATA_DIR``) for ``wandb sync``.
"""

from __future__ import annotations

from typing import Any

from olmocr_rl.data.dataset import page_key

__all__ = ["conversation_text", "log_page_column", "table_as_text"]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                parts.append(f"<{block.get('type', 'part')}>")  # an image (or other media) part
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return "" if content is None else str(content)


def conversation_text(entry: Any) -> str:
    """A prompt or completion as one string: a conversation's message texts, a string as it is.

    A single message gives its text; several give ``role: text`` blocks separated by blank lines.
    Image parts become ``<image>``.
    """
    if isinstance(entry, str):
        return entry
    if isinstance(entry, list) and all(isinstance(message, dict) for message in entry):
        texts = [(str(m.get("role", "")), _content_text(m.get("content"))) for m in entry]
        if len(texts) == 1:
            return texts[0][1]
        return "\n\n".join(f"{role}: {text}" for role, text in texts)
    return str(entry)


def log_page_column(trainer, inputs) -> None:
    """Before TRL's ``_calculate_rewards``: the table's ``page`` column for this generation batch's rows.

    TRL gathers the extra columns over processes after the rewards are computed, so the page names logged here
    line up with the gathered prompts and completions."""
    if trainer.log_completions and inputs and "pdf" in inputs[0] and "page" in inputs[0]:
        trainer._log_completion_extra("page", [page_key(x["pdf"], x["page"]) for x in inputs])


def table_as_text(trainer) -> None:
    """Before TRL's ``log``: the kept conversations of the table turned into their text, in place."""
    if trainer.log_completions and trainer.accelerator.is_main_process:
        for key in ("prompt", "completion"):
            kept = trainer._logs[key]  # a bounded deque TRL keeps extending; converted in place
            texts = [conversation_text(entry) for entry in kept]
            kept.clear()
            kept.extend(texts)
