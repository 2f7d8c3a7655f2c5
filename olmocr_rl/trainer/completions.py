"""TRL's completions table (``--log_completions``) for page prompts: console, parquet file and W&B.

TRL 1.16 puts each sampled conversation as it is into the table it logs every logging step; a page prompt
(a text part and an image part) is a row W&B tables reject (``Data row contained incompatible types``).
:class:`CompletionsLogMixin` makes the rows loggable without copying TRL's logging code: just before TRL
builds the table it turns the kept conversations into their text (:func:`conversation_text`; an image part
becomes ``<image>``), and it adds a ``page`` column (``data.dataset.page_key``: ``<pdf>:<page>``, as the
``--pages`` filters name it) so that a row says which page
it sampled. The page image is a column only with ``--log_multimodal`` (GRPOConfig's ``log_multimodal``,
whose TRL default is on): only then does TRL gather the page images across ranks, at every generation,
and log each row's as a list of one W&B image. W&B stores a table with media as a run artifact, so in
offline mode the image files wait in W&B's data folder (``WANDB_DATA_DIR``) for ``wandb sync``.

Used by both trainers (``trainer/plain.py``, ``trainer/olmorl.py``).
"""

from __future__ import annotations

from typing import Any

from olmocr_rl.data.dataset import page_key

__all__ = ["CompletionsLogMixin", "conversation_text"]


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


class CompletionsLogMixin:
    """Put before ``trl.GRPOTrainer`` in the bases; see the module docstring. For trl==1.16.0."""

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL gathers the extra columns over processes after the rewards are computed, so the page
        # names logged here line up with the gathered prompts and completions.
        if self.log_completions and inputs and "pdf" in inputs[0] and "page" in inputs[0]:
            self._log_completion_extra("page", [page_key(x["pdf"], x["page"]) for x in inputs])
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.log_completions and self.accelerator.is_main_process:
            for key in ("prompt", "completion"):
                kept = self._logs[key]  # a bounded deque TRL keeps extending; converted in place
                texts = [conversation_text(entry) for entry in kept]
                kept.clear()
                kept.extend(texts)
        super().log(logs, start_time)
