"""--padding_free: packed training forwards give the padded forward's log-probs, entropies and gradients."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from olmocr_rl.trainer.padding_free import (
    PACKED_SDPA,
    PackedForward,
    install_padding_free,
    packed_sdpa_attention,
    padding_free_problem,
)


def _page(height, width, seed):
    generator = torch.Generator().manual_seed(seed)
    return Image.fromarray((torch.rand(height, width, 3, generator=generator) * 255).byte().numpy())


@pytest.fixture(scope="module")
def models(tiny_model_dir):
    from trl.trainer.utils import add_fused_lm_head

    from olmocr_rl.model.loading import load_model_and_processor

    stock, processor = load_model_and_processor(str(tiny_model_dir))
    packed = copy.deepcopy(stock)
    assert install_padding_free(packed) == "micro-batches packed into one row (SDPA per sequence)"
    for model in (stock, packed):  # what GRPOTrainer does to the policy
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    return stock, packed, processor


def _trl_batch(processor, completion_lengths=(5, 11, 2, 8), pages=None, seed=2):
    """A micro-batch as TRL 1.16 builds it: left-padded page prompts (by default two pages with different image
    sizes, so different prompt lengths; else ``pages``, one image a row), right-padded completions, labels on the
    completion tokens only. Returns (inputs, completion mask)."""
    from trl.trainer.utils import pad

    images = pages or [_page(56, 56, 0), _page(56, 56, 0), _page(112, 84, 1), _page(112, 84, 1)]
    messages = [[{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Read."}]}]
                for image in images]
    prompts = [torch.tensor(ids) for ids in processor.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]]
    generator = torch.Generator().manual_seed(seed)
    completions = [torch.randint(20, 200, (n,), generator=generator) for n in completion_lengths]
    prompt_ids, prompt_mask = pad(prompts, 0, "left"), pad([torch.ones_like(p) for p in prompts], 0, "left")
    completion_ids = pad(completions, 0, "right")
    completion_mask = pad([torch.ones_like(c) for c in completions], 0, "right")
    texts = [processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    vision = processor(images=[[image] for image in images], text=texts, padding=True, return_tensors="pt")
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([prompt_mask, completion_mask], 1)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-completion_ids.shape[1]] = -100
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, pixel_values=vision["pixel_values"],
                  image_grid_thw=vision["image_grid_thw"], labels=labels, fused_lm_head=True,
                  mm_token_type_ids=torch.cat([vision["mm_token_type_ids"], torch.zeros_like(completion_ids)], 1))
    assert pages or len({len(p) for p in prompts}) == 2  # the prompts really are left-padded
    return inputs, completion_mask


def _run(model, inputs, completion_mask):
    """Log-probs, entropies and parameter gradients of ``model`` (the model, or PackedForward around it)."""
    parameters = model.model if isinstance(model, PackedForward) else model
    parameters.zero_grad()
    out = model(**inputs)
    width = completion_mask.shape[1]
    logps, entropy = out.log_probs[:, -width:], out.entropy[:, -width:]
    (logps * completion_mask).sum().backward()
    grads = {name: p.grad.clone() for name, p in parameters.named_parameters() if p.grad is not None}
    return logps.detach(), entropy.detach(), grads


@pytest.fixture(scope="module", params=["qwen3_vl", "qwen3_vl_moe"])
def qwen3_models(request, tiny_family_dir):
    """The tiny Qwen3-VL (dense or MoE: deepstack features, the text model building its own mask), stock and packed."""
    from trl.trainer.utils import add_fused_lm_head

    from olmocr_rl.model.loading import load_model_and_processor

    stock, processor = load_model_and_processor(str(tiny_family_dir(request.param)))
    packed = copy.deepcopy(stock)
    assert install_padding_free(packed) == "micro-batches packed into one row (SDPA per sequence)"
    for model in (stock, packed):
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    return stock, packed, processor


def test_packed_forward_equals_the_padded_forward(models, monkeypatch):
    _assert_packed_equals_padded(models, monkeypatch)


def test_qwen3_vl_packed_forward_equals_the_padded_forward(qwen3_models, monkeypatch):
    _assert_packed_equals_padded(qwen3_models, monkeypatch)


def _assert_packed_equals_padded(models, monkeypatch):
    stock, packed, processor = models
    inputs, completion_mask = _trl_batch(processor)
    assert 1 - float(inputs["attention_mask"].float().mean()) > 0.1  # prompt and completion padding

    import torch.nn.functional as F

    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda q, *a, **k: calls.append(q.shape) or sdpa(q, *a, **k))
    mine = _run(PackedForward(packed), inputs, completion_mask)
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    theirs = _run(stock, inputs, completion_mask)

    torch.testing.assert_close(mine[0], theirs[0], rtol=1e-5, atol=1e-5)  # log-probs, zeros at padding included
    torch.testing.assert_close(mine[1], theirs[1], rtol=1e-5, atol=1e-5)  # entropies
    assert (mine[0][completion_mask == 0] == 0).all()
    assert mine[2].keys() == theirs[2].keys() and any("visual" in name for name in mine[2])
    for name in theirs[2]:
        # float32 sums in another order: the error scales with the gradient's size (measured up to 2.4e-6 on
        # embed_tokens, whose largest entry is 7.9, on an AMD EPYC CPU); a wrong packing is off by O(1)
        scale = max(1.0, float(theirs[2][name].abs().max()))
        torch.testing.assert_close(mine[2][name], theirs[2][name], rtol=1e-4, atol=1e-6 * scale, msg=name)
    # the text layers attend per sequence: 4 sequences of 4 distinct lengths -> 4 calls per layer, each of one
    # sequence's tokens only; the vision tower's calls are its own (windows and full layers)
    lengths = inputs["attention_mask"].sum(1).tolist()
    text = stock.config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    text_calls = [shape for shape in calls if len(shape) == 4 and shape[1] == text.num_attention_heads
                  and shape[3] == head_dim]
    assert sorted(shape[2] for shape in text_calls) == sorted(lengths * text.num_hidden_layers)


def test_equal_lengths_share_one_attention_call(models, monkeypatch):
    stock, packed, processor = models
    inputs, completion_mask = _trl_batch(processor, completion_lengths=(6, 6, 3, 3))
    import torch.nn.functional as F

    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda q, *a, **k: calls.append(q.shape) or sdpa(q, *a, **k))
    with torch.no_grad():
        mine = PackedForward(packed)(**inputs).log_probs
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    with torch.no_grad():
        theirs = stock(**inputs).log_probs
    torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
    text_calls = [shape for shape in calls if len(shape) == 4 and shape[1] == 4]
    assert sorted(shape[0] for shape in text_calls) == [2, 2, 2, 2]  # two length groups of two, per layer


def test_unpacked_calls_are_transformers_sdpa(models):
    """Generation and any padded forward reach the stock SDPA: same output with and without the packed function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    _, packed, _ = models
    module = packed.model.language_model.layers[0].self_attn
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 7, 32, generator=generator) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # 2 KV heads (GQA)
    mask = torch.ones(2, 1, 7, 7, dtype=torch.bool).tril()
    ours, _ = packed_sdpa_attention(module, q, k, v, mask, dropout=0.0, scaling=32 ** -0.5)
    stock, _ = sdpa_attention_forward(module, q, k, v, mask, dropout=0.0, scaling=32 ** -0.5)
    assert torch.equal(ours, stock)
    # packed: two sequences of 3 and 4 tokens attend only to themselves
    one = q[:1]
    ours, _ = packed_sdpa_attention(module, one, k[:1], v[:1], None, dropout=0.0, scaling=32 ** -0.5,
                                    olmocr_rl_segments=(3, 4))
    for start, length in ((0, 3), (3, 4)):
        part = slice(start, start + length)
        alone, _ = sdpa_attention_forward(module, one[:, :, part], k[:1, :, part], v[:1, :, part], None, dropout=0.0,
                                          scaling=32 ** -0.5)
        torch.testing.assert_close(ours[:, part], alone, rtol=1e-6, atol=1e-6)


def test_where_packing_cannot_be_exact_the_padded_forward_runs(models, tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    eager, _ = load_model_and_processor(str(tiny_model_dir), attn_implementation="eager")
    assert "attention implementation 'eager'" in padding_free_problem(eager)
    assert install_padding_free(eager) is None
    flash = copy.deepcopy(eager)
    flash.config.get_text_config()._attn_implementation = "flash_attention_2"
    assert padding_free_problem(flash) is None  # Qwen2.5-VL: flash attention's variable-length path
    flash.config.model_type = "qwen3_vl"
    assert "for 'qwen3_vl' (packing runs on sdpa there)" in padding_free_problem(flash)
    flash.config.model_type = "llava"
    assert "model type 'llava'" in padding_free_problem(flash)
    stock, packed, processor = models
    assert packed.config.get_text_config()._attn_implementation == PACKED_SDPA
    assert packed.config.vision_config._attn_implementation == "sdpa"  # the vision tower keeps its own
    inputs, _ = _trl_batch(processor)
    inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])  # an input packing does not know: stock call
    seen = []
    PackedForward(type("Spy", (), {"__call__": lambda self, **kw: seen.append(kw)})())(**inputs)
    assert seen[0]["input_ids"].shape == inputs["input_ids"].shape
    # a model whose attention was never made pack-aware (TRL's reference model) gets the padded block
    inputs.pop("token_type_ids")
    with torch.no_grad():
        torch.testing.assert_close(PackedForward(stock)(**inputs).log_probs, stock(**inputs).log_probs, rtol=0, atol=0)


def test_on_by_default(tiny_model_dir):
    from olmocr_rl.config import build_parser

    assert build_parser().get_default("padding_free") is True


def test_generation_with_the_pack_aware_attention_samples_the_stock_ids(models):
    """The text model's new attention name changes nothing outside packed forwards: left-padded prompts of two
    lengths get their padding and causal masks, and sample the same ids."""
    from transformers import GenerationConfig

    stock, packed, processor = models
    images = [_page(56, 56, 0), _page(112, 84, 1)]
    messages = [[{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Read."}]}]
                for image in images]
    processor.tokenizer.padding_side = "left"
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt", padding=True)
    assert (inputs["attention_mask"] == 0).any()
    config = GenerationConfig(max_new_tokens=8, do_sample=True, top_k=0, pad_token_id=processor.tokenizer.pad_token_id,
                              disable_compile=True)
    ids = []
    for model in (stock, packed):
        torch.manual_seed(0)
        with torch.no_grad():
            ids.append(model.generate(**inputs, generation_config=config))
    assert torch.equal(ids[0], ids[1])
