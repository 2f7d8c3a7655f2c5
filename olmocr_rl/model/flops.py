"""Model FLOPs of a GRPO training step, from the real token, image-token and vision-patch counts.

``6 · N · tokens`` undercounts a vision-language step: the vision tower runs on its patches (4x the
image tokens after the 2 x 2 merge), and attention grows with the square of the sequence length. Here
each sampled sequence (prompt of P tokens, I of them image tokens, and a completion of C tokens) costs,
in the forward pass (a multiply-add is 2 FLOPs):

    language model   2 · N_body · (P + C)  +  2 · N_head · C          (TRL computes logits for the completion only)
    vision tower     2 · N_vision · patches  +  2 · N_merger · I      (patches = I · merge²)
    LM attention     layers · 4 · width · (P + C)(P + C + 1) / 2       (causal: Q·K and A·V over the past)
    vision attention full layers · 4 · width_v · patches²  +  windowed layers · 4 · width_v · patches · window

and training (forward + backward) is 3x the forward. Recomputation under gradient checkpointing and
the extra forward for old log-probs are not counted: this is the useful work, as MFU counts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class ArchFlops:
    """The architecture numbers the FLOP count needs."""

    lm_body_params: int  # language-model parameters applied to every token (layers, norms; no embedding, no head)
    lm_head_params: int  # vocabulary x hidden size (a matmul even when tied to the embedding)
    lm_layers: int
    lm_attention_width: int  # query heads x head size
    vision_params: int  # vision tower without its patch merger
    merger_params: int  # the patch merger, applied once per image token
    vision_full_layers: int
    vision_windowed_layers: int
    vision_attention_width: int
    window_patches: int  # patches in one attention window of a windowed layer
    spatial_merge: int  # patches merged per image token along each side

    @classmethod
    def from_config(cls, config) -> "ArchFlops":
        """Count parameters on the meta device (no memory, no weights) for a Qwen2-VL-family config."""
        from olmocr_rl.model.loading import head_dim, meta_model

        model = meta_model(config)
        count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
        language_model = model.model.language_model
        visual = model.model.visual
        text, vision = config.get_text_config(), config.vision_config
        depth = vision.depth
        full = list(getattr(vision, "fullatt_block_indexes", None) or range(depth))  # Qwen2-VL: all full
        window = getattr(vision, "window_size", None)
        return cls(
            lm_body_params=count(language_model) - count(language_model.embed_tokens),
            lm_head_params=text.vocab_size * text.hidden_size,
            lm_layers=text.num_hidden_layers,
            lm_attention_width=text.num_attention_heads * head_dim(text),
            vision_params=count(visual) - count(visual.merger),
            merger_params=count(visual.merger),
            vision_full_layers=len(full),
            vision_windowed_layers=depth - len(full),
            vision_attention_width=vision.hidden_size,
            window_patches=(window // vision.patch_size) ** 2 if window else 0,
            spatial_merge=vision.spatial_merge_size,
        )


def forward_flops(arch: ArchFlops, prompt_tokens: int, image_tokens: int, completion_tokens: int) -> dict[str, float]:
    """Forward FLOPs of one sequence, by part: ``language_model``, ``vision``, ``attention``."""
    length = prompt_tokens + completion_tokens
    patches = image_tokens * arch.spatial_merge**2
    language_model = 2 * arch.lm_body_params * length + 2 * arch.lm_head_params * completion_tokens
    vision = 2 * arch.vision_params * patches + 2 * arch.merger_params * image_tokens
    lm_attention = arch.lm_layers * 4 * arch.lm_attention_width * length * (length + 1) / 2
    window = min(arch.window_patches, patches) if arch.window_patches else patches
    vision_attention = arch.vision_attention_width * 4 * (
        arch.vision_full_layers * patches * patches + arch.vision_windowed_layers * patches * window
    )
    return {"language_model": float(language_model), "vision": float(vision),
            "attention": float(lm_attention + vision_attention)}


def training_flops(arch: ArchFlops, sequences: Sequence[tuple[int, int, int]]) -> float:
    """Forward + backward FLOPs (3x forward) of training on ``(prompt, image, completion)`` token counts."""
    return 3 * sum(sum(forward_flops(arch, *shape).values()) for shape in sequences)
