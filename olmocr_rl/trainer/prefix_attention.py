"""The attention of a shared-prefix layout (``--shared_prefix``, trainer/shared_prefix.py): per group of a packed row,
a page prompt's prefix attending causally to itself and each completion's segment attending to the whole prefix and
causally to itself, exactly as each row of the stock forward attends.

A group's segments attend in one of these ways (all exact; tests/unit/test_shared_prefix.py runs each):

* on CPU, the prefix part in one flash-attention call for all of a group's segments and each segment's own part
  causally, merged by their log-sum-exp (:class:`_PrefixAndOwn`);
* on a GPU, one FlexAttention call per layer for all of a group's segments (:func:`_segments_flex`: a block mask,
  the prefix visible to every segment and each segment's own tokens causally; compiled), checked on its first call
  against the masked calls, outputs and gradients, and replaced by them for the run, with one warning line, where
  the check fails (:class:`FlexGuard`);
* otherwise one masked SDPA call per segment when they are long (:data:`SEGMENT_CALL_TOKENS`), one padded call for
  short ones.

The prefix is the row's own tokens, or keys and values kept from an earlier forward (trainer/prefix_steps.py).
"""

from __future__ import annotations

import functools

import torch

__all__ = ["FLEX_SEGMENT_ATTENTION", "SEGMENT_CALL_TOKENS", "SPLIT_SEGMENT_ATTENTION", "FlexGuard",
           "shared_prefix_attention"]


#: A group's segments are attended one SDPA call each (keys: the prefix and the segment's own tokens, exactly) when
#: its longest is at least this many tokens; shorter ones go in one call, padded to the longest (fewer calls, where
#: per-call overhead outweighs the padding). Both are exact; on CPU at olmOCR 2's shape (1,761-token prefix,
#: 8 x 500..1,000 tokens) one call per segment takes about 0.75x the time of the padded call, at the demo's
#: (16 x 32..64) the same (scripts/bench/bench_shared_prefix.py measures the phase).
SEGMENT_CALL_TOKENS = 256


def shared_prefix_attention(module, query, key, value, layout, masks: dict | None = None, **kwargs):
    """Attention over a packed row laid out as ``layout``: per group ``(prefix, (n_1, ..., n_k))`` or ``(prefix,
    (n_1, ..., n_k), source)``: the prefix's tokens then k segments of n_j tokens. The prefix attends causally to
    itself; segment j to the whole prefix and causally to itself. With a ``source`` (a page prompt forwarded
    before: trainer/prefix_steps.py) the row holds no prefix (``prefix`` is 0) and the segments attend to the
    source's keys and values for this layer instead. query/key/value (1, heads, T, head_dim); returns (1, T, heads,
    head_dim). ``masks``: where the masked calls' masks are kept for reuse (one forward's, every layer and the
    backward's replays)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    pieces, start = [], 0
    for prefix, segments, *source in layout:
        source = source[0] if source else None
        if source is not None and source.mode != "again":
            k_prefix, v_prefix = source.keys_values(module)
        else:
            head = slice(start, start + prefix)
            k_prefix, v_prefix = key[:, :, head], value[:, :, head]
            if source is not None:  # the row's prefix, with the gradients its earlier forwards gathered
                k_prefix, v_prefix = source.keys_values(module, k_prefix, v_prefix)
            out, _ = sdpa_attention_forward(module, query[:, :, head], k_prefix, v_prefix, None, is_causal=True,
                                            **kwargs)
            pieces.append(out[0])
            start += prefix
        if _flexes(query, kwargs):
            attend = _segments_flex
        elif _splits(query, kwargs):
            attend = _segments_split
        else:
            attend = _each_segment if max(segments) >= SEGMENT_CALL_TOKENS else _segments_padded
        pieces += attend(module, query, key, value, k_prefix, v_prefix, start, segments, masks=masks, **kwargs)
        start += sum(segments)
    return torch.cat(pieces, dim=0).unsqueeze(0), None


def _segment_mask(query, prefix: int, width: int, masks: dict | None = None):
    """The additive mask of ``width`` queries over the prefix and ``width`` segment keys: the prefix visible, the
    segment's own tokens causally. Additive, not boolean: SDPA's CPU kernel then keeps no weights. Built once per
    forward for each (prefix, width) when ``masks`` is given: every layer's calls, and the autograd graph that
    saves them, share one tensor (on a GPU: fewer kernel launches, and one mask kept for the backward, not one a
    segment and layer)."""
    cache_key = (prefix, width, query.dtype, query.device)
    if masks is not None and cache_key in masks:
        return masks[cache_key]
    mask = query.new_zeros(1, 1, width, prefix + width)
    mask[..., prefix:] = torch.full((width, width), torch.finfo(query.dtype).min, dtype=query.dtype,
                                    device=query.device).triu(1)
    if masks is not None:
        masks[cache_key] = mask
    return mask


def _each_segment(module, query, key, value, k_prefix, v_prefix, start, segments, masks=None, **kwargs):
    """One call per segment, its keys the prefix's and its own (no padding)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    pieces = []
    for n in segments:
        own = slice(start, start + n)
        keys, values = torch.cat([k_prefix, key[:, :, own]], dim=2), torch.cat([v_prefix, value[:, :, own]], dim=2)
        out, _ = sdpa_attention_forward(module, query[:, :, own], keys, values,
                                        _segment_mask(query, k_prefix.shape[2], n, masks), is_causal=False,
                                        **kwargs)
        pieces.append(out[0])
        start += n
    return pieces


def _segments_padded(module, query, key, value, k_prefix, v_prefix, start, segments, masks=None, **kwargs):
    """All segments in one call, each padded to the longest by repeating its last token: a segment's padding is
    hidden from its real tokens by causality, and the padded queries' outputs are dropped."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    device = query.device
    longest = max(segments)
    lengths = torch.tensor(segments, device=device)
    starts = start + torch.cumsum(lengths, 0) - lengths
    steps = torch.arange(longest, device=device)
    index = starts[:, None] + torch.minimum(steps[None, :], lengths[:, None] - 1)

    def take(states):  # (1, heads, T, d) -> (segments, heads, longest, d)
        return states[0][:, index.reshape(-1)].reshape(
            states.shape[1], len(segments), longest, states.shape[3]).transpose(0, 1)

    count = len(segments)
    keys = torch.cat([k_prefix.expand(count, -1, -1, -1), take(key)], dim=2)
    values = torch.cat([v_prefix.expand(count, -1, -1, -1), take(value)], dim=2)
    out, _ = sdpa_attention_forward(module, take(query), keys, values,
                                    _segment_mask(query, k_prefix.shape[2], longest, masks), is_causal=False,
                                    **kwargs)
    return [out[j, :n] for j, n in enumerate(segments)]


#: On CPU, a group's segments attend the prefix and themselves as two kernels merged by their log-sum-exp
#: (:class:`_PrefixAndOwn`) instead of one masked call over both: the prefix part is one call for all of them, and
#: the masked upper triangle of each segment's own block is never computed. Measured on CPU (fp32, 1 thread): one
#: 1,001-token segment over a 1,761-token prefix, forward and backward, 1.37x (8 heads of 64) and 2.0x (4 of 32,
#: the tiny model's) against the masked call. The tests also run the other two ways with it off.
SPLIT_SEGMENT_ATTENTION = True


def _splits(query, kwargs) -> bool:
    """Whether :func:`_segments_split` runs: on CPU, its kernels present, no attention dropout."""
    return (SPLIT_SEGMENT_ATTENTION and query.device.type == "cpu" and not kwargs.get("dropout")
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward"))


class _PrefixAndOwn(torch.autograd.Function):
    """Attention of a group's segment queries (1, heads, sum n_j, d) over the whole prefix and, causally, their own
    segment: the prefix part one flash-attention call for every segment, each segment's own part a causal call,
    the two merged by their log-sum-exp. The backward runs each part's kernel backward with the merged output and
    log-sum-exp, which gives the exact gradients of the joint softmax (each part's probabilities are exp(scores -
    merged lse)); the query's gradient is the sum of the two."""

    @staticmethod
    def forward(ctx, query, k_prefix, v_prefix, k_own, v_own, segments, scale):
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        out_prefix, lse_prefix = flash(query, k_prefix, v_prefix, 0.0, False, scale=scale)[:2]
        outs, lses, start = [], [], 0
        for n in segments:
            own = slice(start, start + n)
            out, lse = flash(query[:, :, own], k_own[:, :, own], v_own[:, :, own], 0.0, True, scale=scale)[:2]
            outs.append(out)
            lses.append(lse)
            start += n
        out_own, lse_own = torch.cat(outs, dim=2), torch.cat(lses, dim=2)
        lse = torch.logaddexp(lse_prefix, lse_own)
        merged = (out_prefix.float() * torch.exp(lse_prefix - lse).unsqueeze(-1)
                  + out_own.float() * torch.exp(lse_own - lse).unsqueeze(-1)).to(query.dtype)
        ctx.save_for_backward(query, k_prefix, v_prefix, k_own, v_own, merged, lse)
        ctx.segments, ctx.scale = segments, scale
        return merged

    @staticmethod
    def backward(ctx, grad):
        query, k_prefix, v_prefix, k_own, v_own, merged, lse = ctx.saved_tensors
        backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        grad = grad.contiguous()
        d_query, d_k_prefix, d_v_prefix = backward(grad, query, k_prefix, v_prefix, merged, lse, 0.0, False,
                                                   scale=ctx.scale)
        d_queries, d_keys, d_values, start = [], [], [], 0
        for n in ctx.segments:
            own = slice(start, start + n)
            dq, dk, dv = backward(grad[:, :, own], query[:, :, own], k_own[:, :, own], v_own[:, :, own],
                                  merged[:, :, own], lse[:, :, own], 0.0, True, scale=ctx.scale)
            d_queries.append(dq)
            d_keys.append(dk)
            d_values.append(dv)
            start += n
        return (d_query + torch.cat(d_queries, dim=2), d_k_prefix, d_v_prefix, torch.cat(d_keys, dim=2),
                torch.cat(d_values, dim=2), None, None)


def _segments_split(module, query, key, value, k_prefix, v_prefix, start, segments, masks=None, **kwargs):
    """All of a group's segments through :class:`_PrefixAndOwn` (key/value heads repeated for grouped-query
    attention, as transformers' SDPA path does); one piece of ``sum(segments)`` rows. No masks (``masks`` unused)."""
    from transformers.integrations.sdpa_attention import repeat_kv

    repeats = query.shape[1] // key.shape[1]
    own = slice(start, start + sum(segments))
    out = _PrefixAndOwn.apply(query[:, :, own], repeat_kv(k_prefix, repeats), repeat_kv(v_prefix, repeats),
                              repeat_kv(key[:, :, own], repeats), repeat_kv(value[:, :, own], repeats),
                              tuple(segments), kwargs.get("scaling"))
    return [out[0].transpose(0, 1)]



#: On a GPU, a group's segments attend in one FlexAttention call per layer (:func:`_segments_flex`) instead of one
#: masked call each (or one padded call): no mask tensor, and the blocks the mask hides are skipped. The CPU keeps its
#: log-sum-exp split (FlexAttention has no CPU backward in torch 2.13).
FLEX_SEGMENT_ATTENTION = True


class FlexGuard:
    """The process's state of the FlexAttention path: its first call checked against the masked calls, or off."""

    FLAG, STOCK = "--shared_prefix's FlexAttention path", "the masked SDPA calls"

    def __init__(self):
        self.checked = False
        self.off = False
        self.calls = 0  # groups attended by FlexAttention (read by the tests)

    def fall_back(self, reason: str) -> None:
        from olmocr_rl.model.fallback import fall_back

        self.off = True
        fall_back(self.FLAG, reason, self.STOCK)


FLEX = FlexGuard()


@functools.cache
def _flex_functions(compiled: bool):
    """(flex_attention, create_block_mask), flex_attention compiled with dynamic shapes (the prompt and completion
    lengths change every step) where ``compiled``; None without FlexAttention."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    return (torch.compile(flex_attention, dynamic=True) if compiled else flex_attention), create_block_mask


def _flexes(query, kwargs) -> bool:
    """Whether :func:`_segments_flex` runs: on a CUDA GPU, FlexAttention present, its check not failed, no dropout."""
    return (FLEX_SEGMENT_ATTENTION and query.device.type == "cuda" and not FLEX.off and not kwargs.get("dropout")
            and _flex_functions(True) is not None)


def _segment_ids(prefix: int, segments: tuple, device):
    """Each query's segment (sum of segments,) and each key's (prefix + sum,; the prefix's -1)."""
    query_ids = torch.repeat_interleave(torch.arange(len(segments), device=device),
                                        torch.tensor(segments, device=device))
    return query_ids, torch.cat([torch.full((prefix,), -1, device=device), query_ids])


def _visible(prefix: int, query_ids, key_ids):
    """The mask_mod of a group: a key is seen when it is the prefix's, or its segment's and not after the query (the
    segments lie in the same order among the queries and, after the prefix, among the keys). It closes over tensors
    only (the prefix length too), so the compiled kernel is not specialised to one page's prompt length."""
    length = torch.tensor(prefix, device=query_ids.device)

    def mask_mod(batch, head, q, k):
        return (k < length) | ((key_ids[k] == query_ids[q]) & (k - length <= q))

    return mask_mod


def _flex_mask(query, prefix: int, segments: tuple, masks: dict | None, create_block_mask):
    """The group's BlockMask, built once per forward (every layer and the backward's replays)."""
    cache_key = ("flex", prefix, segments, query.device)
    if masks is not None and cache_key in masks:
        return masks[cache_key]
    total = sum(segments)
    block = create_block_mask(_visible(prefix, *_segment_ids(prefix, segments, query.device)), None, None, total,
                              prefix + total, device=query.device)
    if masks is not None:
        masks[cache_key] = block
    return block


def _segments_flex(module, query, key, value, k_prefix, v_prefix, start, segments, masks=None, compiled=True,
                   **kwargs):
    """All of a group's segments in one FlexAttention call: queries the segments', keys the prefix's and the
    segments' own, the group's block mask; one piece of ``sum(segments)`` rows. Its first call is checked
    (:func:`_check_flex`); a failure there or an error later falls back to the masked calls for the run."""
    functions = _flex_functions(compiled)
    own = slice(start, start + sum(segments))
    masked = _each_segment if max(segments) >= SEGMENT_CALL_TOKENS else _segments_padded

    def fallback():
        return masked(module, query, key, value, k_prefix, v_prefix, start, segments, masks=masks, **kwargs)

    if functions is None:
        return fallback()
    flex_attention, create_block_mask = functions
    keys = torch.cat([k_prefix, key[:, :, own]], dim=2)
    values = torch.cat([v_prefix, value[:, :, own]], dim=2)
    scale, grouped = kwargs.get("scaling"), query.shape[1] != keys.shape[1]
    try:
        block = _flex_mask(query, k_prefix.shape[2], tuple(segments), masks, create_block_mask)

        def attend(q, k, v):
            return flex_attention(q, k, v, block_mask=block, scale=scale, enable_gqa=grouped)

        if not FLEX.checked:
            problem = _check_flex(attend, query[:, :, own], keys, values, k_prefix.shape[2], tuple(segments), scale)
            if problem:
                FLEX.fall_back(problem)
                return fallback()
            FLEX.checked = True
        out = attend(query[:, :, own], keys, values)
    except Exception as exc:  # noqa: BLE001 - any failure of the speed-up falls back to the masked calls
        from olmocr_rl.model.fallback import reason_of

        if FLEX.checked and torch.is_grad_enabled():
            raise  # a checked path failing mid-run with gradients: its error as it is (out of memory, most likely)
        FLEX.fall_back(f"its {'first ' if not FLEX.checked else ''}call failed: {reason_of(exc)}")
        return fallback()
    FLEX.calls += 1
    return [out[0].transpose(0, 1)]


def _check_flex(attend, query, keys, values, prefix: int, segments: tuple, scale) -> str | None:
    """The first FlexAttention call against SDPA with the group's dense mask: the outputs and the gradients of query,
    keys and values for one random output gradient, within the dtype's tolerance (olmocr_rl.model.fallback). Returns
    what differs, or None."""
    from transformers.integrations.sdpa_attention import repeat_kv

    from olmocr_rl.model.fallback import relative_difference, tolerance

    inputs = [t.detach().clone().requires_grad_(True) for t in (query, keys, values)]
    query_ids, key_ids = _segment_ids(prefix, segments, query.device)
    visible = _visible(prefix, query_ids, key_ids)(None, None, torch.arange(len(query_ids), device=query.device)[:, None],
                                                  torch.arange(len(key_ids), device=query.device)[None, :])
    generator = torch.Generator(device=query.device).manual_seed(0)
    with torch.enable_grad():
        mine = attend(*inputs)
        repeats = query.shape[1] // keys.shape[1]
        theirs = torch.nn.functional.scaled_dot_product_attention(
            inputs[0], repeat_kv(inputs[1], repeats), repeat_kv(inputs[2], repeats), attn_mask=visible, scale=scale)
        cotangent = torch.randn(theirs.shape, generator=generator, device=query.device, dtype=theirs.dtype)
        grads = torch.autograd.grad(mine, inputs, cotangent)
        stock = torch.autograd.grad(theirs, inputs, cotangent)
    allowed = tolerance(query.dtype)
    for name, a, b in zip(("output", "query gradient", "key gradient", "value gradient"), (mine, *grads),
                          (theirs, *stock)):
        difference = relative_difference(a.detach(), b)
        if difference > allowed:
            return (f"its first call's {name} differs from the masked attention's by {difference:.2g} (relative), "
                    f"more than the {allowed:.0e} allowed in {query.dtype}")
    return None
