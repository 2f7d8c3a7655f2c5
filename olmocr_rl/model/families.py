"""What the package knows about each model family, in one place: the transformers class of a ``model_type``
and the vision placeholder tokens that only the processor may place in a prompt."""

from __future__ import annotations

#: ``model_type`` in config.json -> transformers class name.
MODEL_CLASSES = {
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
}

#: Placeholder tokens of Qwen2-VL-family tokenizers that only the processor may place in a prompt.
VISION_PAD_TOKENS = ("<|image_pad|>", "<|video_pad|>")


def vision_pad_tokens(tokenizer) -> list[str]:
    """The vision placeholder tokens this tokenizer knows (as strings, the form vLLM's ``bad_words`` takes)."""
    found = []
    for token in VISION_PAD_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is not None and token_id != tokenizer.unk_token_id:
            found.append(token)
    return found
