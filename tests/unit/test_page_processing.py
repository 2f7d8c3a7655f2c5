"""--share_page_processing: each distinct page image processed once per step, with the stock processor's exact output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from olmocr_rl.model.loading import load_processor
from olmocr_rl.model.page_processing import share_page_processing


def _page(height, width, seed):
    generator = torch.Generator().manual_seed(seed)
    return Image.fromarray((torch.rand(height, width, 3, generator=generator) * 255).byte().numpy())


def _messages(images):
    return [[{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Transcribe."}]}]
            for image in images]


def _step(processor, images):
    """The two processor calls TRL 1.16 makes in one step: prompts for generation, then the training inputs."""
    tokenized = processor.apply_chat_template(_messages(images), add_generation_prompt=True, tokenize=True,
                                              return_dict=True)
    texts = [processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in _messages(images)]
    forward = processor(images=[[image] for image in images], text=texts, padding=True, return_tensors="pt")
    return tokenized, forward


def _assert_equal(mine, stock):
    assert mine.keys() == stock.keys()
    for key in stock:
        if isinstance(stock[key], list) and not isinstance(stock[key][0], (int, float)):  # per-prompt token lists
            assert [list(map(int, row)) for row in mine[key]] == [list(map(int, row)) for row in stock[key]], key
        else:
            a, b = torch.as_tensor(np.asarray(mine[key])), torch.as_tensor(np.asarray(stock[key]))
            assert a.dtype == b.dtype and torch.equal(a, b), key


@pytest.fixture(scope="module")
def processors(tiny_model_dir):
    return load_processor(str(tiny_model_dir)), load_processor(str(tiny_model_dir))


def test_a_step_processes_each_page_once_with_the_stock_output(processors):
    stock, shared = processors
    cache = share_page_processing(shared)
    a, b = _page(120, 90, 0), _page(70, 110, 1)  # two pages with different grids
    copies = [a, b, a.copy(), a.copy(), b.copy()]  # G copies arrive as distinct but equal images
    mine_tokens, mine_forward = _step(shared, copies)
    stock_tokens, stock_forward = _step(stock, copies)
    _assert_equal(mine_tokens, stock_tokens)
    _assert_equal(mine_forward, stock_forward)
    assert stock_forward["image_grid_thw"][0].tolist() != stock_forward["image_grid_thw"][1].tolist()
    assert (cache.misses, cache.hits) == (2, 8)  # 2 pages processed; 3 copies in call 1, all 5 in call 2 reused

    other = _page(120, 90, 2)  # same size as a, other pixels: processed, never confused with a
    mine_tokens, _ = _step(shared, [other, a])
    stock_tokens, _ = _step(stock, [other, a])
    _assert_equal(mine_tokens, stock_tokens)
    assert cache.misses == 3


def test_the_cache_keeps_only_the_last_calls_pages(processors):
    _, shared = processors
    cache = share_page_processing(shared)
    a, b = _page(60, 60, 3), _page(80, 60, 4)
    shared(images=[[a]], text=["<|vision_start|><|image_pad|><|vision_end|>"])
    shared(images=[[b]], text=["<|vision_start|><|image_pad|><|vision_end|>"])
    shared(images=[[a]], text=["<|vision_start|><|image_pad|><|vision_end|>"])
    assert (cache.misses, cache.hits) == (3, 0)


def test_images_that_are_not_pil_take_the_stock_path(processors, tiny_model_dir):
    stock, _ = processors
    shared = load_processor(str(tiny_model_dir))
    cache = share_page_processing(shared)
    array = np.asarray(_page(64, 64, 5))
    text = ["<|vision_start|><|image_pad|><|vision_end|>"] * 2
    mine = shared(images=[[array], [array]], text=text, return_tensors="pt")
    theirs = stock(images=[[array], [array]], text=text, return_tensors="pt")
    _assert_equal(mine, theirs)
    assert (cache.misses, cache.hits) == (0, 0)


def test_on_by_default_in_the_training_cli(tiny_model_dir, tmp_path):
    """The default flags install it on the processor the trainer gets, and saving the processor is unaffected."""
    from olmocr_rl import grpo_train
    from olmocr_rl.config import parse_args, validate

    cfg = validate(parse_args(["--train_bench_data_folder", "bench_data_sample", "--model_name", str(tiny_model_dir),
                               "--reward_bench", "--report_to", "none", "--num_generations", "8", "--output_dir", str(tmp_path / "run")]))
    assert cfg.share_page_processing is True
    _, processor = grpo_train._load_model(cfg)
    assert "_process_images" in vars(processor)
    processor.save_pretrained(tmp_path / "saved")
    assert "_process_images" not in (tmp_path / "saved" / "processor_config.json").read_text()
    off = validate(parse_args(["--train_bench_data_folder", "bench_data_sample", "--model_name", str(tiny_model_dir),
                               "--reward_bench", "--report_to", "none", "--num_generations", "8", "--no-share_page_processing"]))
    assert "_process_images" not in vars(grpo_train._load_model(off)[1])
