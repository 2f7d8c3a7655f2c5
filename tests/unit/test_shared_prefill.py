"""The shared prefill of HF generation (olmocr_rl.trainer.shared_prefill): each shared page prompt prefilled once, the
same sampled ids as the stock prefill for the same seed (Qwen2.5-VL, Qwen3-VL dense and MoE, LoRA), the first use
checked, and calls it cannot share left to the stock prefill. Through the trainer: test_shared_prefix.py's training
steps (same rewards with and without)."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from PIL import Image

from olmocr_rl.model import fallback
from olmocr_rl.trainer.shared_prefill import PrefillGuard, prefill_groups, shared_prefill


def _page(height, width, seed):
    generator = torch.Generator().manual_seed(seed)
    return Image.fromarray((torch.rand(height, width, 3, generator=generator) * 255).byte().numpy())


def _inputs(processor, copies=(3, 3), sizes=((56, 56), (84, 112)), texts=("Read.", "Read this page, please.")):
    """TRL's generation batch: each page's prompt ``copies`` times in a row, left-padded (pages and prompts of
    different lengths, so the shorter group is padded)."""
    messages = []
    for n, (height, width), text, seed in zip(copies, sizes, texts, range(len(copies))):
        page = _page(height, width, seed)
        messages += [[{"role": "user", "content": [{"type": "image", "image": page},
                                                    {"type": "text", "text": text}]}]] * n
    processor.tokenizer.padding_side = "left"
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                         return_tensors="pt", padding=True)


def _config(model, processor, tokens=12):
    """The GenerationConfig TRL 1.16 builds for HF generation (sampling, dynamic cache, no compilation)."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=tokens, do_sample=True, pad_token_id=processor.tokenizer.pad_token_id,
                            eos_token_id=processor.tokenizer.eos_token_id, temperature=1.0, top_p=1.0, top_k=0,
                            suppress_tokens=[model.config.image_token_id], disable_compile=True)


def _generate(model, inputs, config, guard=None, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        if guard is None:
            return model.generate(**inputs, generation_config=config)
        with shared_prefill(model, guard):
            return model.generate(**inputs, generation_config=config)


def _prefill_rows(model):
    """Counts the rows each prefill forwards (a hook on the text embedding's first call of a generate)."""
    rows: list[int] = []
    model.get_input_embeddings().register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    return rows


def _assert_same_samples(model, processor):
    model = copy.deepcopy(model).eval()
    inputs, config = _inputs(processor), _config(model, processor)
    stock = _generate(model, inputs, config)
    rows = _prefill_rows(model)
    guard = PrefillGuard()
    first = _generate(model, inputs, config, guard)  # the first use: checked against the stock prefill
    assert guard.checked and not guard.off
    rows.clear()
    again = _generate(model, inputs, config, guard)
    assert torch.equal(first, stock) and torch.equal(again, stock)
    assert rows[0] == 2 and rows[1:] == [6] * (len(rows) - 1)  # the prefill forwards one row per page
    assert guard.shared_calls == 2 and guard.rows == 12 and guard.prefilled == 4
    assert not torch.equal(_generate(model, inputs, config, guard, seed=1), stock)  # the seed matters
    assert "_prefill" not in vars(model)  # the class's prefill again after the block


def test_shared_prefill_samples_the_stock_ids(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    _assert_same_samples(*load_model_and_processor(str(tiny_model_dir)))


@pytest.mark.parametrize("family", ["qwen3_vl", "qwen3_vl_moe"])
def test_qwen3_vl_shared_prefill_samples_the_stock_ids(tiny_family_dir, family):
    from olmocr_rl.model.loading import load_model_and_processor

    _assert_same_samples(*load_model_and_processor(str(tiny_family_dir(family))))


def test_lora_shared_prefill_samples_the_stock_ids(tiny_model_dir):
    """Through a PEFT wrapper (its base model's prefill is the one shared), random adapters so they matter."""
    from peft import LoraConfig, get_peft_model

    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(str(tiny_model_dir))
    torch.manual_seed(0)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False)).eval()
    inputs, config = _inputs(processor), _config(model, processor)
    stock = _generate(peft, inputs, config)
    guard = PrefillGuard()
    assert torch.equal(_generate(peft, inputs, config, guard), stock) and guard.shared_calls == 1
    with peft.disable_adapter():
        assert not torch.equal(_generate(peft, inputs, config), stock)  # the adapters change the samples


def test_rows_without_a_partner_and_a_static_cache_take_the_stock_prefill(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.trainer.generation import enable_compiled_generation

    model, processor = load_model_and_processor(str(tiny_model_dir))
    model.eval()
    single = _inputs(processor, copies=(1, 1))
    assert prefill_groups(model, single["input_ids"], dict(single)) is None
    guard = PrefillGuard()
    config = _config(model, processor)
    assert torch.equal(_generate(model, single, config, guard), _generate(model, single, config))
    static = _config(model, processor)
    enable_compiled_generation(static, compile_on_cpu=True)
    static.disable_compile, static.max_cache_len = True, 256
    _generate(model, _inputs(processor), static, guard)
    assert guard.shared_calls == 0 and not guard.checked and not guard.off


def test_groups_need_the_same_pixels_not_only_the_same_tokens(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(str(tiny_model_dir))
    inputs = _inputs(processor, copies=(2, 2), sizes=((56, 56), (56, 56)), texts=("Read.", "Read."))
    assert torch.equal(inputs["input_ids"][0], inputs["input_ids"][3])  # same tokens, different pages
    assert prefill_groups(model, inputs["input_ids"], dict(inputs)) == [[0, 1], [2, 3]]


def test_first_use_checks_itself_and_falls_back_with_one_line(tiny_model_dir, monkeypatch, caplog):
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.trainer import shared_prefill as module

    model, processor = load_model_and_processor(str(tiny_model_dir))
    model.eval()
    inputs, config = _inputs(processor), _config(model, processor)
    stock = _generate(model, inputs, config)
    monkeypatch.setattr(module, "_agreement", lambda shared, reference: 1.0)  # as if the shared prefill were wrong
    caplog.set_level(logging.WARNING, logger="olmocr_rl.model.fallback")
    before = len(fallback.fallbacks())
    guard = PrefillGuard()
    assert torch.equal(_generate(model, inputs, config, guard), stock)  # that batch goes on from the stock prefill
    assert guard.off and fallback.fallbacks()[before:] == [(
        "--shared_prefix (generation)", "its first prefill differs from the stock one by 1 (relative), more than "
        "the 1e-04 allowed in torch.float32")]
    assert sum("--shared_prefix (generation) is off" in r.message for r in caplog.records) == 1
    assert torch.equal(_generate(model, inputs, config, guard), stock) and guard.shared_calls == 1  # the trial only


def test_a_later_failure_falls_back_and_that_batch_samples_the_stock_ids(tiny_model_dir, monkeypatch):
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.trainer import shared_prefill as module

    model, processor = load_model_and_processor(str(tiny_model_dir))
    model.eval()
    inputs, config = _inputs(processor), _config(model, processor)
    stock = _generate(model, inputs, config)
    guard = PrefillGuard()
    assert torch.equal(_generate(model, inputs, config, guard), stock) and guard.checked
    reduced = module._reduced

    def broken(*args):  # the shared prefill fails half-way: the real cache already holds some of its rows
        ids, kwargs, index = reduced(*args)
        kwargs["pixel_values"] = kwargs["pixel_values"][:-1]
        return ids, kwargs, index

    monkeypatch.setattr(module, "_reduced", broken)
    before = len(fallback.fallbacks())
    assert torch.equal(_generate(model, inputs, config, guard), stock)  # that batch from the stock prefill
    assert guard.off and len(fallback.fallbacks()) == before + 1
    assert fallback.fallbacks()[-1][1].startswith("a prefill failed: ")


def test_decoding_writes_into_the_room_made_at_the_prefill(tiny_model_dir):
    """The rows' cache gets room for max_new_tokens at the prefill; every decoding step writes in place (the final
    cache is a view of that room, no copy made), and the ids equal those of DynamicCache's copying update."""
    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(str(tiny_model_dir))
    model.eval()
    inputs, config = _inputs(processor), _config(model, processor, tokens=9)
    stock = _generate(model, inputs, config)
    guard = PrefillGuard()
    _generate(model, inputs, config, guard)  # the first use, checked
    torch.manual_seed(0)
    with torch.no_grad(), shared_prefill(model, guard):
        out = model.generate(**inputs, generation_config=config, return_dict_in_generate=True)
    assert torch.equal(out.sequences, stock)
    prompt = inputs["input_ids"].shape[1]
    for layer in out.past_key_values.layers:
        keys, values = layer._olmocr_rl_room
        assert keys.shape[:2] == layer.keys.shape[:2] and keys.shape[2] == prompt + 9
        assert layer.keys.shape[2] == prompt + 8  # the last sampled token is never forwarded
        assert layer.keys.data_ptr() == keys.data_ptr() and layer.values.data_ptr() == values.data_ptr()
    copying = PrefillGuard()
    copying.in_place = False
    _generate(model, inputs, config, copying)
    torch.manual_seed(0)
    with torch.no_grad(), shared_prefill(model, copying):
        plain = model.generate(**inputs, generation_config=config, return_dict_in_generate=True)
    assert torch.equal(plain.sequences, stock)
    assert not any(hasattr(layer, "_olmocr_rl_room") for layer in plain.past_key_values.layers)


def test_the_in_place_layer_matches_the_copying_one_and_goes_back_to_it_when_edited():
    """Against DynamicCache's own layer, step for step: updates in the room, a crop (written over in place), no room
    left and rows re-selected (both back to the copying update, the values still right)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    from olmocr_rl.trainer.shared_prefill import _select_rows

    generator = torch.Generator().manual_seed(0)

    def states(rows, length=1):
        return (torch.randn(rows, 2, length, 4, generator=generator),
                torch.randn(rows, 2, length, 4, generator=generator))

    ours, theirs = DynamicCache(), DynamicCache()
    prompt = states(2, 5)
    ours.update(*prompt, 0)
    theirs.update(*prompt, 0)
    index = torch.tensor([0, 0, 1])
    _select_rows(ours, index, new_tokens=3)
    theirs.batch_select_indices(index)
    layer = ours.layers[0]
    room = layer._olmocr_rl_room[0]

    def step(*new):
        got, want = ours.update(*new, 0), theirs.update(*new, 0)
        assert all(torch.equal(a, b) for a, b in zip(got, want))

    step(*states(3))
    step(*states(3))
    assert layer.keys.data_ptr() == room.data_ptr() and layer.keys.shape[2] == 7
    ours.crop(-1), theirs.crop(-1)  # speculative decoding's kind of edit: the next token is written over in place
    step(*states(3))
    step(*states(3))
    assert layer.keys.data_ptr() == room.data_ptr() and layer.keys.shape[2] == 8  # the room is full
    step(*states(3))  # no room left: the copying update
    assert type(layer) is DynamicLayer and not hasattr(layer, "_olmocr_rl_room")
    again, reference = DynamicCache(), DynamicCache()
    for cache in (again, reference):
        cache.update(*prompt, 0)
    _select_rows(again, index, new_tokens=4)
    reference.batch_select_indices(index)
    again.batch_select_indices(torch.tensor([2, 0]))  # rows re-selected: a new tensor, so the copying update
    reference.batch_select_indices(torch.tensor([2, 0]))
    new = states(2)
    assert all(torch.equal(a, b) for a, b in zip(again.update(*new, 0), reference.update(*new, 0)))
    assert type(again.layers[0]) is DynamicLayer
