"""Shared-prefix training forward (``--shared_prefix``): each group's page prompt goes through the language model once.

TRL 1.16 forwards ``prompt + completion`` for every one of a group's G completions, in the log-probs of the
loss (forward and backward) and in the old-policy and reference log-probs (the same function,
``_get_per_token_logps_and_entropies``). Causal attention makes the prompt's states identical in every row, so
:class:`SharedPrefixForward`, which stands in for the model there (``trainer/plain.py``), packs a micro-batch
into one row of ``P - 1 + sum(n_j + 1)`` tokens per group instead of ``G * (P + n)``:

1. rows whose prompts are identical -- the same tokens, the same image grid and the same pixels -- form a group
   (a row without a partner is a group of one: its own causal sequence, the stock result);
2. a group's row holds its prompt without the last token once (the prefix), then for each completion a
   segment: the prompt's last token again and the completion. The copy sees the prefix and itself, as the
   prompt's last token does in the stock row, so its state is the same; it is what predicts the completion's
   first token, so the labels of each segment stay its own (the model's fused log-prob head shifts by one);
3. positions are the stock forward's: the M-RoPE ids of each padded row (Qwen2.5-VL's or Qwen3-VL's
   ``compute_3d_position_ids``, as in ``padding_free.PackedForward``), the prefix taking the first row's, each segment its own row's;
4. the text attention (SDPA, the pack-aware function of ``padding_free.install_padding_free``) reads the layout
   from the ``olmocr_rl_shared_prefix`` forward keyword and runs trainer/prefix_attention.py: the prefix
   causally, then each group's segments, each attending to the whole prefix and causally to itself;
5. the vision tower gets one image per group; the per-token log-probs and entropies are scattered back into
   TRL's (rows, completion) layout, zeros where the stock path has none.

Across calls (trainer/prefix_steps.py): a page whose completions come in several calls -- the chunks of one TRL call
without gradients, or the micro-steps of one gradient-accumulation window (one completion a micro-batch, as olmOCR 2
trains) -- has its prefix forwarded alone once and its layers' keys and values kept (a group ``(0, segments,
source)`` of the layout: the row holds its segments only); with gradients the prefix's gradient is gathered over the
window's micro-steps and run through the prompt once.

The result equals the stock forward up to float rounding (tests/unit/test_shared_prefix.py: log-probs,
entropies and gradients of the tiny Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE in fp32, and training steps). The first
call checks itself against the stock forward (olmocr_rl.model.fallback: relative difference within the dtype's tolerance); a
failure, then or later, turns it off for the run with one warning line. Calls it cannot make exact (another
family, flash or eager attention, several images in a row, MoE router logits, a prompt ending in an image
token) take the stock path.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from olmocr_rl.trainer.padding_free import (
    _PACKABLE_INPUTS,
    PACKABLE_MODEL_TYPES,
    PACKED_SDPA,
    SHARED_PREFIX,
    _inner,
    _unwrapped,
    no_mask,
    packed_call,
    padding_free_problem,
)
from olmocr_rl.trainer.prefix_attention import shared_prefix_attention
from olmocr_rl.trainer.prefix_steps import PrefixScope, PrefixState, _groups

logger = logging.getLogger(__name__)

__all__ = ["SharedPrefixForward", "SharedPrefixGuard", "install_shared_prefix", "shared_prefix_attention",
           "shared_prefix_problem"]


def shared_prefix_problem(model) -> str | None:
    """Why the shared-prefix forward cannot be exact for ``model`` (None: it can, once its attention is pack-aware):
    packing's own problem (padding_free_problem), or an attention other than SDPA."""
    problem = padding_free_problem(model)
    if problem:
        return problem
    implementation = _unwrapped(model).config.get_text_config()._attn_implementation
    if implementation not in ("sdpa", PACKED_SDPA):
        return f"attention implementation {implementation!r} (the shared prefix needs sdpa)"
    return None


def install_shared_prefix(model) -> str | None:
    """Make ``model``'s text attention able to run the shared layout (padding_free's pack-aware SDPA, which runs any
    other call as transformers' SDPA); returns what was done, or None (with the reason logged) where it cannot be
    exact."""
    from olmocr_rl.trainer.padding_free import install_padding_free

    problem = shared_prefix_problem(model)
    if problem is None and install_padding_free(model) is None:
        problem = "the pack-aware attention could not be installed"
    if problem:
        logger.info("shared-prefix forward off: %s", problem)
        return None
    return "each group's prompt forwarded once (shared prefix, checked against the stock forward on first use)"


class _Layout:
    """The ``olmocr_rl_shared_prefix`` forward keyword: the groups' layout, and the attention that reads it (so the
    pack-aware attention of padding_free.py needs nothing of this module)."""

    def __init__(self, groups: tuple):
        self.groups = groups
        self.masks: dict = {}  # the masked calls' masks, built once for this forward (_segment_mask)

    def attend(self, module, query, key, value, **kwargs):
        return shared_prefix_attention(module, query, key, value, self.groups, masks=self.masks, **kwargs)


class _Capture:
    """The ``olmocr_rl_shared_prefix`` keyword of a forward of prefixes alone (one causal sequence each, of these
    lengths): each text layer's keys and values are kept, as the attention gets them (after the rotary embedding;
    the first call of a layer, not a replay of it in the backward)."""

    def __init__(self, lengths: tuple[int, ...], grad: bool):
        self.lengths, self.grad = lengths, grad
        self.keys_values: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def attend(self, module, query, key, value, **kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        if module.layer_idx not in self.keys_values:
            if self.grad and not torch.is_grad_enabled():
                raise RuntimeError("a layer ran its forward without gradients (reentrant checkpointing): the "
                                   "prefix's keys and values would take no gradient")
            self.keys_values[module.layer_idx] = (key, value)
        kwargs.pop("is_causal", None)
        pieces, start = [], 0
        for n in self.lengths:
            part = slice(start, start + n)
            out, _ = sdpa_attention_forward(module, query[:, :, part], key[:, :, part], value[:, :, part], None,
                                            is_causal=True, **kwargs)
            pieces.append(out[0])
            start += n
        return torch.cat(pieces, dim=0).unsqueeze(0), None

    def states(self, anchor=None) -> list[PrefixState]:
        """Each prefix's state: the captured keys and values sliced to its tokens (``anchor``: the forward's
        log-probs, with one prefix)."""
        states, start = [], 0
        for n in self.lengths:
            part = slice(start, start + n)
            states.append(PrefixState({layer: (k[:, :, part], v[:, :, part])
                                       for layer, (k, v) in self.keys_values.items()}, n, anchor))
            start += n
        return states


class SharedPrefixGuard:
    """The run's state of ``--shared_prefix``: whether the first call's check passed, or the speed-up is off."""

    #: What the fallback's warning line names: the flag, and what runs instead.
    FLAG, STOCK = "--shared_prefix", "the stock forward (one row per completion)"

    def __init__(self):
        self.checked = False
        self.off = False
        self.shared_calls = 0  # calls that shared at least one prompt (read by the tests and the bench)
        self.prefix_forwards = 0  # pages' prompts forwarded alone, to be kept for later forwards (likewise)
        # several processes (set by the trainer): a prompt kept for later micro-steps is forwarded without gradients,
        # and again with them in its page's last micro-step (no graph outlives a micro-step: FSDP2 reshards and
        # DeepSpeed partitions parameters between them); one process keeps the first forward's graph instead
        self.recompute = False
        self.across_steps = True  # prompts kept across a window's micro-steps (set off by the trainer for ZeRO-3)

    def fall_back(self, reason: str) -> None:
        from olmocr_rl.model.fallback import fall_back

        self.off = True
        fall_back(self.FLAG, reason, self.STOCK)


class SharedPrefixForward:
    """Stands in for the model in TRL's log-prob function: one forward per group prompt, or ``stock`` unchanged.

    ``model`` is the trainer's model (its text attention pack-aware), ``stock`` what would be called otherwise
    (the model, or padding_free.PackedForward around it), ``width`` TRL's ``logits_to_keep`` (the completion
    columns of the padded block).

    Across calls (trainer/prefix_steps.py): ``pages`` the page key of every row TRL will pass, over all of this
    object's calls in order (None: each call's rows grouped by their contents, nothing kept between calls);
    ``scope`` the prefix states that live across these calls (and, with gradients, across the micro-steps of a
    window); ``later`` the pages that forwards after this object's calls will need; ``final`` whether this
    object's last call ends the scope."""

    def __init__(self, model, stock, width: int, guard: SharedPrefixGuard, pages: list | None = None,
                 scope: PrefixScope | None = None, later: frozenset = frozenset(), final: bool = True):
        self.model, self.stock, self.width, self.guard = model, stock, width, guard
        self.pages, self.scope, self.later, self.final = pages, scope or PrefixScope(), later, final
        self.offset = 0
        self.saved_tokens = 0  # the rows' real tokens the language model did not forward, over this object's calls

    def __call__(self, **inputs: Any):
        rows = len(inputs["input_ids"])
        keys = after = None
        if self.pages is not None and self.offset + rows <= len(self.pages):
            keys, after = self.pages[self.offset:self.offset + rows], self.pages[self.offset + rows:]
        self.offset += rows
        later, final = self.later | frozenset(after or ()), self.final and not after
        if self.guard.off:
            return self._stock(inputs, later, final)
        plan = _plan(self.model, inputs, self.width, keys, self.scope, later, final)
        if plan is None:
            return self._stock(inputs, later, final)
        if self.guard.checked:
            return self._shared(inputs, plan, self.scope)
        from olmocr_rl.model.fallback import compute_dtype, reason_of, relative_difference, tolerance

        trial_scope = PrefixScope()
        try:
            with torch.no_grad():
                trial = self._shared(inputs, plan, trial_scope, count=False)
                reference = self.stock(**inputs)
        except Exception as exc:  # noqa: BLE001 - any failure of the speed-up falls back to the stock forward
            self.guard.fall_back(f"its first forward failed: {reason_of(exc)}")
            return self._stock(inputs, later, final)
        columns = slice(-self.width, None)
        difference = max(relative_difference(getattr(trial, name)[:, columns], getattr(reference, name)[:, columns])
                         for name in ("log_probs", "entropy") if getattr(reference, name, None) is not None)
        dtype = compute_dtype(self.model, reference.log_probs.dtype)
        allowed = tolerance(dtype)
        if difference > allowed:
            self.guard.fall_back(f"its first result differs from the stock forward's by {difference:.2g} (relative), "
                                 f"more than the {allowed:.0e} allowed in {dtype}")
            return self._stock(inputs, later, final) if torch.is_grad_enabled() else self._release(reference, later,
                                                                                                   final)
        self.guard.checked = True
        logger.info("shared prefix: the first forward (%d rows, %d prompts) matches the stock forward (relative "
                    "difference %.1e, %.0e allowed in %s); %d tokens forwarded instead of %d",
                    rows, len(plan.groups), difference, allowed, dtype, plan.forwarded,
                    int(inputs["attention_mask"].sum()))
        if torch.is_grad_enabled():
            return self._shared(inputs, plan, self.scope)
        self.scope.states.update(trial_scope.states)  # no gradients: the trial's states are the ones to keep
        self._count(plan)
        return trial

    def _stock(self, inputs: dict, later: frozenset, final: bool):
        return self._release(self.stock(**inputs), later, final)

    def _release(self, out, later: frozenset, final: bool):
        """Drop the states no later forward needs; a dropped one's gathered gradient rides on ``out``'s log-probs."""
        if self.scope.states:
            out.log_probs = self.scope.release(out.log_probs, frozenset(), later, final, self._again)
        return out

    def _count(self, plan: "_Plan") -> None:
        """Each row's real tokens are its group's prefix and its segment: the forwards hold each prefix once."""
        self.saved_tokens += plan.saved

    def _shared(self, inputs: dict, plan: "_Plan", scope: PrefixScope, count: bool = True):
        self.guard.shared_calls += 1
        grad = torch.is_grad_enabled()
        for (key, prefix), prefix_inputs in zip(plan.new, plan.prefixes):
            # a page needed again later: its prefix forwarded alone (a graph of its own, run backward when the page
            # is done), every layer's keys and values kept. Recomputing (several processes), or with as many graphs
            # kept as this micro-batch has rows (the stock path holds that many prompts' graphs: the peak memory
            # stays below it), without gradients: its page's last forward holds it in its row again
            graphs = sum(state.again is None and state.anchor is not None for state in scope.states.values())
            again = grad and (self.guard.recompute or graphs >= len(inputs["input_ids"]))
            scope.states[key] = self._forward_prefix(prefix_inputs, prefix, grad and not again)
            scope.states[key].again = prefix_inputs if again else None
        layout = plan.layout(scope, torch.is_grad_enabled())
        with packed_call():
            out = self.model(**plan.packed, **{SHARED_PREFIX: layout})
        if count:
            self._count(plan)
        for name in ("log_probs", "entropy"):
            value = getattr(out, name, None)
            if value is not None:
                setattr(out, name, plan.unpack(value))
        if scope.states:
            out.log_probs = scope.release(out.log_probs, plan.present, plan.later, plan.final, self._again)
        return out

    def _forward_prefix(self, prefix_inputs: dict, prefix: int, graph: bool) -> PrefixState:
        """One page's prefix forwarded alone, every layer's keys and values captured; ``graph``: with gradients
        (and the forward's log-probs as the state's anchor)."""
        capture = _Capture((prefix,), graph)
        self.guard.prefix_forwards += 1
        with packed_call(), torch.set_grad_enabled(graph):
            anchor = self.model(**prefix_inputs, **{SHARED_PREFIX: capture}).log_probs
        layers = _unwrapped(self.model).config.get_text_config().num_hidden_layers
        if len(capture.keys_values) != layers:
            raise RuntimeError(f"the prefix forward captured {len(capture.keys_values)} of {layers} layers")
        return capture.states(anchor if graph else None)[0]

    def _again(self, state: PrefixState) -> None:
        """A recomputing state dropped by a forward that does not hold its page: its prefix forwarded again with
        gradients, so that its gathered gradient has a graph to go into."""
        fresh = self._forward_prefix(state.again, state.prefix, True)
        state.keys_values, state.anchor = fresh.keys_values, fresh.anchor


class _Plan:
    """One call's forwards: ``packed`` (the segments' row: the model's inputs) and where each completion's values
    land; ``prefixes`` (the inputs of a forward of each prefix of ``new``'s pages)."""

    def __init__(self, packed: dict, shape: tuple[int, int], rows: torch.Tensor, columns: torch.Tensor,
                 sources: torch.Tensor, groups: list, new: list, prefixes: list[dict], later: frozenset,
                 final: bool):
        self.packed, self.shape, self.rows, self.columns, self.sources = packed, shape, rows, columns, sources
        self.groups, self.new, self.prefixes, self.later, self.final = groups, new, prefixes, later, final
        self.present = {key for _, _, key, kind in groups if kind != "row"}
        self.forwarded = packed["input_ids"].shape[1] + sum(prefix for _, prefix in new)
        # each row's real tokens are its prefix and its segment; forwarded: the in-row prefixes and the new ones
        self.saved = sum(len(segments) * prefix for prefix, segments, _, _ in groups) - sum(
            prefix for prefix, _, _, kind in groups if kind in ("row", "again")) - sum(prefix for _, prefix in new)

    def layout(self, scope: PrefixScope, grad: bool) -> _Layout:
        """The attention's layout: an in-row group ``(prefix, segments)``; a kept page's ``(0, segments, source)``
        reading its state as ``graph`` (no gradients), ``leaf`` (a later forward needs it) or ``inject`` (its last);
        a recomputing page's last ``(prefix, segments, source)``: in the row again, the leaves' gradients added."""
        entries = []
        for prefix, segments, key, kind in self.groups:
            if kind == "row":
                entries.append((prefix, segments))
                continue
            state = scope.states[key]
            if state.prefix != prefix:
                raise RuntimeError(f"a kept prefix of {state.prefix} tokens for a page prompt of {prefix + 1}")
            if kind == "again":
                entries.append((prefix, segments, state.source("again")))
                continue
            needed = not self.final and key in self.later
            mode = "graph" if not grad else ("leaf" if needed else "inject")
            entries.append((0, segments, state.source(mode)))
        return _Layout(tuple(entries))

    def unpack(self, per_token: torch.Tensor) -> torch.Tensor:
        """(1, T - 1) values of the packed row (value k scoring packed token k + 1) -> TRL's (rows, length - 1),
        value j of a row scoring its token j + 1, zeros where no completion token is."""
        shifted = torch.cat([per_token.new_zeros(1), per_token[0]])  # shifted[k] scores packed token k
        out = per_token.new_zeros(self.shape)
        out = out.index_put((self.rows, self.columns), shifted[self.sources])
        return out[:, 1:]


def _plan(model, inputs: dict, width: int, keys: list | None = None, scope: PrefixScope | None = None,
          later: frozenset = frozenset(), final: bool = True) -> _Plan | None:
    """The forwards of one call, or None where the stock forward must run (see the module docstring). ``keys``:
    the rows' page keys (None: grouped by their contents here); a page with a state in ``scope`` attends to it, one
    needed by a later forward (in ``later``, not ``final``) gets one, the others hold their prefix in the row."""
    if not inputs.get("fused_lm_head") or set(inputs) - _PACKABLE_INPUTS or inputs.get("attention_mask") is None:
        return None
    if inputs.get("output_router_logits"):
        return None
    base = _unwrapped(model)
    inner = _inner(model)
    if inner is None or base.config.get_text_config()._attn_implementation != PACKED_SDPA:
        return None
    input_ids, attention_mask, labels = inputs["input_ids"], inputs["attention_mask"], inputs["labels"]
    rows, length = input_ids.shape
    prompt_width = length - width
    mask = attention_mask.bool()
    prompt_lengths = mask[:, :prompt_width].sum(1).tolist()
    if prompt_width < 2 or min(prompt_lengths) < 2:
        return None
    pixel_values, grids = inputs.get("pixel_values"), inputs.get("image_grid_thw")
    images = None
    if pixel_values is not None:
        if grids is None or len(grids) != rows:
            return None  # one page image per row, or the stock forward
        ends = torch.cumsum(grids.prod(-1), 0).tolist()
        images = [(grids[r], pixel_values[(ends[r - 1] if r else 0):ends[r]]) for r in range(rows)]
    image_token = getattr(base.config, "image_token_id", None)
    if image_token is not None and bool((input_ids[:, prompt_width - 1] == image_token).any()):
        return None
    if keys is None:
        prompts = [input_ids[r, :prompt_width][mask[r, :prompt_width]] for r in range(rows)]
        groups = _groups(prompts, images)
        keys = [None] * rows
    else:
        by_key: dict = {}
        for row, key in enumerate(keys):
            by_key.setdefault(key, []).append(row)
        groups = list(by_key.values())
    states = scope.states if scope is not None else {}
    kinds = []
    for group in groups:
        key = keys[group[0]]
        if key is not None and key in states:
            done = final or key not in later
            kinds.append("again" if done and torch.is_grad_enabled() and states[key].again is not None else "state")
        elif key is not None and not final and key in later:
            kinds.append("new")
        else:
            kinds.append("row")
    if all(kind == "row" and len(group) == 1 for kind, group in zip(kinds, groups)):
        return None  # nothing to share: the stock forward
    positions = inner.compute_3d_position_ids(
        input_ids=input_ids, image_grid_thw=grids, video_grid_thw=None, inputs_embeds=None,
        attention_mask=attention_mask, past_key_values=None, mm_token_type_ids=inputs.get("mm_token_type_ids"))
    if positions is None:
        positions = torch.arange(length, device=input_ids.device).view(1, 1, -1).expand(3, rows, -1)
    return _pack(inputs, groups, [keys[g[0]] for g in groups], kinds, images, positions, prompt_width, mask, labels,
                 no_mask(model), later, final)


def _pack(inputs, groups, keys, kinds, images, positions, prompt_width, mask, labels, attention_mask, later,
          final) -> _Plan:
    """Lay the groups out (an in-row group's prefix, then each member's segment; a kept page's segments alone),
    record where each completion's values go, and the prefixes to forward for the new kept pages."""
    input_ids = inputs["input_ids"]
    device = input_ids.device
    ids, labs, pos, text_pos, layout = [], [], [], [], []
    rows_idx, cols_idx, src_idx = [], [], []
    new, new_ids, new_pos, new_images = [], [], [], []
    offset = 0
    for group, key, kind in zip(groups, keys, kinds):
        first = group[0]
        keep = mask[first]
        prefix = int(keep[:prompt_width].sum()) - 1
        if kind in ("row", "again"):
            ids.append(input_ids[first][keep][:prefix])
            labs.append(labels[first][keep][:prefix])
            pos.append(positions[:, first][:, keep][:, :prefix])
            text_pos.append(torch.arange(prefix, device=device))
            offset += prefix
        elif kind == "new":
            new.append((key, prefix))
            new_ids.append(input_ids[first][keep][:prefix])
            new_pos.append(torch.cat([torch.arange(prefix, device=device)[None],
                                      positions[:, first][:, keep][:, :prefix]]))
            if images is not None:
                new_images.append(images[first])
        segments = []
        for row in group:
            keep = mask[row]
            segment_ids = input_ids[row][keep][prefix:]
            n = len(segment_ids)  # the prompt's last token + the completion
            ids.append(segment_ids)
            labs.append(labels[row][keep][prefix:])
            pos.append(positions[:, row][:, keep][:, prefix:])
            text_pos.append(torch.arange(prefix, prefix + n, device=device))
            completion_columns = torch.nonzero(keep[prompt_width:]).flatten() + prompt_width
            rows_idx.append(torch.full((n - 1,), row, device=device))
            cols_idx.append(completion_columns)
            src_idx.append(torch.arange(offset + 1, offset + n, device=device))
            segments.append(n)
            offset += n
        layout.append((prefix, tuple(segments), key, kind))
    packed = {
        "input_ids": torch.cat(ids).unsqueeze(0),
        "attention_mask": attention_mask,  # none to build: the layout is the attention's
        "position_ids": torch.cat([torch.cat(text_pos)[None], torch.cat(pos, dim=1)]).unsqueeze(1),  # (4, 1, T)
        "labels": torch.cat(labs).unsqueeze(0),
        "fused_lm_head": True,
    }
    row_images = [images[g[0]] for g, kind in zip(groups, kinds) if kind in ("row", "again")] if images is not None \
        else []
    if row_images:
        packed["pixel_values"] = torch.cat([pixels for _, pixels in row_images])
        packed["image_grid_thw"] = torch.stack([grid for grid, _ in row_images])
    # each new kept page's prefix, all its labels -100 (what counts is the layers' keys and values; on a GPU the fused
    # head scores none of its tokens)
    prefixes = [{"input_ids": ids[None], "attention_mask": attention_mask, "position_ids": positions_[:, None],
                 "labels": torch.full_like(ids, -100)[None], "fused_lm_head": True}
                for ids, positions_ in zip(new_ids, new_pos)]
    for prefix_inputs, (grid, pixels) in zip(prefixes, new_images):
        prefix_inputs.update(pixel_values=pixels, image_grid_thw=grid[None])
    return _Plan(packed, tuple(mask.shape), torch.cat(rows_idx), torch.cat(cols_idx), torch.cat(src_idx), layout,
                 new, prefixes, later, final)
