"""--compiled_generation: the static, bucketed cache samples the stock path's ids under a fixed seed (the compiled
decoding through the trainer: tests/integration/test_speedups_cli.py)."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from olmocr_rl.trainer.generation import PROMPT_BUCKET, bucketed_cache_length, enable_compiled_generation


def test_cache_length_is_the_bucketed_prompt_plus_the_completion():
    assert PROMPT_BUCKET == 256
    assert bucketed_cache_length([10, 256], 64) == 256 + 64
    assert bucketed_cache_length([257, 3], 64) == 512 + 64
    assert bucketed_cache_length([1817] * 8, 8000) == 2048 + 8000  # a 1288 px page: one bucket for the run


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    return load_model_and_processor(str(tiny_model_dir))


def _trl_generation_config(model, processor, tokens: int):
    """The GenerationConfig TRL 1.16's GRPOTrainer builds for HF generation (sampling, compilation disabled)."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=tokens, do_sample=True, pad_token_id=processor.tokenizer.pad_token_id,
                            eos_token_id=processor.tokenizer.eos_token_id, temperature=1.0, top_p=1.0, top_k=0,
                            suppress_tokens=[model.config.image_token_id], disable_compile=True)


def _prompts(processor, copies=3):
    generator = torch.Generator().manual_seed(0)
    pages = [Image.fromarray((torch.rand(h, w, 3, generator=generator) * 255).byte().numpy())
             for h, w in ((56, 56), (112, 84))]
    messages = [[{"role": "user", "content": [{"type": "image", "image": page}, {"type": "text", "text": "Read."}]}]
                for page in pages for _ in range(copies)]
    processor.tokenizer.padding_side = "left"
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                         return_tensors="pt", padding=True)


def _generate(model, inputs, config, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(**inputs, generation_config=config)


def _compiled_config(model, processor, inputs, tokens, compile_decoding: bool):
    config = _trl_generation_config(model, processor, tokens)
    enable_compiled_generation(config, compile_on_cpu=True)
    config.max_cache_len = bucketed_cache_length([int(inputs["attention_mask"].shape[1])], tokens)
    if not compile_decoding:
        config.disable_compile = True
    return config


def test_static_bucketed_cache_samples_the_stock_ids(loaded):
    """Sampling is unchanged by the static cache and its bucketed size (the extra positions are masked)."""
    model, processor = loaded
    model = copy.deepcopy(model).eval()
    inputs = _prompts(processor)
    stock = _generate(model, inputs, _trl_generation_config(model, processor, 24))
    config = _compiled_config(model, processor, inputs, 24, compile_decoding=False)
    static = _generate(model, inputs, config)
    assert torch.equal(static, stock) and stock.shape[1] > inputs["input_ids"].shape[1]
    assert model._previous_max_cache_length == PROMPT_BUCKET + 24  # the cache was static, sized by the bucket
    assert not torch.equal(_generate(model, inputs, config, seed=1), stock)  # the seed matters: a real comparison


def test_auto_is_on_with_a_gpu_off_on_cpu_and_off_with_vllm():
    from argparse import Namespace

    from olmocr_rl.config import build_parser
    from olmocr_rl.config.checks import resolve_compiled_generation
    from olmocr_rl.config.environment import Environment

    assert build_parser().get_default("compiled_generation") is None
    gpu, cpu = Environment(cuda=True, vllm=False, num_processes=1), Environment(cuda=False, vllm=False, num_processes=1)
    assert resolve_compiled_generation(Namespace(compiled_generation=None), gpu, "none") == (True, [])
    assert resolve_compiled_generation(Namespace(compiled_generation=None), cpu, "none") == (False, [])
    assert resolve_compiled_generation(Namespace(compiled_generation=True), cpu, "none") == (True, [])
    on, notices = resolve_compiled_generation(Namespace(compiled_generation=True), gpu, "colocate")
    assert on is False and "HF generation only" in notices[0]
    assert resolve_compiled_generation(Namespace(compiled_generation=None), gpu, "colocate") == (False, [])
