"""--shared_prefix: one forward per group prompt gives the stock forward's log-probs, entropies and gradients."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
# test_padding_free's fixtures (the stock model, and a copy with the pack-aware SDPA the shared layout runs through)
from test_padding_free import _page, models, qwen3_models  # noqa: F401
from test_padding_free import _trl_batch as trl_batch

from olmocr_rl.model import fallback
from olmocr_rl.trainer.padding_free import PackedForward, install_padding_free
from olmocr_rl.trainer.shared_prefix import SharedPrefixForward, SharedPrefixGuard, shared_prefix_problem


def _trl_batch(processor, pages, completion_lengths, seed=2):
    """test_padding_free's micro-batch of these pages and completion lengths: (inputs, completion width)."""
    inputs, completion_mask = trl_batch(processor, completion_lengths, pages, seed)
    return inputs, completion_mask.shape[1]


def _run(call, parameters, inputs, width):
    """Completion log-probs and entropies (TRL's slice) and the parameter gradients of their masked sum."""
    parameters.zero_grad()
    out = call(**inputs)
    logps, entropy = out.log_probs[:, -width:], out.entropy[:, -width:]
    completion_mask = inputs["attention_mask"][:, -width:]
    (logps * completion_mask).sum().backward()
    grads = {name: p.grad.clone() for name, p in parameters.named_parameters() if p.grad is not None}
    return logps.detach(), entropy.detach(), grads


def _assert_same(mine, theirs, trained: str = "visual", untrained: str | None = None):
    """Log-probs, entropies and gradients equal; the gradients' names include ``trained`` (and never ``untrained``)
    in both paths."""
    torch.testing.assert_close(mine[0], theirs[0], rtol=1e-5, atol=1e-5)  # log-probs, zeros at padding included
    torch.testing.assert_close(mine[1], theirs[1], rtol=1e-5, atol=1e-5)  # entropies
    assert mine[2].keys() == theirs[2].keys() and any(trained in name for name in mine[2])
    assert untrained is None or not any(untrained in name for name in mine[2])
    for name in theirs[2]:
        # float32 sums in another order: the error scales with the gradient's size; a wrong layout is off by O(1)
        scale = max(1.0, float(theirs[2][name].abs().max()))
        torch.testing.assert_close(mine[2][name], theirs[2][name], rtol=1e-4, atol=2e-6 * scale, msg=name)


LORA_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)"  # the language model's attention projections
GROUPS = [  # (pages as (height, width, seed), completion lengths): two pages of two different sizes
    ([(56, 56, 0)] * 3 + [(112, 84, 1)] * 3, (5, 11, 2, 8, 1, 8)),
    ([(56, 56, 0), (56, 56, 0), (56, 56, 3), (112, 84, 1)], (4, 9, 3, 6)),  # same size, other pixels: no partner
]


def _both_paths(models, case):
    """GROUPS[case] through the shared forward (which must not fall back) and the stock one: (mine, theirs)."""
    stock, shared, processor = models
    pages, lengths = GROUPS[case]
    inputs, width = _trl_batch(processor, [_page(*p) for p in pages], lengths)
    guard = SharedPrefixGuard()
    guard.checked = True  # the forward itself (the first-use check has its own test)
    call = SharedPrefixForward(shared, lambda **kw: pytest.fail("the stock path ran"), width, guard)
    mine = _run(call, shared, inputs, width)
    theirs = _run(stock, stock, inputs, width)
    assert guard.shared_calls == 1
    return mine, theirs


@pytest.mark.parametrize("segment_calls", ["split", "padded", "each"])
@pytest.mark.parametrize("case", range(len(GROUPS)))
def test_shared_forward_equals_the_stock_forward(models, case, segment_calls, monkeypatch):
    """Every way of attending a group's segments: on CPU the prefix and own parts as two kernels merged by their
    log-sum-exp (the default there), else one padded call (short completions, as here) or one call per segment (long
    ones: forced here by a threshold of one token)."""
    from olmocr_rl.trainer import prefix_attention

    if segment_calls != "split":
        monkeypatch.setattr(prefix_attention, "SPLIT_SEGMENT_ATTENTION", False)
    if segment_calls == "each":
        monkeypatch.setattr(prefix_attention, "SEGMENT_CALL_TOKENS", 1)
    calls = []
    names = {"split": "_segments_split", "each": "_each_segment", "padded": "_segments_padded"}
    for name in names.values():
        original = getattr(prefix_attention, name)
        monkeypatch.setattr(prefix_attention, name,
                            lambda *a, _name=name, _original=original, **k: calls.append(_name) or _original(*a, **k))
    _assert_same(*_both_paths(models, case))
    assert calls and set(calls) == {names[segment_calls]}


def test_tokens_forwarded_once_per_group(models):
    stock, shared, processor = models
    inputs, width = _trl_batch(processor, [_page(56, 56, 0)] * 4, (5, 11, 2, 8))
    seen = []
    hook = shared.get_input_embeddings().register_forward_hook(lambda module, args, out: seen.append(args[0].shape))
    guard = SharedPrefixGuard()
    guard.checked = True
    forward = SharedPrefixForward(shared, None, width, guard)
    with torch.no_grad():
        forward(**inputs)
    hook.remove()
    prompt = int(inputs["attention_mask"][0, :-width].sum())
    assert seen == [torch.Size([1, prompt - 1 + (5 + 11 + 2 + 8) + 4])]  # the prompt once, not 4 times
    # what it did not forward, for timing/shared_prefix_tokens: the rows' real tokens less the packed row's
    assert forward.saved_tokens == 4 * prompt + (5 + 11 + 2 + 8) - seen[0][1] == 3 * prompt - 3


def test_first_use_checks_itself_and_falls_back_with_one_line(models, monkeypatch, caplog):
    stock, shared, processor = models
    inputs, width = _trl_batch(processor, [_page(56, 56, 0)] * 2, (3, 5))
    guard = SharedPrefixGuard()
    call = SharedPrefixForward(shared, shared, width, guard)
    with torch.no_grad():
        good = call(**inputs)
    assert guard.checked and not guard.off and guard.shared_calls == 1  # no gradients: the check's trial is the result
    # a broken layout: the check sees it, says so once, and the stock result is what the caller gets
    from olmocr_rl.trainer import shared_prefix

    monkeypatch.setattr(shared_prefix, "shared_prefix_attention",
                        lambda module, q, k, v, layout, **kw: (torch.zeros_like(q).transpose(1, 2), None))
    guard = SharedPrefixGuard()
    caplog.set_level(logging.WARNING, logger="olmocr_rl.model.fallback")
    before = len(fallback.fallbacks())
    with torch.no_grad():
        result = SharedPrefixForward(shared, stock, width, guard)(**inputs)
        again = SharedPrefixForward(shared, stock, width, guard)(**inputs)
    assert guard.off and fallback.fallbacks()[before:][0][0] == "--shared_prefix" and len(fallback.fallbacks()) == before + 1
    torch.testing.assert_close(result.log_probs[:, -width:], good.log_probs[:, -width:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again.log_probs, result.log_probs)


STEPS = 20  # GRPO steps of each training (a generation batch every second step: num_iterations = 2)


def _train(model_dir, tmp_path, shared: bool, lora: bool = False, frozen_tower: bool = False, batch: int = 2,
           accumulation: int = 2, loss_type: str = "grpo", olmorl: bool = False):
    """STEPS GRPO steps of the tiny model (G = 4 completions of a page; two pages of different sizes; ``batch`` rows a
    micro-batch, ``accumulation`` micro-steps a step; the old-policy log-probs by num_iterations = 2, the reference
    model's by beta > 0 (not with ``olmorl``: OlmoRL's settings and trainer), with LoRA the base model with its
    adapters off; ``frozen_tower`` as --freeze_vision_tower, its features cached per step): the log history and the
    guards."""
    from datasets import Dataset
    from trl import GRPOConfig

    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.trainer.olmorl import OlmoRLGRPOTrainer, olmorl_config_overrides
    from olmocr_rl.trainer.plain import PlainGRPOTrainer
    from olmocr_rl.trainer.shared_prefix import install_shared_prefix

    model, processor = load_model_and_processor(str(model_dir))
    if frozen_tower:
        from olmocr_rl.model.frozen_vision import freeze_vision

        assert freeze_vision(model, tower=True, merger=False) > 0
    assert install_padding_free(model) is not None
    if shared:
        assert install_shared_prefix(model) is not None
    prompt = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    dataset = Dataset.from_list([{"prompt": prompt, "image": _page(56, 56, 0)}, {"prompt": prompt, "image": _page(84, 112, 1)}])
    objective = olmorl_config_overrides() if olmorl else {"beta": 0.04, "loss_type": loss_type}
    args = GRPOConfig(output_dir=str(tmp_path / f"shared{shared}"), report_to="none", use_cpu=True, bf16=False,
                      num_generations=4, per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
                      max_completion_length=8, num_iterations=2, logging_steps=1, max_steps=STEPS, seed=0,
                      save_strategy="no", learning_rate=1e-3, **objective)
    peft = None
    if lora:
        from peft import LoraConfig

        peft = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS)
    trainer = (OlmoRLGRPOTrainer if olmorl else PlainGRPOTrainer)(
        model=model, args=args, processing_class=processor, padding_free=True, shared_prefix=shared,
        shared_prefill=shared, train_dataset=dataset, peft_config=peft, cache_vision_features=frozen_tower,
        reward_funcs=[lambda completions, **kw: [float(len(c[0]["content"]) % 5) for c in completions]])
    trainer.train()
    return [entry for entry in trainer.state.log_history if "loss" in entry], trainer.shared_prefix, trainer.shared_prefill


def _assert_same_steps(shared: list[dict], stock: list[dict], keys=("loss", "grad_norm", "kl", "entropy")) -> None:
    assert len(stock) == len(shared) == STEPS
    assert [e.get("reward") for e in shared] == [e.get("reward") for e in stock]  # the same completions
    for mine, theirs in zip(shared, stock):
        for key in keys:
            assert float(mine[key]) == pytest.approx(float(theirs[key]), rel=1e-4, abs=1e-6), key
    assert any(abs(float(e["loss"])) > 0 for e in shared)
    assert len({float(e["reward"]) for e in stock if "reward" in e}) > 1  # the samples move: a real comparison


@pytest.mark.slow  # two GRPO trainings of 20 steps per arm: 2-5 s each
@pytest.mark.parametrize("arm", ["full", "lora", "frozen_tower", "qwen3_vl", "qwen3_vl_moe"])
def test_training_steps_equal_the_stock_path(tiny_model_dir, tiny_family_dir, tmp_path, arm):
    """Micro-batches of 2 completions, 2 a step: each page's prompt kept from the first micro-step to the second."""
    model_dir = tiny_family_dir(arm) if arm.startswith("qwen3") else tiny_model_dir  # the Qwen3-VL arms: full
    switches = dict(lora=arm == "lora", frozen_tower=arm == "frozen_tower")
    stock, _, _ = _train(model_dir, tmp_path, shared=False, **switches)
    shared, guard, prefill = _train(model_dir, tmp_path, shared=True, **switches)
    batches = STEPS // 2  # steps 1, 3, 5, ... generate; the others are the batch's second iteration
    # every forward shared its page's prompt: per generation batch the old-policy and the reference log-probs (two
    # chunks of 2 rows each), and the loss's 2 micro-steps of every step; the first one checked itself against the
    # stock forward. The MoE's loss forwards ask for router logits (TRL's load-balancing loss, on by the
    # architecture's coefficient): those take the stock path
    moe = arm == "qwen3_vl_moe"
    assert guard.checked and not guard.off and guard.shared_calls == 4 * batches + (0 if moe else 2 * STEPS)
    # the page prompt alone once for each call without gradients, and once a step for the loss
    assert guard.prefix_forwards == 2 * batches + (0 if moe else STEPS)
    # generation's prefill shared each batch's page prompt, and sampled the same completions
    assert prefill.checked and not prefill.off and prefill.shared_calls == prefill.prefilled == batches
    assert sum("reward" in e for e in stock) == batches
    _assert_same_steps(shared, stock)
    assert any(float(e["kl"]) > 0 for e in shared)


@pytest.mark.slow  # two GRPO trainings of 20 steps per loss: 2-4 s each
@pytest.mark.parametrize("loss, accumulation", [("grpo", 4), ("bnpo", 8), ("dr_grpo", 4), ("dapo", 4), ("olmorl", 4)])
def test_every_loss_trains_the_stock_steps_one_completion_a_micro_batch(tiny_model_dir, tmp_path, loss, accumulation):
    """olmOCR 2's geometry: one completion a micro-batch, a page's 4 a step (bnpo: 8 micro-steps, two pages, which
    TRL's shuffle interleaves and the window plan serves page by page): each page's prompt forwarded once a step, and
    every TRL loss and --olmorl train the stock steps."""
    switches = dict(batch=1, accumulation=accumulation, loss_type=loss, olmorl=loss == "olmorl")
    stock, _, _ = _train(tiny_model_dir, tmp_path, shared=False, **switches)
    shared, guard, _ = _train(tiny_model_dir, tmp_path, shared=True, **switches)
    pages = accumulation // 4  # a step's pages
    batches = STEPS // 2
    calls = 1 if loss == "olmorl" else 2  # forwards without gradients a batch: old-policy and reference (OlmoRL: beta 0)
    assert guard.checked and not guard.off and guard.shared_calls == batches * calls * 4 * pages + STEPS * 4 * pages
    assert guard.prefix_forwards == batches * calls * pages + STEPS * pages
    _assert_same_steps(shared, stock, keys=("loss", "grad_norm", "entropy") + (() if loss == "olmorl" else ("kl",)))


def test_on_by_default_and_off_where_it_cannot_be_exact(models, qwen3_models):
    from olmocr_rl.config import build_parser

    assert build_parser().get_default("shared_prefix") is True
    assert shared_prefix_problem(models[1]) is None and shared_prefix_problem(qwen3_models[1]) is None
    stock, _, _ = models
    other = copy.deepcopy(stock)
    other.config.get_text_config()._attn_implementation = "flash_attention_2"
    assert "attention implementation 'flash_attention_2'" in shared_prefix_problem(other)
    other.config.model_type = "llava"
    assert "model type 'llava'" in shared_prefix_problem(other)


@pytest.mark.parametrize("case", range(len(GROUPS)))
def test_qwen3_vl_shared_forward_equals_the_stock_forward(qwen3_models, case):
    _assert_same(*_both_paths(qwen3_models, case))


@pytest.fixture(scope="module")
def lora_models(tiny_model_dir):
    """The tiny model as --use_peft trains it (LoRA on the language model's projections, the rest frozen), the
    adapters initialised at random (not B = 0) so that they change the forward; one copy with the shared layout."""
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from olmocr_rl.model.loading import load_model_and_processor

    base, processor = load_model_and_processor(str(tiny_model_dir))
    other = copy.deepcopy(base)
    assert install_padding_free(other) is not None
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, init_lora_weights=False)
    stock = get_peft_model(base, config)
    shared = get_peft_model(other, config)
    shared.load_state_dict(stock.state_dict())
    for model in (stock, shared):  # as GRPOTrainer does to a PEFT policy
        add_fused_lm_head(model.get_base_model(), outputs=("log_probs", "entropy"))
    assert shared_prefix_problem(shared) is None
    return stock, shared, processor


@pytest.mark.parametrize("case", range(len(GROUPS)))
def test_lora_shared_forward_equals_the_stock_forward(lora_models, case):
    _assert_same(*_both_paths(lora_models, case), trained="lora_", untrained="visual")


def test_frozen_tower_shared_forward_equals_the_stock_forward(models):
    """--freeze_vision_tower: the tower gets no gradient in either path, the language model the same ones."""
    frozen = [p for model in models[:2] for name, p in model.named_parameters() if "visual" in name]
    try:
        for parameter in frozen:
            parameter.requires_grad_(False)
        mine, theirs = _both_paths(models, 0)
    finally:
        for parameter in frozen:
            parameter.requires_grad_(True)
    _assert_same(mine, theirs, trained="language_model", untrained="visual")


def test_shared_forward_with_layers_recomputing_equals_the_stock_forward(models):
    """--gradient_checkpointing (on a GPU, auto recomputes the vision blocks and some decoder layers): a layer that
    replays its forward in the backward pass replays the shared layout too (it travels as a forward keyword, not as
    state of the call), so the gradients are the stock ones."""
    from olmocr_rl.model.grad_checkpointing import CheckpointPlan, apply_checkpointing

    stock, shared, processor = models
    recomputing = copy.deepcopy(shared).train()
    layers = len(recomputing.model.language_model.layers)
    done = apply_checkpointing(recomputing, CheckpointPlan(mode="partial", text_layers=layers, reason="test"))
    assert done and f"{layers} of {layers} decoder layers" in done
    replays = []
    for layer in recomputing.model.language_model.layers:
        layer.self_attn.register_forward_pre_hook(lambda module, args: replays.append(torch.is_grad_enabled()))
    mine, theirs = _both_paths((stock, recomputing, processor), 0)
    _assert_same(mine, theirs)
    # every layer's attention ran twice with gradients: the forward, then its replay in the backward pass
    assert replays == [True] * (2 * layers)


def test_a_bf16_model_is_checked_at_the_bf16_tolerance(models, caplog):
    """The log-probs come out in fp32 whatever the model's dtype; the first-use check judges a bf16 model's result
    by bf16's tolerance (on an H200, 3B in bf16, it differed by 0.0033 from the stock forward: bf16 rounding, which the
    fp32 tolerance had turned into a fallback for the whole run)."""
    stock, shared, processor = models
    stock16, shared16 = copy.deepcopy(stock).to(torch.bfloat16), copy.deepcopy(shared).to(torch.bfloat16)
    inputs, width = _trl_batch(processor, [_page(56, 56, 0)] * 3 + [_page(112, 84, 1)] * 3, (5, 11, 2, 8, 1, 8))
    inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
    guard = SharedPrefixGuard()
    caplog.set_level(logging.INFO, logger="olmocr_rl.trainer.shared_prefix")
    before = len(fallback.fallbacks())
    with torch.no_grad():
        SharedPrefixForward(shared16, stock16, width, guard)(**inputs)
        stock_out, shared_out = stock16(**inputs), SharedPrefixForward(shared16, None, width, guard)(**inputs)
    assert stock_out.log_probs.dtype == torch.float32  # what the check compares
    difference = fallback.relative_difference(shared_out.log_probs[:, -width:], stock_out.log_probs[:, -width:])
    assert 1e-4 < difference < 2e-2  # above fp32's tolerance, within bf16's: the case this test is about
    assert guard.checked and not guard.off and len(fallback.fallbacks()) == before
    assert "allowed in torch.bfloat16" in caplog.text


@pytest.mark.parametrize("segment_calls", ["padded", "each"])
def test_the_masked_calls_build_each_mask_once_per_forward(segment_calls, monkeypatch):
    """The masked ways (a GPU's) build one additive mask per (prefix, segment width) for a whole forward: the second
    layer reuses the first's tensors, and the result equals the one with masks built per call."""
    from types import SimpleNamespace

    from olmocr_rl.trainer import prefix_attention

    monkeypatch.setattr(prefix_attention, "SPLIT_SEGMENT_ATTENTION", False)
    monkeypatch.setattr(prefix_attention, "SEGMENT_CALL_TOKENS", 1 if segment_calls == "each" else 10**6)
    module = SimpleNamespace(is_causal=True, num_key_value_groups=2, training=False)
    generator = torch.Generator().manual_seed(0)
    layout = ((5, (3, 4, 3)), (4, (2, 2)))
    total = sum(prefix + sum(segments) for prefix, segments in layout)
    query = torch.randn(1, 4, total, 8, generator=generator)
    key, value = (torch.randn(1, 2, total, 8, generator=generator) for _ in range(2))
    masks: dict = {}
    first, _ = prefix_attention.shared_prefix_attention(module, query, key, value, layout, masks=masks, scaling=0.35)
    widths = {(5, 3), (5, 4), (4, 2)} if segment_calls == "each" else {(5, 4), (4, 2)}  # padded: the longest
    assert {(prefix, width) for prefix, width, _, _ in masks} == widths
    built = dict(masks)
    second, _ = prefix_attention.shared_prefix_attention(module, query, key, value, layout, masks=masks, scaling=0.35)
    assert masks.keys() == built.keys() and all(masks[k] is built[k] for k in built)  # reused, none rebuilt
    alone, _ = prefix_attention.shared_prefix_attention(module, query, key, value, layout, scaling=0.35)
    assert torch.equal(first, second) and torch.equal(first, alone)
