"""Two exact speed-ups of the vision tower for GRPO (Qwen2-VL, Qwen2.5-VL, Qwen3-VL families), installed on a loaded model.

The vision tower dominates a page prompt's prefill (docs/gpu_check.md has the figure), for two reasons
this module removes without changing any number.

* **Each page is encoded G times.** A GRPO batch holds G copies of each page prompt, so the vision
  tower sees the same pixels G times, in generation's prefill and again in every training forward.
  :func:`share_page_encoding` wraps ``get_image_features``: identical images (same grid, equal pixel
  values) are encoded once and their features reused. Gradients of a reused feature accumulate over
  its uses, exactly as over G separate encodings. Qwen3-VL's deepstack features (vision-layer outputs
  added to the first language-model layers) are shared the same way (:func:`_expand_deepstack`).
* **Window attention is a Python loop.** With SDPA (or eager) attention, transformers runs the
  vision tower's attention one window at a time: about a hundred ``scaled_dot_product_attention``
  calls per image per windowed layer. :func:`batch_window_attention` runs all windows of the same
  length as one batched call (windows are independent, so the result is the same; only the edge
  windows of an image have other lengths). Flash attention already takes every window in one
  variable-length call and is left alone. Only Qwen2.5-VL has windows: Qwen2-VL's and Qwen3-VL's towers
  attend over each whole image (one call per image, and one per distinct page once pages are shared), so
  there the flag does nothing, and the log says so.

``--share_page_encoding`` is on by default; ``--batched_vision_attention`` is on by default with a CUDA
GPU (where the loop is launch-bound) and off on CPU, where it is no faster (``scripts/bench/bench_vision.py``;
docs/gpu_check.md). The tests compare features, logits and gradients against the stock model on CPU.
The batched attention checks itself on its first call against the loop (:func:`_checked_forward`) and on
any failure puts the loop back for the rest of the run, with one warning line (olmocr_rl.model.fallback).
"""

from __future__ import annotations

import functools
import logging
import types

from olmocr_rl.model.adapters import unwrap

logger = logging.getLogger(__name__)


def _inner_model(model):
    """The ``Qwen2_5_VLModel`` (holds ``visual`` and ``get_image_features``) of a conditional-generation model,
    inside a PEFT wrapper too (``--use_peft``: its ``model`` attribute is the whole wrapped model, not this)."""
    inner = getattr(unwrap(model), "model", None)
    if inner is None or not hasattr(inner, "visual") or not hasattr(inner, "get_image_features"):
        return None
    return inner


def share_page_encoding(model) -> bool:
    """Encode identical images once per forward; returns False (nothing done) for a model without a vision tower.

    Qwen3-VL's deepstack features are handed back once per use too (:func:`_expand_deepstack`).
    """
    import torch

    inner = _inner_model(model)
    if inner is None:
        return False
    from olmocr_rl.model.families import vision_layout

    merge = vision_layout(model.config).merge_size

    def get_image_features(self, pixel_values, image_grid_thw=None, **kwargs):
        encode = functools.partial(type(self).get_image_features, self)  # the stock method
        if image_grid_thw is None or len(image_grid_thw) < 2:
            return encode(pixel_values, image_grid_thw, **kwargs)
        per_image = torch.split(pixel_values, image_grid_thw.prod(-1).tolist())
        grids = image_grid_thw.tolist()
        first: list[int] = []  # index of the first copy of each distinct image
        use: list[int] = []  # for each image, its position among the distinct ones
        for i, pixels in enumerate(per_image):
            for position, j in enumerate(first):
                if grids[j] == grids[i] and torch.equal(per_image[j], pixels):
                    use.append(position)
                    break
            else:
                use.append(len(first))
                first.append(i)
        if len(first) == len(per_image):
            return encode(pixel_values, image_grid_thw, **kwargs)
        out = encode(torch.cat([per_image[i] for i in first]), image_grid_thw[first], **kwargs)
        out.pooler_output = tuple(out.pooler_output[position] for position in use)
        _expand_deepstack(out, (image_grid_thw[first].prod(-1) // merge**2).tolist(), use)  # Qwen3-VL
        return out

    # Bound to the instance (a deep copy of the model rebinds it to the copy).
    inner.get_image_features = types.MethodType(get_image_features, inner)
    return True


def _expand_deepstack(out, tokens_per_distinct: list[int], use: list[int]) -> None:
    """Qwen3-VL's deepstack features of the distinct images, laid out again for every use, in place.

    Qwen3-VL adds features of some vision layers (``deepstack_visual_indexes``) to the hidden states of the first
    language-model layers, at the image tokens. Unlike ``pooler_output`` they come as one tensor per deepstack
    layer over all images' tokens, so each is cut per distinct image and put back together in the order of use.
    Towers without deepstack (Qwen2-VL, Qwen2.5-VL) return none and are left alone.
    """
    import torch

    features = getattr(out, "deepstack_features", None)
    if not features:
        return
    out.deepstack_features = [torch.cat([torch.split(layer, tokens_per_distinct)[position] for position in use])
                              for layer in features]


def _batched_windows(module, query, key, value, cu_seqlens, attention_interface, **kwargs):
    """Attention of each [cu_seqlens[i], cu_seqlens[i+1]) window, windows of equal length batched together.

    query/key/value: (1, heads, tokens, head_dim). Returns (1, tokens, heads, head_dim), the layout of
    transformers' attention functions.
    """
    import torch

    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    starts = cu_seqlens[:-1].tolist()
    by_length: dict[int, list[int]] = {}
    for start, length in zip(starts, lengths):
        if length > 0:
            by_length.setdefault(length, []).append(start)
    heads, tokens, head_dim = query.shape[1], query.shape[2], query.shape[3]
    output = query.new_empty(tokens, heads, head_dim)
    for length, window_starts in by_length.items():
        index = (torch.tensor(window_starts, device=query.device)[:, None]
                 + torch.arange(length, device=query.device)[None, :])  # (windows, length)
        flat = index.reshape(-1)

        def take(states):  # (1, heads, tokens, d) -> (windows, heads, length, d)
            return states[0][:, flat].reshape(heads, len(window_starts), length, head_dim).transpose(0, 1)

        attended = attention_interface(module, take(query), take(key), take(value), attention_mask=None,
                                       is_causal=False, **kwargs)[0]  # (windows, length, heads, d)
        output[flat] = attended.reshape(-1, heads, head_dim).to(output.dtype)
    return output.unsqueeze(0)


def batch_window_attention(model) -> int:
    """Replace the per-window loop of every vision attention layer; returns how many layers were patched.

    Only towers with attention windows have the loop (Qwen2.5-VL, ``families.Family.window_attention``): Qwen2-VL
    and Qwen3-VL attend over each whole image, one call per image, which shared page encoding already cuts to
    one per distinct page. For them nothing is patched (0).
    """
    from olmocr_rl.model.families import family

    inner = _inner_model(model)
    if inner is None or not family(model.config).window_attention:
        return 0
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VLVisionAttention,
        apply_rotary_pos_emb_vision,
        eager_attention_forward,
    )
    from transformers.utils.generic import is_flash_attention_requested

    guard = _WindowGuard()
    for block in getattr(inner.visual, "blocks", []):
        attention = block.attn
        if type(attention) is not Qwen2_5_VLVisionAttention or is_flash_attention_requested(attention.config):
            continue  # another family's attention, or flash attention (one varlen call already)

        def forward(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, **kwargs):
            seq_length = hidden_states.shape[0]
            query, key, value = (
                self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
            )
            cos, sin = position_embeddings
            query, key = apply_rotary_pos_emb_vision(query, key, cos, sin)
            query, key, value = (s.transpose(0, 1).unsqueeze(0) for s in (query, key, value))
            interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
            output = _batched_windows(self, query, key, value, cu_seqlens, interface, scaling=self.scaling,
                                      dropout=0.0 if not self.training else self.attention_dropout, **kwargs)
            return self.proj(output.reshape(seq_length, -1).contiguous())

        attention.forward = types.MethodType(functools.partial(_checked_forward, batched=forward), attention)
        attention._olmocr_rl_window_guard = guard
        guard.layers.append(attention)
        guard.blocks.append(block)
    return len(guard.layers)


class _WindowGuard:
    """The first-use check of ``--batched_vision_attention``, shared by the patched layers of one model (kept on each
    layer, so a deep copy of the model copies it with its layers)."""

    def __init__(self):
        self.layers: list = []
        self.blocks: list = []  # the block of each layer
        self.checked = False

    def recomputes(self, layer) -> bool:
        """Whether ``layer``'s block recomputes in the backward pass (our checkpointing plans, or transformers')."""
        block = next(b for a, b in zip(self.layers, self.blocks) if a is layer)
        return bool(getattr(block, "_olmocr_rl_recomputes", False)
                    or (block.training and getattr(block, "gradient_checkpointing", False)))

    def fall_back(self, reason: str) -> None:
        from olmocr_rl.model.fallback import fall_back

        for layer in self.layers:  # the class's forward again: the per-window loop
            layer.__dict__.pop("forward", None)
        fall_back("--batched_vision_attention", reason, "the per-window attention loop")


def _checked_forward(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, *, batched,
                     **kwargs):
    """The batched window attention of a layer; on the first call also the stock loop, to compare.

    An exception of the batched call, or a first result further from the loop's than the dtype's tolerance
    (olmocr_rl.model.fallback), puts the loop back in every layer and returns the loop's result. The first call's
    comparison runs without gradients and the batched call then runs again for them: a layer that recomputes in the
    backward pass (non-reentrant checkpointing) must save the same tensors when it recomputes, so nothing of a
    failed batched call may be saved. Hence a later call that fails with gradients on, in a block that recomputes,
    raises its error as it is (only out of memory is expected there)."""
    import torch

    from olmocr_rl.model.fallback import reason_of, relative_difference, tolerance

    guard = self._olmocr_rl_window_guard
    stock = functools.partial(type(self).forward, self, hidden_states, cu_seqlens,
                              position_embeddings=position_embeddings, max_seqlen=max_seqlen, **kwargs)
    call = functools.partial(batched, self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
    if not guard.checked:
        with torch.no_grad():
            try:
                trial = call()
            except Exception as exc:  # noqa: BLE001 - any failure of the speed-up falls back to the stock loop
                guard.fall_back(f"the batched call failed: {reason_of(exc)}")
                return stock()
            reference = stock()
        difference, allowed = relative_difference(trial, reference), tolerance(reference.dtype)
        if difference > allowed:
            guard.fall_back(f"its first result differs from the per-window loop's by {difference:.2g} (relative), "
                            f"more than the {allowed:.0e} allowed in {reference.dtype}")
            return stock() if torch.is_grad_enabled() else reference
        guard.checked = True
        if not torch.is_grad_enabled():
            return trial
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory on a larger page
        if torch.is_grad_enabled() and guard.recomputes(self):
            raise  # what the failed call saved for the backward pass cannot be taken back: its recomputation would not match
        guard.fall_back(f"the batched call failed: {reason_of(exc)}")
        return stock()


def apply_vision_speedups(model, *, share_pages: bool = True, batched_attention: bool = True) -> list[str]:
    """Install the requested speed-ups on ``model``; returns what was installed, or why not (for the log)."""
    from olmocr_rl.model.families import family

    done = []
    if share_pages and share_page_encoding(model):
        deepstack = " (deepstack features included)" if family(model.config).deepstack else ""
        done.append(f"each distinct page encoded once per forward{deepstack}")
    if batched_attention:
        layers = batch_window_attention(model)
        if layers:
            done.append(f"window attention batched in {layers} vision layers")
        elif _inner_model(model) is not None and not family(model.config).window_attention:
            done.append(f"batched vision attention: nothing to batch, {family(model.config).label}'s vision tower "
                        "has no attention windows (one attention call per image)")
    return done
