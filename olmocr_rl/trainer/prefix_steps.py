"""The shared prefix across forwards (``--shared_prefix``): a page prompt's keys and values kept from one forward to
the next, so that the prompt goes through the language model once per optimizer step even where its G completions
are trained one micro-batch at a time (olmOCR 2's ``--per_device_train_batch_size 1`` x G accumulation steps).

trainer/shared_prefix.py runs the forwards; this module keeps what lives between them.

1. Where a page is used again later in the same scope, its prompt less the last token (the prefix) is forwarded
   alone once, and the pack-aware attention captures every text layer's keys and values, after the rotary
   embedding (:class:`PrefixState`). Each later forward's segments (the prompt's last token and a completion)
   attend to them, as they attend to the prefix of their own row in the stock forward.
2. With gradients (a gradient-accumulation window) the segments attend to leaf copies of those keys and values
   (detached, the same storage): each micro-step's backward leaves its gradient in the leaves and stops there,
   and the prefix's graph (the vision tower's included) is kept. In the page's last micro-step the segments attend
   to the graph's own keys and values through :class:`_Inject`, whose backward adds what the leaves gathered, so
   that micro-step's one backward runs through the prefix once with the sum of every micro-step's gradient. The
   stock path runs the same sum, one backward of the prompt per micro-step: the accumulated gradients are the
   same up to float rounding. A state whose page has no forward left in the window is attached to the output of
   the window's next forward instead (:class:`_Attach`), to the same effect.
3. The scope is one TRL call without gradients (old-policy and reference log-probs, which TRL runs in chunks of
   per_device_train_batch_size rows), or one gradient-accumulation window. Nothing outlives it: the window's last
   micro-step (``accelerator.sync_gradients``) consumes every state, so the optimizer step sees every gradient and
   the next window forwards the prompt again with the new weights. There is one backward per micro-step, as in
   the stock path, so DDP, FSDP2 and DeepSpeed reduce the gradients where they always do.
4. :class:`WindowPlan` chooses which of TRL's buffered micro-batches each micro-step of a window trains. TRL
   shuffles a generation batch and splits it into micro-batches; within one window their order changes no
   gradient (the window's gradients are summed, whatever the loss type), so the plan serves them page by page:
   a page's micro-batches follow each other, its state lives only while they run, and its last one consumes it.
   Its ``later`` (the pages the window's remaining micro-steps train) is what the forwards read in step 1.
"""

from __future__ import annotations

import torch

__all__ = ["PrefixScope", "PrefixState", "WindowPlan", "page_keys"]


def _groups(prompts: list[torch.Tensor], images: list | None) -> list[list[int]]:
    """Rows with identical prompts (tokens, and image grid and pixels where there are images), first seen first."""
    groups: list[list[int]] = []
    for row, tokens in enumerate(prompts):
        for group in groups:
            first = group[0]
            if torch.equal(prompts[first], tokens) and (images is None or all(
                    torch.equal(a, b) for a, b in zip(images[first], images[row]))):
                group.append(row)
                break
        else:
            groups.append([row])
    return groups


def page_keys(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, pixel_values=None, image_grid_thw=None,
              tag=None) -> list:
    """A key per row, equal for the rows with the same page prompt (tokens, image grid and pixels: compared
    exactly, no digest): ``(tag, n)``, n numbering the prompts in order of first appearance. Rows whose images
    are not one per row get keys of their own (they are never shared)."""
    rows = len(prompt_ids)
    prompts = [prompt_ids[r][prompt_mask[r].bool()] for r in range(rows)]
    images = None
    if pixel_values is not None:
        if image_grid_thw is None or len(image_grid_thw) != rows:
            return [(tag, "alone", r) for r in range(rows)]
        ends = torch.cumsum(image_grid_thw.prod(-1), 0).tolist()
        images = [(image_grid_thw[r], pixel_values[(ends[r - 1] if r else 0):ends[r]]) for r in range(rows)]
    keys: list = [None] * rows
    for number, group in enumerate(_groups(prompts, images)):
        for row in group:
            keys[row] = (tag, number)
    return keys


class _Inject(torch.autograd.Function):
    """The graph's keys (or values) of a prefix, unchanged; the backward adds the gradient its leaf gathered in the
    earlier micro-steps to this one's, so the prefix's graph is run backward once with their sum."""

    @staticmethod
    def forward(ctx, tensor, holder):
        ctx.holder = holder
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        earlier = ctx.holder.grad
        return (grad if earlier is None else grad + earlier), None


class _Attach(torch.autograd.Function):
    """``out`` unchanged; the backward also sends each leaf's gathered gradient into its prefix graph's tensor, and
    zeros into the tensors without a leaf (a prefix forward's own log-probs: see PrefixState)."""

    @staticmethod
    def forward(ctx, out, leaves, *tensors):
        ctx.leaves, ctx.zeros = leaves, [(t.shape, t.dtype, t.device) for t in tensors]
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        sent = (leaf.grad if leaf is not None else torch.zeros(shape, dtype=dtype, device=device)
                for leaf, (shape, dtype, device) in zip(ctx.leaves, ctx.zeros))
        return (grad, None, *sent)


class PrefixState:
    """One page's prefix, forwarded once: every text layer's keys and values (1, kv heads, prefix, head dim), and the
    leaves the segments of the micro-steps before the page's last attend to (made on first use). ``anchor``: the
    prefix forward's log-probs (all masked: zeros), sent a zero gradient when the state is done, so that every
    parameter the stock path's prompt positions reach gets a gradient (zero where theirs is: e.g. a deepstack
    feature added after the last layer whose keys are read), never None (an optimizer skips None, not zero)."""

    def __init__(self, keys_values: dict[int, tuple[torch.Tensor, torch.Tensor]], prefix: int, anchor=None,
                 again: dict | None = None):
        self.keys_values, self.prefix, self.anchor = keys_values, prefix, anchor
        self.leaves: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # recomputing (several processes): the prefix forward's inputs; its keys and values came without gradients,
        # and the page's last forward holds the prefix in its row again, with gradients (see _Source)
        self.again = again

    def source(self, mode: str) -> "_Source":
        """What one forward's attention reads: ``graph`` (no gradients, or the page's only forward), ``leaf`` (a
        micro-step before the page's last), ``inject`` (its last, after leaf ones) or ``again`` (its last when
        recomputing: the prefix in the forward's own row, its keys and values with the leaves' gradients added)."""
        return _Source(self, mode)

    def pending(self, done: bool = False) -> tuple[list[torch.Tensor], list]:
        """The graph's tensors and the leaves whose gathered gradient has not been sent into them yet (none when
        ``done``: a forward injected it), and the anchor (leaf None: a zero gradient)."""
        tensors, leaves = [], []
        for layer, pair in self.leaves.items() if not done else ():
            for graph, leaf in zip(self.keys_values[layer], pair):
                if leaf.grad is not None:
                    tensors.append(graph)
                    leaves.append(leaf)
        if self.anchor is not None and self.anchor.requires_grad:
            tensors.append(self.anchor)
            leaves.append(None)
        return tensors, leaves


class _Source:
    """A prefix's keys and values as one forward reads them, per layer; the same tensors when a layer's forward is
    replayed in the backward (gradient checkpointing)."""

    def __init__(self, state: PrefixState, mode: str):
        self.state, self.mode = state, mode
        self.served: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def keys_values(self, module, keys=None, values=None) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's prefix keys and values; mode ``again``: ``keys``/``values`` (the row's) with the leaves'
        gathered gradients added in the backward."""
        layer = module.layer_idx
        if self.mode == "again":
            leaves = self.state.leaves.get(layer, (None, None))
            return tuple(_Inject.apply(t, leaf) if leaf is not None else t for t, leaf in zip((keys, values), leaves))
        if layer not in self.served:
            graph = self.state.keys_values[layer]
            if self.mode == "graph":
                self.served[layer] = graph
            elif self.mode == "leaf":
                if layer not in self.state.leaves:  # recomputing: no graph yet, the gradient is wanted all the same
                    wanted = self.state.again is not None or graph[0].requires_grad
                    self.state.leaves[layer] = tuple(t.detach().requires_grad_(wanted) for t in graph)
                self.served[layer] = self.state.leaves[layer]
            else:  # inject: the graph's tensors, with the leaves' gradients added in the backward
                leaves = self.state.leaves.get(layer, (None, None))
                self.served[layer] = tuple(_Inject.apply(t, leaf) if leaf is not None else t
                                           for t, leaf in zip(graph, leaves))
        return self.served[layer]


class PrefixScope:
    """The prefix states of one scope (one TRL call without gradients, or one gradient-accumulation window), by
    page key."""

    def __init__(self):
        self.states: dict = {}

    def release(self, out: torch.Tensor | None, present: set, later: frozenset, final: bool,
                again=None) -> torch.Tensor | None:
        """After a forward: drop every state not needed by a later forward of the scope (all of them when
        ``final``). A dropped state the forward did not read (not in ``present``) with gathered gradients is
        attached to ``out`` (the forward's log-probs): the loss's backward then runs its prefix's graph. Those the
        forward read (``inject`` mode) are done but for their anchor. A recomputing state has no graph to attach:
        ``again(state)`` forwards its prefix with gradients first. Returns ``out``, attached where needed."""
        tensors, leaves = [], []
        for key in list(self.states):
            if not final and key in later:
                continue
            state = self.states.pop(key)
            if key not in present and state.again is not None and state.leaves and again is not None:
                again(state)
            more = state.pending(done=key in present)
            tensors += more[0]
            leaves += more[1]
        if leaves:
            if out is None or not out.requires_grad:
                raise RuntimeError("a prefix's gathered gradient has no backward to go into")
            out = _Attach.apply(out, leaves, *tensors)
        return out


class WindowPlan:
    """Which of TRL's buffered micro-batches each micro-step of a gradient-accumulation window trains (page by
    page), and the page keys of each: ``current`` (this micro-step's rows), ``later`` (the pages of the window's
    remaining micro-steps, up to the next generation batch)."""

    def __init__(self):
        self.buffer = None
        self.keys: list[list] = []
        self.serial = 0
        self.position = 0  # micro-steps done in the current window
        self.order: dict[int, int] = {}  # micro-step -> buffered micro-batch
        self.current: list | None = None
        self.later: frozenset = frozenset()

    def serve(self, buffer: list[dict], step: int, steps_per_generation: int, generate_every: int, window: int,
              window_ends: bool) -> int:
        """The index in ``buffer`` (TRL's buffered micro-batches) that micro-step ``step`` trains: TRL's own
        (``step % steps_per_generation``) permuted within the window's micro-steps of this buffer. ``window``: the
        window's micro-steps; ``window_ends``: this micro-step is its last."""
        if buffer is not self.buffer:
            self.buffer, self.serial, self.order = buffer, self.serial + 1, {}
            self.keys = _buffer_keys(buffer, self.serial)
        if self.position == 0 or step not in self.order:
            steps = [step]
            while len(steps) < window - self.position and (steps[-1] + 1) % generate_every:
                steps.append(steps[-1] + 1)
            slots = [s % steps_per_generation for s in steps]
            rank: dict = {}
            for slot in slots:
                for key in self.keys[slot]:
                    rank.setdefault(key, len(rank))
            ordered = sorted(slots, key=lambda slot: min(rank[key] for key in self.keys[slot]))  # stable
            self.order = dict(zip(steps, ordered))
        index = self.order[step]
        self.current = self.keys[index]
        self.later = frozenset(key for s, slot in self.order.items() if s > step for key in self.keys[slot])
        self.position = 0 if window_ends else self.position + 1
        return index


def _buffer_keys(buffer: list[dict], tag) -> list[list]:
    """The page keys of every row of TRL's buffered micro-batches, one numbering over all of them."""
    from trl.trainer.utils import pad

    rows = [len(batch["prompt_ids"]) for batch in buffer]
    prompts = [ids[mask.bool()] for batch in buffer for ids, mask in zip(batch["prompt_ids"], batch["prompt_mask"])]
    mask = [torch.ones_like(p) for p in prompts]
    pixels = [batch.get("pixel_values") for batch in buffer]
    grids = [batch.get("image_grid_thw") for batch in buffer]
    images = {}
    if all(p is not None for p in pixels) and all(g is not None and len(g) == n for g, n in zip(grids, rows)):
        images = {"pixel_values": torch.cat(pixels), "image_grid_thw": torch.cat(grids)}
    elif any(p is not None for p in pixels):
        return [[(tag, "alone", i, r) for r in range(n)] for i, n in enumerate(rows)]
    keys = page_keys(pad(prompts, 0), pad(mask, 0), images.get("pixel_values"), images.get("image_grid_thw"), tag)
    out, start = [], 0
    for n in rows:
        out.append(keys[start:start + n])
        start += n
    return out
