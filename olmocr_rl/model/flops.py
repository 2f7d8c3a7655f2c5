"""Model FLOPs of a GRPO training step, from the real token, image-token and vision-patch counts.

``6 · N · tokens`` undercounts a vision-language step: the vision tower runs on its patches (4x the
image tokens after the 2 x 2 merge), and attention grows with the square of the sequence length. Here
each sampled sequence (prompt of P tokens, I of them image tokens, and a completion of C tokens) costs,
in the forward pass (a multiply-add is 2 FLOPs):

    language model   2 · N_body · (P + C)  +  2 · N_head · C          (TRL computes logits for the completion only)
    vision tower     2 · N_vision · patches  +  2 · N_merger · I      (patches = I · merge²)
    LM attention     layers · 4 · width · (P + C)(P + C + 1) / 2       (causal: Q·K and A·V over the past)
    vision attention full layers · 4 · width_v · patches²  +  windowed layers · 4 · width_v · patches · window

with N_body counting, for a mixture of experts, only the ``top_k`` experts each token is routed to
(Qwen3-VL-30B-A3B: 8 of 128), and N_merger the patch merger plus Qwen3-VL's deepstack mergers.

Training is the forward plus the backward, and the backward of a part is one forward's worth for the gradient
of its input (needed when anything before it trains) plus one for the gradient of its weights (when they
train): 3x the forward when everything trains. What does not train is not counted as if it did
(:class:`Trained`): a frozen vision tower (``--freeze_vision_tower``) costs its forward only, its merger 2x
(the merger's weight gradient) or 1x frozen too; with LoRA (``--use_peft``) the language model's base weights
are frozen, so its layers and head cost 2x (the gradient flows through them to the adapters) and the vision
tower, which PEFT freezes, 1x; attention has no weights and costs 3x wherever a gradient flows. The adapters'
own matmuls (r x (in + out) per adapted matrix and token, ~1-3 % of it at r 16) are not counted.
Recomputation under gradient checkpointing and the extra forward for old log-probs are not counted either:
this is the useful work, as MFU counts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class ArchFlops:
    """The architecture numbers the FLOP count needs."""

    lm_body_params: int  # language-model parameters applied to every token (layers, norms, the experts a token
    #                      is routed to; no embedding, no head)
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
        """Count parameters on the meta device (no memory, no weights); layers, widths and experts come from
        :mod:`olmocr_rl.model.families`.

        A mixture of experts counts the experts a token is routed to, not all of them: of each sparse layer's
        expert weights, ``top_k / num_experts`` (the router itself runs for every token and is counted whole).
        The vision tower's learned position table is a lookup, not a matmul, and is left out.
        """
        import torch

        from olmocr_rl.model.families import experts, family, head_dim, vision_layout, vision_merger_modules
        from olmocr_rl.model.loading import meta_model

        model = meta_model(config)
        count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
        language_model = model.model.language_model
        visual = model.model.visual
        text, layout = config.get_text_config(), vision_layout(config)
        body = count(language_model) - count(language_model.embed_tokens)
        moe = experts(config)
        if moe is not None:
            expert_class = family(config).experts_class
            stacked = sum(count(m) for m in language_model.modules() if type(m).__name__ == expert_class)
            body -= round(stacked * (1 - moe.top_k / moe.num_experts))
        # the patch merger and, with deepstack, one merger per deepstack layer: each applied once per image token
        mergers = [getattr(visual, name) for name in vision_merger_modules(config)]
        lookups = sum(count(m) for m in visual.modules() if isinstance(m, torch.nn.Embedding))
        return cls(
            lm_body_params=body,
            lm_head_params=text.vocab_size * text.hidden_size,
            lm_layers=text.num_hidden_layers,
            lm_attention_width=text.num_attention_heads * head_dim(text),
            vision_params=count(visual) - sum(count(m) for m in mergers) - lookups,
            merger_params=sum(count(m) for m in mergers),
            vision_full_layers=len(layout.full_attention_layers),
            vision_windowed_layers=len(layout.windowed_layers),
            vision_attention_width=layout.width,
            window_patches=layout.window_patches,
            spatial_merge=layout.merge_size,
        )


@dataclass(frozen=True)
class Trained:
    """Which parts of the model have weights that train (default: all, a full fine-tune)."""

    vision_tower: bool = True
    vision_merger: bool = True
    language_model: bool = True  # the base weights of the layers (False under LoRA: only the adapters train)
    lm_head: bool = True

    def multipliers(self) -> dict[str, int]:
        """Forward + backward, in forwards, of each part of :func:`forward_parts`."""
        tower = 1 + 2 * self.vision_tower  # nothing before the tower: no input gradient
        return {"lm_body": 2 + self.language_model, "lm_head": 2 + self.lm_head, "lm_attention": 3,
                "vision_tower": tower, "vision_attention": tower,
                "vision_merger": 1 + self.vision_tower + self.vision_merger}


def forward_parts(arch: ArchFlops, prompt_tokens: int, image_tokens: int, completion_tokens: int) -> dict[str, float]:
    """Forward FLOPs of one sequence by part: ``lm_body``, ``lm_head``, ``lm_attention``, ``vision_tower``,
    ``vision_merger``, ``vision_attention``."""
    length = prompt_tokens + completion_tokens
    patches = image_tokens * arch.spatial_merge**2
    window = min(arch.window_patches, patches) if arch.window_patches else patches
    return {
        "lm_body": float(2 * arch.lm_body_params * length),
        "lm_head": float(2 * arch.lm_head_params * completion_tokens),
        "lm_attention": arch.lm_layers * 4 * arch.lm_attention_width * length * (length + 1) / 2,
        "vision_tower": float(2 * arch.vision_params * patches),
        "vision_merger": float(2 * arch.merger_params * image_tokens),
        "vision_attention": float(arch.vision_attention_width * 4 * (
            arch.vision_full_layers * patches * patches + arch.vision_windowed_layers * patches * window)),
    }


def forward_flops(arch: ArchFlops, prompt_tokens: int, image_tokens: int, completion_tokens: int) -> dict[str, float]:
    """Forward FLOPs of one sequence, by part: ``language_model``, ``vision``, ``attention``."""
    p = forward_parts(arch, prompt_tokens, image_tokens, completion_tokens)
    return {"language_model": p["lm_body"] + p["lm_head"], "vision": p["vision_tower"] + p["vision_merger"],
            "attention": p["lm_attention"] + p["vision_attention"]}


def training_flops(arch: ArchFlops, sequences: Sequence[tuple[int, int, int]], trained: Trained = Trained(), *,
                   vision: bool = True) -> float:
    """Forward + backward FLOPs of training on ``(prompt, image, completion)`` token counts (3x the forward when
    everything trains; less what ``trained`` says is frozen). ``vision=False``: the language model's parts only
    (the run counts its vision tower where it runs: ``olmocr_rl.telemetry.vision_flops``)."""
    weights = trained.multipliers()
    return float(sum(weights[part] * flops for shape in sequences
                     for part, flops in forward_parts(arch, *shape).items() if vision or not part.startswith("vision_")))


def trained_parts(model) -> Trained:
    """What trains in ``model`` (a transformers model, or a PEFT model around one), read from ``requires_grad``;
    a model whose parts cannot be found counts as trained in full."""
    from olmocr_rl.model.families import vision_merger_modules

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        visual, language_model, head = base.model.visual, base.model.language_model, base.lm_head
        mergers = [getattr(visual, name) for name in vision_merger_modules(base.config)]
    except (AttributeError, ValueError):  # ValueError: a family the table does not know
        return Trained()
    merger_ids = {id(p) for m in mergers for p in m.parameters()}
    return Trained(
        vision_tower=any(p.requires_grad for p in visual.parameters() if id(p) not in merger_ids),
        vision_merger=any(p.requires_grad for m in mergers for p in m.parameters()),
        language_model=any(p.requires_grad for n, p in language_model.named_parameters() if "lora_" not in n),
        lm_head=any(p.requires_grad for p in head.parameters()),
    )
