"""--shared_prefix across forwards (trainer/prefix_steps.py): a page prompt forwarded once for all the chunks of a
no-gradient call and all the micro-steps of a gradient-accumulation window gives the stock path's log-probs,
entropies and accumulated gradients; the window plan serves a window's micro-batches page by page."""

from __future__ import annotations

import copy

import pytest
import torch
from test_padding_free import _page, models, qwen3_models  # noqa: F401  (pytest fixtures)
from test_padding_free import _trl_batch as trl_batch
from test_shared_prefix import _assert_same, lora_models  # noqa: F401  (pytest fixture)

from olmocr_rl.trainer.prefix_steps import PrefixScope, WindowPlan, page_keys
from olmocr_rl.trainer.shared_prefix import SharedPrefixForward, SharedPrefixGuard

PAGES = [(56, 56, 0)] * 3 + [(112, 84, 1)] * 3  # two pages of three completions each
LENGTHS = (5, 11, 2, 8, 1, 8)


def _rows(inputs: dict, rows: list[int]) -> dict:
    """The micro-batch of ``rows`` of a TRL block (pixel values by each row's image grid)."""
    ends = torch.cumsum(inputs["image_grid_thw"].prod(-1), 0).tolist()
    out = {key: value[rows] if isinstance(value, torch.Tensor) else value for key, value in inputs.items()}
    out["pixel_values"] = torch.cat([inputs["pixel_values"][(ends[r - 1] if r else 0):ends[r]] for r in rows])
    return out


def _window(model, inputs, width: int, order: list[int], batch: int, shared: bool, later=None, recompute=False):
    """The micro-steps of one window (rows ``order``, ``batch`` a micro-batch; ``width`` completion columns), each
    forward then backward of its log-probs and entropies, gradients accumulated: (per-row log-probs, entropies,
    gradients), the tokens each forward gave the language model, and the scope and guard (shared). ``later``: the
    hint of each micro-step (default: the pages of the window's later micro-steps); ``recompute``: as several
    processes run it (the prompt forwarded without gradients, and again with them in its page's last micro-step)."""
    keys = page_keys(inputs["input_ids"][:, :-width], inputs["attention_mask"][:, :-width], inputs["pixel_values"],
                     inputs["image_grid_thw"], tag="test")
    micro = [order[i:i + batch] for i in range(0, len(order), batch)]
    guard, scope, seen = SharedPrefixGuard(), PrefixScope(), []
    guard.checked = True  # the forwards themselves (the first-use check has its own tests)
    guard.recompute = recompute
    hook = model.get_input_embeddings().register_forward_hook(lambda module, args, out: seen.append(args[0].numel()))
    model.zero_grad()
    logps, entropy = torch.zeros(inputs["input_ids"].shape), torch.zeros(inputs["input_ids"].shape)
    try:
        for step, rows in enumerate(micro):
            part = _rows(inputs, rows)
            if shared:
                ahead = frozenset(keys[r] for m in micro[step + 1:] for r in m) if later is None else later(step)
                call = SharedPrefixForward(model, model, width, guard, pages=[keys[r] for r in rows], scope=scope,
                                           later=ahead, final=step == len(micro) - 1)
                out = call(**part)
            else:
                out = model(**part)
            mask = part["attention_mask"][:, -width:]
            ((out.log_probs[:, -width:] * mask).sum() + out.entropy[:, -width:].mean()).backward()
            logps[rows, 1:], entropy[rows, 1:] = out.log_probs.detach(), out.entropy.detach()
    finally:
        hook.remove()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return (logps, entropy, grads), seen, scope, guard


def _both(models, order, batch, later=None, pages=PAGES, lengths=LENGTHS, recompute=False):
    stock, shared, processor = models
    inputs, completion_mask = trl_batch(processor, lengths, [_page(*p) for p in pages])
    width = completion_mask.shape[1]
    mine, seen, scope, guard = _window(shared, inputs, width, order, batch, True, later, recompute)
    theirs, stock_seen, _, _ = _window(stock, inputs, width, order, batch, False)
    assert not scope.states  # the window's last micro-step consumed every page's prompt
    return mine, theirs, seen, stock_seen, guard


@pytest.mark.parametrize("recompute", [False, True], ids=["kept", "recomputed"])
@pytest.mark.parametrize("order, batch, second", [(list(range(6)), 1, None), ([3, 0, 4, 1, 5, 2], 1, 0),
                                                  ([0, 3, 1, 4, 2, 5], 2, None)],
                         ids=["page by page", "pages alternating", "two pages a micro-batch"])
def test_a_window_forwards_each_page_prompt_once_and_accumulates_the_stock_gradients(models, order, batch, second,
                                                                                     recompute):
    """One process keeps the prompt's graph from its first forward to its page's last, as many graphs at a time as a
    micro-batch has rows (the stock path's peak: pages alternating one a micro-batch, the ``second`` page to come,
    A, is recomputed); several processes forward every prompt without gradients, then again with them in the page's last
    micro-step (no graph outlives a micro-step)."""
    mine, theirs, seen, stock_seen, guard = _both(models, order, batch, recompute=recompute)
    _assert_same(mine, theirs)  # log-probs, entropies and every gradient, the vision tower's included
    assert guard.shared_calls == len(order) // batch  # every micro-step shared
    prompts = _prompt_lengths(models)
    # each page's prompt (less its last token) once (recomputed: twice), then every completion with its last token
    twice = [recompute or second == page for page in (0, 1)]
    assert sum(seen) == sum((1 + again) * (p - 1) for p, again in zip(prompts, twice)) + sum(n + 1 for n in LENGTHS)


@pytest.mark.parametrize("case", ["qwen3_vl", "lora", "frozen_tower"])
def test_every_family_and_arm_accumulates_the_stock_gradients(models, qwen3_models, lora_models, case):
    """Qwen3-VL dense and MoE (deepstack features, the text model's own mask), LoRA on the language model's
    projections, and the vision tower frozen (--freeze_vision_tower): a window of one completion a micro-step."""
    pair = {"qwen3_vl": qwen3_models, "lora": lora_models, "frozen_tower": models}[case]
    frozen = [p for model in pair[:2] for name, p in model.named_parameters() if "visual" in name] \
        if case == "frozen_tower" else []
    try:
        for parameter in frozen:
            parameter.requires_grad_(False)
        mine, theirs, _, _, _ = _both(pair, [0, 1, 2, 3, 4, 5], 1)
    finally:
        for parameter in frozen:
            parameter.requires_grad_(True)
    trained, untrained = {"lora": ("lora_", "visual"), "frozen_tower": ("language_model", "visual")}.get(
        case, ("visual", None))
    _assert_same(mine, theirs, trained=trained, untrained=untrained)


@pytest.mark.parametrize("recompute", [False, True], ids=["kept", "recomputed"])
def test_a_wrong_hint_about_later_forwards_is_still_exact(models, recompute):
    """The hints only save memory. Rows A, B, A, B, one a micro-step: A said to come back, then not (its prompt's
    gradient rides on B's stock forward: _Attach), then said to come back again (forwarded again) and left to the
    window's last micro-step, which does not hold it (attached there; recomputed, forwarded with gradients there to
    take it): the stock gradients."""
    page_a = frozenset({("test", 0)})  # the pages are keyed by content, in order of first appearance
    hints = {0: page_a, 1: frozenset(), 2: page_a, 3: frozenset()}
    mine, theirs, seen, _, guard = _both(models, [0, 2, 1, 3], 1, later=hints.__getitem__,
                                         pages=PAGES[:2] + PAGES[3:5], lengths=LENGTHS[:4], recompute=recompute)
    _assert_same(mine, theirs)
    assert guard.shared_calls == 2  # A's micro-steps; B's rows share nothing (stock forwards)


def test_layers_recomputing_in_the_backward_replay_the_kept_prefix(models):
    """--gradient_checkpointing: a layer replays its forward in the backward; the prefix's layers (run backward in
    the page's last micro-step) replay its capture, the segments' layers read the same leaves and injected tensors."""
    from olmocr_rl.model.grad_checkpointing import CheckpointPlan, apply_checkpointing

    stock, shared, processor = models
    recomputing = copy.deepcopy(shared).train()
    layers = len(recomputing.model.language_model.layers)
    assert apply_checkpointing(recomputing, CheckpointPlan(mode="partial", text_layers=layers, reason="test"))
    replays = []
    for layer in recomputing.model.language_model.layers:
        layer.self_attn.register_forward_pre_hook(lambda module, args: replays.append(torch.is_grad_enabled()))
    mine, theirs, _, _, _ = _both((stock, recomputing, processor), [0, 1, 2, 3, 4, 5], 1)
    _assert_same(mine, theirs)
    # 2 prefix forwards and 6 segment forwards, each layer's attention replayed once in the backward
    assert replays == [True] * (2 * layers * (2 + 6))


def test_a_call_without_gradients_forwards_each_page_prompt_once_over_its_chunks(models):
    """TRL's old-policy and reference log-probs: the whole generation batch in chunks of
    per_device_train_batch_size rows, one stand-in for the call."""
    stock, shared, processor = models
    inputs, completion_mask = trl_batch(processor, LENGTHS, [_page(*p) for p in PAGES])
    width = completion_mask.shape[1]
    keys = page_keys(inputs["input_ids"][:, :-width], inputs["attention_mask"][:, :-width], inputs["pixel_values"],
                     inputs["image_grid_thw"])
    guard = SharedPrefixGuard()
    call = SharedPrefixForward(shared, stock, width, guard, pages=keys)
    seen = []
    hook = shared.get_input_embeddings().register_forward_hook(lambda module, args, out: seen.append(args[0].numel()))
    with torch.no_grad():
        mine = [call(**_rows(inputs, [r])) for r in range(len(LENGTHS))]  # chunks of one row
        theirs = stock(**inputs)
    hook.remove()
    assert guard.checked and not guard.off and not call.scope.states
    for row, out in enumerate(mine):
        torch.testing.assert_close(out.log_probs[0, -width:], theirs.log_probs[row, -width:], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.entropy[0, -width:], theirs.entropy[row, -width:], rtol=1e-5, atol=1e-5)
    prompts = _prompt_lengths(models)
    assert sum(seen) == sum(p - 1 for p in prompts) + sum(n + 1 for n in LENGTHS)
    assert call.saved_tokens == sum(3 * p for p in prompts) + sum(LENGTHS) - sum(seen)


def _prompt_lengths(models) -> list[int]:
    """The two pages' prompt lengths (tokens)."""
    processor = models[2]
    inputs, completion_mask = trl_batch(processor, (1, 1), [_page(*PAGES[0]), _page(*PAGES[3])])
    return inputs["attention_mask"][:, :-completion_mask.shape[1]].sum(1).tolist()


def _buffer(pages: list[str]) -> list[dict]:
    """TRL's buffered micro-batches of one row each, the page of each row a one-token prompt."""
    return [{"prompt_ids": torch.tensor([[ord(page)]]), "prompt_mask": torch.ones(1, 1)} for page in pages]


def test_the_window_plan_serves_each_window_page_by_page():
    plan = WindowPlan()
    buffer = _buffer(list("ABAB" "BCBC"))  # a generation batch of two windows of 4 micro-steps
    served, later = [], []
    for step in range(8):
        index = plan.serve(buffer, step, steps_per_generation=8, generate_every=8, window=4, window_ends=step % 4 == 3)
        served.append("ABABBCBC"[index])
        later.append({"ABC"[key[1]] for key in plan.later})  # keys number the pages in order of first appearance
    assert served == list("AABB" "BBCC")  # a window's micro-batches reordered, never moved to another window
    assert sorted(served[:4]) == sorted("ABAB") and sorted(served[4:]) == sorted("BCBC")
    assert later[:4] == [{"A", "B"}, {"B"}, {"B"}, set()] and later[4:] == [{"B", "C"}, {"C"}, {"C"}, set()]
    # a window running into the next generation batch: planned up to it, then the new batch's rest of the window
    plan = WindowPlan()
    first, second = _buffer(list("ABAB")), _buffer(list("CDCD"))
    served = [plan.serve(first, s, 4, 4, window=8, window_ends=False) for s in range(4)]
    assert plan.later == frozenset()  # the next batch's pages are not known yet
    served += [plan.serve(second, s, 4, 4, window=8, window_ends=s == 7) for s in range(4, 8)]
    assert served == [0, 2, 1, 3, 0, 2, 1, 3] and plan.position == 0
