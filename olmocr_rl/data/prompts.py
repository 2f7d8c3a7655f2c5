"""The instruction text given to the model with every page image.

olmOCR 2 checkpoints were fine-tuned on exactly this string (olmOCR's "no anchoring v4 YAML" prompt),
so it must stay byte-for-byte identical, typos included ("LateX"): a different prompt is a different
input distribution for a model that has only ever seen this one.
"""

from __future__ import annotations

_V4_YAML_PROMPT_LINES = (
    "Attached is one page of a document that you must process. "
    "Just return the plain text representation of this document as if you were reading it naturally. "
    "Convert equations to LateX and tables to HTML.",
    "If there are any figures or charts, label them with the following markdown syntax "
    "![Alt text describing the contents of the figure](page_startx_starty_width_height.png)",
    "Return your output as markdown, with a front matter section on top specifying values for the "
    "primary_language, is_rotation_valid, rotation_correction, is_table, and is_diagram parameters.",
)


def build_no_anchoring_v4_yaml_prompt() -> str:
    """The v4 page instruction: three lines joined by "\\n", no trailing newline."""
    return "\n".join(_V4_YAML_PROMPT_LINES)
