"""Padding-free training forward (``--padding_free``): the real tokens of a micro-batch packed into one row.

TRL 1.16 scores a micro-batch as a (rows, prompt + completion) block: prompts left-padded, completions
right-padded to the longest completion of the whole generation batch. OCR completions range from a
few hundred to thousands of tokens, so most of that block can be padding, and every padded position
still goes through every layer (``timing/padding_fraction`` logs the share; ``olmocr_rl.telemetry.timing``).

With ``padding_free=True`` the trainer (``trainer/plain.py``) replaces the model TRL calls in
``_get_per_token_logps_and_entropies`` (the one place its forwards are made) with :class:`PackedForward`, which

1. computes the model's own position ids for the padded block, exactly as the stock forward would
   (Qwen2.5-VL's and Qwen3-VL's M-RoPE ``compute_3d_position_ids``, from the block's attention mask and image grids);
2. keeps only the real tokens, row after row, as one row of T tokens, with their position ids and
   labels; a fourth position row restarting at 0 for each sequence marks where sequences begin;
3. runs the model with no padding mask (Qwen3-VL's text model builds a mask whatever it gets: inside
   :func:`packed_call` the mask function of the pack-aware attention builds none), attention kept inside each
   sequence: flash attention (Qwen2-VL, Qwen2.5-VL) reads
   the sequence starts from the position ids (its variable-length path); SDPA runs through
   :func:`packed_sdpa_attention`, one causal ``scaled_dot_product_attention`` per sequence (sequences of
   equal length batched), so packing costs no attention across sequences;
4. scatters the per-token log-probs and entropies back into TRL's (rows, completion) layout, with the
   zeros the stock path leaves at padded and prompt positions.

The vision tower is unchanged (it sees the same pixels and image grids). Labels across a sequence
boundary are prompt tokens (-100), so no token is scored against another sequence. The result equals
the padded forward up to float rounding (tests/unit/test_padding_free.py: log-probs, entropies and
gradients of the tiny Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE in fp32). Where packing cannot be exact (another model
family, eager or flex attention, inputs other than page images, a MoE's router logits) the stock padded forward
runs, logged once.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "PACKED_SDPA",
    "PackedForward",
    "install_padding_free",
    "no_mask",
    "packed_call",
    "packed_sdpa_attention",
    "padding_free_problem",
]

#: The attention implementation name registered for the text model when packing runs on SDPA.
PACKED_SDPA = "olmocr_rl_packed_sdpa"
#: The forward keyword that carries the packed sequences' lengths down to the attention function.
SEGMENTS = "olmocr_rl_segments"
#: The forward keyword that carries a shared-prefix layout (trainer/shared_prefix.py) down to the attention function.
SHARED_PREFIX = "olmocr_rl_shared_prefix"
#: Model families whose position ids PackedForward reproduces (their ``compute_3d_position_ids``).
PACKABLE_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe")
#: Families whose text model takes a per-layer-type mask mapping, and so builds no mask from a dict of Nones;
#: Qwen3-VL's builds its mask whatever it is given, so a packed forward passes None and the mask function of
#: PACKED_SDPA builds nothing (:func:`packed_call`). Flash attention packing is checked on these only.
_MASK_MAPPING_TYPES = ("qwen2_5_vl", "qwen2_vl")
_FLASH = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
#: Forward inputs PackedForward knows how to pack (TRL passes the others only for other families).
_PACKABLE_INPUTS = {"input_ids", "attention_mask", "labels", "fused_lm_head", "pixel_values", "image_grid_thw",
                    "mm_token_type_ids", "output_router_logits"}


def _unwrapped(model):
    """The transformers model under DDP/FSDP/DeepSpeed and PEFT wrappers. The class is asked, not the object:
    DeepSpeed's engine forwards unknown attributes to its module, so it "has" get_output_embeddings too."""
    while hasattr(model, "module") and not hasattr(type(model), "get_output_embeddings"):
        model = model.module
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


def _inner(model):
    """The multimodal backbone holding ``compute_3d_position_ids`` and the language model, or None."""
    inner = getattr(_unwrapped(model), "model", None)
    if inner is None or not hasattr(inner, "compute_3d_position_ids") or not hasattr(inner, "language_model"):
        return None
    return inner


def padding_free_problem(model) -> str | None:
    """Why packing cannot be exact for ``model`` (None: it can)."""
    base = _unwrapped(model)
    model_type = getattr(base.config, "model_type", None)
    if model_type not in PACKABLE_MODEL_TYPES or _inner(model) is None:
        return f"model type {model_type!r} (packing reproduces the position ids of {', '.join(PACKABLE_MODEL_TYPES)})"
    implementation = base.config.get_text_config()._attn_implementation
    if implementation not in ("sdpa", PACKED_SDPA) + _FLASH:
        return f"attention implementation {implementation!r} (packing needs sdpa or flash attention)"
    if implementation in _FLASH and model_type not in _MASK_MAPPING_TYPES:
        return f"attention implementation {implementation!r} for {model_type!r} (packing runs on sdpa there)"
    return None


_IN_PACKED_CALL = contextvars.ContextVar("olmocr_rl_packed_call", default=False)


@contextlib.contextmanager
def packed_call():
    """Around a packed forward: the text model builds no attention mask (the pack-aware attention keeps the
    sequences, or the shared-prefix layout, apart itself)."""
    token = _IN_PACKED_CALL.set(True)
    try:
        yield
    finally:
        _IN_PACKED_CALL.reset(token)


def _packed_sdpa_mask(*args, **kwargs):
    """PACKED_SDPA's mask function: SDPA's own, and none inside :func:`packed_call`."""
    if _IN_PACKED_CALL.get():
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **kwargs)


def no_mask(model):
    """The ``attention_mask`` of a packed forward of ``model``: a mapping of Nones where the text model takes one,
    else None (with :func:`packed_call` around the forward)."""
    base = _unwrapped(model)
    if base.config.model_type not in _MASK_MAPPING_TYPES:
        return None
    layer_types = getattr(base.config.get_text_config(), "layer_types", None) or ["full_attention"]
    return {layer_type: None for layer_type in set(layer_types)}


def packed_sdpa_attention(module, query, key, value, attention_mask, **kwargs):
    """SDPA that keeps attention inside each packed sequence when the forward carries their lengths.

    query/key/value: (1, heads, T, head_dim) with ``olmocr_rl_segments`` = the sequence lengths (sum T), with
    ``olmocr_rl_shared_prefix`` = a shared-prefix layout (trainer/shared_prefix.py), or any ordinary call (generation, a padded forward), which goes to transformers' SDPA unchanged.
    Returns (1, T, heads, head_dim) like transformers' attention functions.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    layout = kwargs.pop(SHARED_PREFIX, None)
    if layout is not None and attention_mask is None and query.shape[0] == 1 and query.shape[2] == key.shape[2]:
        return layout.attend(module, query, key, value, **kwargs)  # trainer/shared_prefix.py's layout
    lengths = kwargs.pop(SEGMENTS, None)
    if lengths is None or attention_mask is not None or query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    kwargs.pop("is_causal", None)
    starts = [0]
    for length in lengths[:-1]:
        starts.append(starts[-1] + length)
    by_length: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        by_length.setdefault(length, []).append(index)
    pieces: list[torch.Tensor | None] = [None] * len(lengths)
    for length, members in by_length.items():
        if len(members) == 1:
            s = starts[members[0]]
            q, k, v = (t[:, :, s:s + length] for t in (query, key, value))
        else:
            index = (torch.tensor([starts[m] for m in members], device=query.device)[:, None]
                     + torch.arange(length, device=query.device)[None, :])  # (sequences, length)

            def take(states):  # (1, heads, T, d) -> (sequences, heads, length, d)
                return states[0][:, index.reshape(-1)].reshape(
                    states.shape[1], len(members), length, states.shape[3]).transpose(0, 1)

            q, k, v = take(query), take(key), take(value)
        out, _ = sdpa_attention_forward(module, q, k, v, None, is_causal=True, **kwargs)  # (n, length, heads, d)
        for position, member in enumerate(members):
            pieces[member] = out[position]
    return torch.cat(pieces, dim=0).unsqueeze(0), None


def install_padding_free(model) -> str | None:
    """Make ``model``'s text attention pack-aware (SDPA gets :func:`packed_sdpa_attention`; flash attention is
    already); returns what was done, or None (with the reason logged) where packing cannot be exact."""
    problem = padding_free_problem(model)
    if problem:
        logger.info("padding-free forward off: %s", problem)
        return None
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_SDPA, _packed_sdpa_mask)  # every unpacked forward: SDPA's own mask
    text_config = _unwrapped(model).config.get_text_config()
    if text_config._attn_implementation in ("sdpa", PACKED_SDPA):
        text_config._attn_implementation = PACKED_SDPA
        return "micro-batches packed into one row (SDPA per sequence)"
    return f"micro-batches packed into one row ({text_config._attn_implementation}, variable-length)"


class PackedForward:
    """Stands in for the model in TRL's log-prob function: packs each call's rows, calls the model, unpacks.

    Calls it cannot pack exactly go to the model unchanged: other inputs, not TRL's fused log-prob head, or a
    model whose text attention is not pack-aware (TRL's reference model is loaded again from the checkpoint).
    """

    def __init__(self, model):
        self.model = model

    def __call__(self, **inputs: Any):
        if not inputs.get("fused_lm_head") or set(inputs) - _PACKABLE_INPUTS or inputs.get("attention_mask") is None:
            return self.model(**inputs)
        text_config = _unwrapped(self.model).config.get_text_config()
        inner = _inner(self.model)
        if inner is None or text_config._attn_implementation not in (PACKED_SDPA,) + _FLASH:
            return self.model(**inputs)  # e.g. TRL's reference model, loaded again without install_padding_free
        if inputs.get("output_router_logits"):
            return self.model(**inputs)  # a MoE's load-balancing loss over a packed row is not checked: padded
        input_ids, attention_mask, labels = inputs["input_ids"], inputs["attention_mask"], inputs["labels"]
        mask = attention_mask.bool()
        lengths = mask.sum(dim=1)
        if bool((lengths == 0).any()):
            return self.model(**inputs)  # an empty row has nothing to pack
        positions = inner.compute_3d_position_ids(
            input_ids=input_ids, image_grid_thw=inputs.get("image_grid_thw"), video_grid_thw=None,
            inputs_embeds=None, attention_mask=attention_mask, past_key_values=None,
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
        )
        if positions is None:  # the language model's own fallback: 0..length-1 on every row, pads included
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).view(1, 1, -1).expand(
                3, input_ids.shape[0], -1)
        lengths_list = lengths.tolist()
        sequence_positions = torch.cat([torch.arange(n, device=input_ids.device) for n in lengths_list])
        packed_positions = torch.cat([sequence_positions[None], positions[:, mask]]).unsqueeze(1)  # (4, 1, T)
        packed = {
            "input_ids": input_ids[mask].unsqueeze(0),
            "attention_mask": no_mask(self.model),  # no mask to build
            "position_ids": packed_positions,
            "labels": labels[mask].unsqueeze(0),
            "fused_lm_head": True,
            SEGMENTS: tuple(lengths_list),
        }
        for name in ("pixel_values", "image_grid_thw", "output_router_logits"):
            if inputs.get(name) is not None:
                packed[name] = inputs[name]
        with packed_call():
            out = self.model(**packed)
        for name in ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1"):
            value = getattr(out, name, None)
            if value is not None:
                setattr(out, name, _unpack(value, mask))
        return out


def _unpack(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(1, T - 1) values of the packed row, value k scoring packed token k + 1, back to the padded (rows, length - 1)
    layout in which value j of a row scores its token j + 1; zeros where the padded layout has no token."""
    shifted = torch.cat([per_token.new_zeros(1), per_token[0]])  # shifted[k] scores packed token k
    return per_token.new_zeros(mask.shape).masked_scatter(mask, shifted)[:, 1:]
