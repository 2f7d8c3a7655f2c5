"""--gradient_checkpointing auto|true|false|vision: every plan trains the same numbers; auto chooses by measured memory."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from olmocr_rl.model.grad_checkpointing import (
    GIB,
    ActivationFacts,
    CheckpointPlan,
    activation_bytes,
    apply_checkpointing,
    choose_mode,
    evenly_spaced,
    measure_activation_facts,
    plan_checkpointing,
)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    return load_model_and_processor(str(tiny_model_dir))


def _batch(processor):
    generator = torch.Generator().manual_seed(0)
    page = Image.fromarray((torch.rand(112, 84, 3, generator=generator) * 255).byte().numpy())
    messages = [[{"role": "user", "content": [{"type": "image", "image": page}, {"type": "text", "text": "Read."}]}]] * 2
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt", padding=True)
    completion = torch.randint(20, 200, (2, 12), generator=generator)
    inputs["input_ids"] = torch.cat([inputs["input_ids"], completion], 1)
    inputs["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(completion)], 1)
    inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(completion)], 1)
    return inputs


def _loss_and_grads(model, inputs):
    model.train()
    model.zero_grad()
    loss = model(**inputs, labels=inputs["input_ids"]).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_every_plan_trains_the_same_numbers(loaded):
    stock, processor = loaded
    inputs = _batch(processor)
    reference = _loss_and_grads(stock, inputs)
    plans = {"vision": CheckpointPlan("vision", "test"), "partial": CheckpointPlan("partial", "test", text_layers=1)}
    for name, plan in plans.items():
        model = copy.deepcopy(stock)
        done = apply_checkpointing(model, plan)
        assert done == ("2 vision blocks" if name == "vision" else "2 vision blocks and 1 of 2 decoder layers")
        assert not model.is_gradient_checkpointing  # TRL's whole-model toggles around generation leave it alone
        calls = []
        for block in model.model.visual.blocks:  # (module hooks do not fire in a recomputation; forward runs)
            block.mlp.forward = lambda x, _stock=block.mlp.forward: calls.append(1) or _stock(x)
        loss, grads = _loss_and_grads(model, inputs)
        assert len(calls) == 4  # 2 blocks, each run again in the backward pass
        assert torch.equal(loss, reference[0])
        assert grads.keys() == reference[1].keys()
        for key in grads:
            torch.testing.assert_close(grads[key], reference[1][key], rtol=1e-6, atol=1e-7, msg=f"{name}: {key}")
    full = copy.deepcopy(stock)
    full.gradient_checkpointing_enable()  # what TRL does for the "full" plan
    loss, grads = _loss_and_grads(full, inputs)
    assert torch.equal(loss, reference[0])
    for key in grads:
        torch.testing.assert_close(grads[key], reference[1][key], rtol=1e-6, atol=1e-7, msg=key)


def test_measured_sizes_predict_the_layers_activations_in_a_whole_forward(loaded):
    """The per-layer measurement (one standalone layer at 64 and 128 tokens), scaled to the model's layers and the
    batch's tokens and patches, matches what autograd keeps inside the decoder layers and vision blocks of a real
    forward of the tiny model (padding mask, window attention and all) within 10%."""
    model, processor = loaded
    inputs = _batch(processor)
    facts = measure_activation_facts(model.config, torch.float32)
    assert facts.text_layers == 2 and facts.vision_layers == 2 and facts.text_input_per_token == 128 * 4
    inside, storages = [0], {}
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if inside[0] and storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    layers = [*model.model.language_model.layers, *model.model.visual.blocks]
    handles = [h for layer in layers for h in (
        layer.register_forward_pre_hook(lambda *a: inside.__setitem__(0, inside[0] + 1)),
        layer.register_forward_hook(lambda *a: inside.__setitem__(0, inside[0] - 1)))]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(**inputs)
    for handle in handles:
        handle.remove()
    tokens, patches = inputs["input_ids"].numel(), int(inputs["image_grid_thw"].prod(-1).sum())
    predicted = activation_bytes(facts, tokens=tokens, patches=patches, vision=False, text_layers=0)
    assert 0.9 < predicted / sum(storages.values()) < 1.1, (predicted, sum(storages.values()))


@pytest.mark.slow  # a real-size decoder layer and vision block in bf16 (no bf16 instructions here): 5 s
def test_released_3b_shape_needs_more_than_it_keeps():
    """On the real 3B architecture (bf16), recomputing keeps far less than keeping every activation."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import released_qwen25_vl_config

    facts = measure_activation_facts(released_qwen25_vl_config("3b"), torch.bfloat16)
    assert facts.text_layers == 36 and facts.vision_layers == 32 and facts.text_input_per_token == 2048 * 2
    assert facts.text_per_token > 20 * facts.text_input_per_token and facts.vision_per_patch > 20 * 2560
    sizes = [activation_bytes(facts, tokens=8 * 2424, patches=8 * 6624, vision=v, text_layers=k)
             for v, k in ((False, 0), (True, 0), (True, 18), (True, 36))]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 10 * sizes[-1]


FACTS = ActivationFacts(text_per_token=100.0, text_input_per_token=10, text_layers=4, vision_per_patch=50.0,
                        vision_input_per_patch=5, vision_layers=2)


def _room_for(activations: float, state: float = 0.0) -> float:
    """The budget whose room for activations (after the headroom) is exactly ``activations``."""
    from olmocr_rl.model.grad_checkpointing import HEADROOM_BYTES, HEADROOM_FRACTION

    return (activations + state + HEADROOM_BYTES) / (1 - HEADROOM_FRACTION)


def test_auto_takes_the_least_recomputation_that_fits():
    tokens, patches = 1000, 400
    need = {name: activation_bytes(FACTS, tokens=tokens, patches=patches, vision=v, text_layers=k)
            for name, (v, k) in {"off": (False, 0), "vision": (True, 0), "two": (True, 2), "full": (True, 4)}.items()}
    assert need["off"] == 100 * 1000 * 4 + 50 * 400 * 2
    vision_kept = 5 * 400 * 2 + 50 * 400  # each block's input, and one block's activations while it recomputes
    assert need["vision"] == 100 * 1000 * 4 + vision_kept
    assert need["two"] == 100 * 1000 * 2 + 10 * 1000 * 2 + 100 * 1000 + vision_kept
    # one recomputing layer saves nothing (its activations come back while it recomputes): two is the first step
    assert activation_bytes(FACTS, tokens=tokens, patches=patches, vision=True, text_layers=1) > need["vision"]

    def choose(room, state=7 * GIB):
        return choose_mode(FACTS, budget_bytes=_room_for(room, state), state_bytes=state, tokens=tokens,
                           patches=patches)

    assert choose(need["off"]).mode == "off"
    assert choose(need["off"] - 1).mode == "vision"
    assert choose(need["vision"] - 1).mode == "partial" and choose(need["vision"] - 1).text_layers == 2
    assert choose(need["two"] - 1).text_layers == 3
    assert choose(0).mode == "full" and "every layer" in choose(0).reason
    assert choose_mode(None, budget_bytes=1e15, state_bytes=0, tokens=1, patches=1).mode == "full"
    assert evenly_spaced(2, 4) == [1, 3] and evenly_spaced(4, 4) == [0, 1, 2, 3] and evenly_spaced(0, 4) == []


def _cfg(*argv):
    from olmocr_rl.config import parse_args, validate

    return validate(parse_args(["--train_bench_data_folder", "bench_data_sample", "--reward_bench", "--report_to",
                                "none", "--num_generations", "8", *argv]))


def test_the_default_is_auto_and_the_flags_force_a_plan(loaded, tiny_model_dir):
    from olmocr_rl.config.checks import max_image_tokens
    from olmocr_rl.config.flags import PROMPT_TEXT_TOKENS
    from olmocr_rl.config.grpo import grpo_config_kwargs
    from olmocr_rl.model.grad_checkpointing import plan_for_run

    model, _ = loaded
    cfg = _cfg("--model_name", str(tiny_model_dir))
    sizes = dict(image_tokens=max_image_tokens(cfg.target_longest_image_dim), text_tokens=PROMPT_TEXT_TOKENS)
    assert cfg.gradient_checkpointing == "auto"
    plan = plan_for_run(cfg, **sizes)  # the tiny model on this machine, from its config.json: everything fits
    assert plan.mode == "off" and plan.reason.startswith("--gradient_checkpointing auto: nothing recomputes")
    assert grpo_config_kwargs(cfg, [1.0])["gradient_checkpointing"] is False
    assert grpo_config_kwargs(cfg, [1.0], gradient_checkpointing=True)["gradient_checkpointing"] is True
    for flag, mode in (("true", "full"), ("false", "off"), ("vision", "vision")):
        assert plan_checkpointing(_cfg("--gradient_checkpointing", flag), model.config, **sizes).mode == mode
    assert grpo_config_kwargs(_cfg("--gradient_checkpointing"), [1.0])["gradient_checkpointing"] is True
    missing = plan_for_run(_cfg("--model_name", "/no/such/model"), **sizes)
    assert missing.mode == "full" and "no config for /no/such/model" in missing.reason
    frozen = plan_checkpointing(_cfg("--freeze_vision_tower"), model.config, **sizes)
    assert "and 0 patches per micro-batch" in frozen.reason  # a frozen tower keeps nothing for the backward pass
