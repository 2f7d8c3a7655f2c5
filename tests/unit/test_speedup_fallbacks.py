"""The GPU-only defaults check themselves on first use and fall back to the stock path with one warning line
(olmocr_rl.model.fallback): each failure is forced here on CPU, and the result is the stock path's exactly."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from olmocr_rl.model import fallback, vision_speedups
from olmocr_rl.model.fallback import relative_difference, tolerance

FALLBACK_LOGGER = "olmocr_rl.model.fallback"


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == FALLBACK_LOGGER and r.levelno == logging.WARNING]


def test_relative_difference_and_the_tolerances():
    stock = torch.tensor([3.0, 4.0])
    assert relative_difference(stock.clone(), stock) == 0.0
    assert relative_difference(torch.tensor([3.0, 4.5]), stock) == pytest.approx(0.1)
    assert relative_difference(torch.tensor([3.0, float("nan")]), stock) == float("inf")
    assert relative_difference(torch.zeros(3), stock) == float("inf")  # another shape
    assert tolerance(torch.float32) == 1e-4 and tolerance(torch.bfloat16) == tolerance(torch.float16) == 2e-2


# ------------------------------------------------------------------------------------ --batched_vision_attention

@pytest.fixture(scope="module")
def vision_model(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    return load_model_and_processor(str(tiny_model_dir))[0]


def _pages():
    """Two pages whose 8 x 8-patch windows include cut edge windows (several window lengths)."""
    generator = torch.Generator().manual_seed(0)
    grid = torch.tensor([[1, 24, 36], [1, 20, 28]])
    return torch.randn(24 * 36 + 20 * 28, 3 * 2 * 14 * 14, generator=generator), grid


def _features(model, pixels, grid):
    return torch.cat(model.model.get_image_features(pixels, grid).pooler_output)


def _batched(stock_model):
    model = copy.deepcopy(stock_model)
    assert vision_speedups.batch_window_attention(model) == 2
    return model


def _calls(monkeypatch, name, change=None):
    """Count the calls of ``vision_speedups.<name>``; ``change(result)`` replaces its result (a forced failure)."""
    calls = []
    original = getattr(vision_speedups, name)

    def counted(*args, **kwargs):
        calls.append(1)
        result = original(*args, **kwargs)
        return change(result) if change else result

    monkeypatch.setattr(vision_speedups, name, counted)
    return calls


def _patched_layers(model) -> int:
    return sum("forward" in block.attn.__dict__ for block in model.model.visual.blocks)


def test_batched_attention_that_raises_falls_back_to_the_loop(vision_model, monkeypatch, caplog):
    model, (pixels, grid) = _batched(vision_model), _pages()

    def unsupported(*args, **kwargs):
        raise RuntimeError("no kernel for this shape\nsecond line")

    monkeypatch.setattr(vision_speedups, "_batched_windows", unsupported)
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        features = _features(model, pixels, grid)
        again = _features(model, pixels, grid)
    assert torch.equal(features, _features(vision_model, pixels, grid))  # the stock loop's result, exactly
    assert torch.equal(again, features) and _patched_layers(model) == 0  # every layer has the loop back
    assert _warnings(caplog) == ["WARNING: --batched_vision_attention is off for the rest of this run (the batched "
                                 "call failed: RuntimeError: no kernel for this shape); the per-window attention "
                                 "loop runs instead"]
    assert fallback.fallbacks()[-1][0] == "--batched_vision_attention"


def test_batched_attention_unlike_the_loop_on_first_use_falls_back(vision_model, monkeypatch, caplog):
    model, (pixels, grid) = _batched(vision_model), _pages()
    calls = _calls(monkeypatch, "_batched_windows", change=lambda out: out * 1.01)  # 1 % off: beyond 1e-4
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        features = _features(model, pixels, grid)
    stock = _features(vision_model, pixels, grid)
    assert torch.equal(features, stock) and len(calls) == 1 and _patched_layers(model) == 0
    (line,) = _warnings(caplog)
    assert line.startswith("WARNING: --batched_vision_attention is off for the rest of this run (its first result "
                           "differs from the per-window loop's by 0.01 (relative), more than the 1e-04 allowed in "
                           "torch.float32)")
    features.sum().backward()  # the loop's result carries the gradients
    assert all(p.grad is not None for p in model.model.visual.blocks[0].attn.parameters())


def _out_of_memory(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize("failure", ["differs in a recomputing block", "raises later, not recomputing"])
def test_a_fallback_with_gradients_gives_the_stock_gradients(vision_model, monkeypatch, caplog, failure):
    """Non-reentrant checkpointing (the vision / partial plans, and transformers' own) recomputes a block in the
    backward pass and checks it saves the same tensors: a failed batched call must have saved nothing."""
    from olmocr_rl.model.grad_checkpointing import CheckpointPlan, apply_checkpointing

    stock, model, (pixels, grid) = copy.deepcopy(vision_model).train(), _batched(vision_model).train(), _pages()
    if failure == "differs in a recomputing block":
        assert apply_checkpointing(model, CheckpointPlan("vision", "test")) == "2 vision blocks"
    if failure.startswith("raises later"):
        _features(model, pixels, grid)  # the first call checks and passes
        monkeypatch.setattr(vision_speedups, "_batched_windows", _out_of_memory)
    else:
        _calls(monkeypatch, "_batched_windows", change=lambda out: out * 1.01)
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        features = _features(model, pixels, grid)
    (features * features).sum().backward()
    reference = _features(stock, pixels, grid)
    (reference * reference).sum().backward()
    assert torch.equal(features, reference) and len(_warnings(caplog)) == 1 and _patched_layers(model) == 0
    for (name, ours), theirs in zip(model.model.visual.named_parameters(), stock.model.visual.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_a_later_failure_in_a_recomputing_block_raises_as_it_is(vision_model, monkeypatch, caplog):
    """What the failed call saved for the backward pass cannot be taken back, so its error is not hidden; without
    gradients (generation's prefill) the same failure falls back."""
    from olmocr_rl.model.grad_checkpointing import CheckpointPlan, apply_checkpointing

    model, (pixels, grid) = _batched(vision_model).train(), _pages()
    apply_checkpointing(model, CheckpointPlan("vision", "test"))
    _features(model, pixels, grid)
    monkeypatch.setattr(vision_speedups, "_batched_windows", _out_of_memory)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 2.00 GiB"):
        _features(model, pixels, grid)
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER), torch.no_grad():
        features = _features(model, pixels, grid)
    assert torch.equal(features, _features(vision_model, pixels, grid)) and _patched_layers(model) == 0
    assert len(_warnings(caplog)) == 1 and "OutOfMemoryError: CUDA out of memory" in _warnings(caplog)[0]


def test_batched_attention_that_agrees_is_checked_once_and_stays(vision_model, monkeypatch, caplog):
    model, (pixels, grid) = _batched(vision_model), _pages()
    batched = _calls(monkeypatch, "_batched_windows")
    sdpa = []
    original = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: sdpa.append(1) or original(*a, **k))
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        first = _features(model, pixels, grid)
        first_calls, sdpa[:] = len(sdpa), []
        second = _features(model, pixels, grid)
    assert not _warnings(caplog) and _patched_layers(model) == 2 and len(batched) == 2 + 1 + 2
    # batched: one call per window length in the windowed layer (64, 32, 16 patches) and per image in the full one;
    # the first use adds, in the first (windowed) layer, the check without gradients: the batched call (3) and the
    # stock loop (15 + 12 windows)
    assert (first_calls, len(sdpa)) == (5 + 3 + 27, 5)
    torch.testing.assert_close(first, _features(vision_model, pixels, grid), rtol=1e-5, atol=1e-6)
    assert torch.equal(first, second)
    assert all(block.attn._olmocr_rl_window_guard.checked for block in model.model.visual.blocks)


# ------------------------------------------------------------------------------------------ --compiled_generation
# The compiled path here is its static, bucketed cache without the compiling (which takes minutes on CPU): the
# check and the fallback do not depend on what the compiled path is, only on what it returns.

TOKENS = 12


@pytest.fixture(scope="module")
def generation_trainer(tiny_model_dir, tmp_path_factory):
    from datasets import Dataset
    from PIL import Image
    from trl import GRPOConfig

    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.trainer.plain import PlainGRPOTrainer

    model, processor = load_model_and_processor(str(tiny_model_dir))
    prompt = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    dataset = Dataset.from_list([{"prompt": prompt, "image": Image.new("RGB", (56, 84), "white")}])
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("generation")), report_to="none", use_cpu=True,
                      bf16=False, num_generations=4, per_device_train_batch_size=4, max_completion_length=TOKENS,
                      generation_kwargs={"min_new_tokens": TOKENS}, logging_steps=1, seed=0)
    trainer = PlainGRPOTrainer(model=model, args=args, processing_class=processor,
                               reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], train_dataset=dataset)
    trainer.model.train()
    return trainer, [dict(dataset[0]) for _ in range(4)], copy.deepcopy(trainer.generation_config)


def _generated(trainer, inputs, seed=0):
    """One batch's completion ids, and the next random draw after it (where generation left the random state)."""
    torch.manual_seed(seed)
    ids = trainer._generate_and_score_completions(inputs)["completion_ids"]
    return ids, torch.rand(1).item()


def _generate_calls(monkeypatch, trainer, broken=None):
    """Record each ``model.generate``'s cache implementation; ``broken(ids, prompt_length)`` forces a failure of the
    static-cache (compiled) path."""
    calls = []
    stock = trainer.model.generate

    def generate(*args, generation_config, **kwargs):
        calls.append(generation_config.cache_implementation)
        ids = stock(*args, generation_config=generation_config, **kwargs)
        if broken and generation_config.cache_implementation == "static":
            return broken(ids, kwargs["input_ids"].shape[1])
        return ids

    monkeypatch.setattr(trainer.model, "generate", generate)
    return calls


@pytest.fixture
def trainers(generation_trainer):
    """The trainer on the stock path (TRL's config), and a function switching it to the compiled path."""
    from olmocr_rl.trainer.generation import switch_on

    trainer, inputs, stock_config = generation_trainer
    trainer.generation_config = copy.deepcopy(stock_config)
    trainer.compiled_generation = trainer.compiled_generation_checked = False

    def compiled():
        switch_on(trainer)  # what compiled_generation=True does at construction
        trainer.generation_config.disable_compile = True  # the static cache only (see above)
        return trainer

    return trainer, inputs, compiled


def test_compiled_generation_that_agrees_is_kept_and_checked_once(trainers, monkeypatch, caplog):
    trainer, inputs, compiled = trainers
    torch.manual_seed(0)
    stock_ids = trainer._generate_and_score_completions(inputs)["completion_ids"]
    torch.rand(1)  # the compiled path below draws one more number than the stock path:
    compiled_next = torch.rand(1).item()  # the run goes on from where the compiled path left the random state
    compiled()
    calls = _generate_calls(monkeypatch, trainer, broken=lambda ids, prompt_length: (torch.rand(1), ids)[1])
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        ids, next_draw = _generated(trainer, inputs)
        assert calls == ["static", None]  # the first batch: compiled, then the stock path to compare
        calls.clear()
        _generated(trainer, inputs, seed=1)
    assert calls == ["static"] and not _warnings(caplog) and trainer.compiled_generation_checked
    assert torch.equal(ids, stock_ids) and ids.shape[1] == TOKENS and next_draw == compiled_next
    assert trainer.generation_config.cache_implementation == "static"


def test_compiled_generation_that_raises_falls_back_to_the_stock_path(trainers, monkeypatch, caplog):
    trainer, inputs, compiled = trainers
    stock_ids, stock_next = _generated(trainer, inputs)
    compiled()

    def compile_error(ids, prompt_length):
        raise RuntimeError("BackendCompilerFailed: inductor raised an error\ntraceback lines")

    calls = _generate_calls(monkeypatch, trainer, broken=compile_error)
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        ids, next_draw = _generated(trainer, inputs)
        _generated(trainer, inputs, seed=1)
    assert torch.equal(ids, stock_ids) and next_draw == stock_next  # the stock batch from the same random state
    assert calls == ["static", None, None] and not trainer.compiled_generation
    assert trainer.generation_config.cache_implementation is None and trainer.generation_config.disable_compile
    assert _warnings(caplog) == [
        "WARNING: --compiled_generation is off for the rest of this run (compiled generation failed: RuntimeError: "
        "BackendCompilerFailed: inductor raised an error); HF generation with TRL's dynamic cache, uncompiled "
        "runs instead"]


def test_compiled_generation_unlike_the_stock_path_on_the_first_batch_falls_back(trainers, monkeypatch, caplog):
    from olmocr_rl.trainer.generation import prefix_agreement

    trainer, inputs, compiled = trainers
    stock_ids, stock_next = _generated(trainer, inputs)
    compiled()

    def wrong_cache(ids, prompt_length):  # right first token (the prefill), then other tokens
        ids = ids.clone()
        ids[:, prompt_length + 1:] = (ids[:, prompt_length + 1:] + 1) % 50
        return ids

    calls = _generate_calls(monkeypatch, trainer, broken=wrong_cache)
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        ids, next_draw = _generated(trainer, inputs)
    assert torch.equal(ids, stock_ids) and next_draw == stock_next and calls == ["static", None]
    assert not trainer.compiled_generation and trainer.generation_config.cache_implementation is None
    assert _warnings(caplog) == [
        f"WARNING: --compiled_generation is off for the rest of this run (on the first batch its completions agree "
        f"with the stock path's on {1 / TOKENS:.0%} of their first 32 tokens, less than the 75% required); HF "
        f"generation with TRL's dynamic cache, uncompiled runs instead"]
    assert prefix_agreement([[1, 2, 3, 4]], [[1, 2, 9, 4]]) == 0.5
    assert prefix_agreement([[1] * 40], [[1] * 40]) == 1.0 and prefix_agreement([[1]], [[1], [1]]) == 0.0
    assert prefix_agreement([[1] * 31 + [2, 3]], [[1] * 31 + [3, 3]]) == 31 / 32  # beyond 32 tokens: not compared


# ----------------------------------------------------------------------- --gradient_checkpointing auto on a GPU

def _gpu_plan(tiny_model_dir, monkeypatch, properties):
    """``plan_for_run`` of the tiny model as on a CUDA machine whose ``get_device_properties`` does ``properties``."""
    import dataclasses

    from olmocr_rl.config import parse_args, validate
    from olmocr_rl.config.checks import max_image_tokens
    from olmocr_rl.config.environment import Environment
    from olmocr_rl.config.flags import PROMPT_TEXT_TOKENS
    from olmocr_rl.model.grad_checkpointing import plan_for_run

    cfg = validate(parse_args(["--train_bench_data_folder", "bench_data_sample", "--reward_bench", "--report_to",
                               "none", "--num_generations", "8", "--model_name", str(tiny_model_dir)]))
    cfg = dataclasses.replace(cfg, environment=Environment(cuda=True, vllm=False, num_processes=1))
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    return plan_for_run(cfg, image_tokens=max_image_tokens(cfg.target_longest_image_dim),
                        text_tokens=PROMPT_TEXT_TOKENS)


def test_checkpointing_plan_on_a_gpu_whose_memory_cannot_be_read_is_the_stock_one(tiny_model_dir, monkeypatch, caplog):
    from types import SimpleNamespace

    def no_device(index):
        raise RuntimeError(f"CUDA error: invalid device ordinal {index}\nCUDA kernel errors might be reported later")

    stock = "every layer recomputing (TRL's gradient checkpointing) runs instead"
    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        unreadable = _gpu_plan(tiny_model_dir, monkeypatch, no_device)
        empty = _gpu_plan(tiny_model_dir, monkeypatch, lambda index: SimpleNamespace(total_memory=0))
    assert unreadable.mode == empty.mode == "full"  # what TRL does: the flag the GRPOConfig gets
    assert unreadable.reason == "--gradient_checkpointing auto: the GPU's memory is unknown: every layer recomputes"
    assert _warnings(caplog) == [
        "WARNING: --gradient_checkpointing auto is off for the rest of this run (the GPU's memory could not be read: "
        f"RuntimeError: CUDA error: invalid device ordinal 0); {stock}",
        f"WARNING: --gradient_checkpointing auto is off for the rest of this run (the GPU's memory reads as 0 bytes); "
        f"{stock}"]


def test_checkpointing_plan_on_a_gpu_that_reads_plans_by_its_memory(tiny_model_dir, monkeypatch, caplog):
    from types import SimpleNamespace

    with caplog.at_level(logging.WARNING, logger=FALLBACK_LOGGER):
        roomy = _gpu_plan(tiny_model_dir, monkeypatch, lambda index: SimpleNamespace(total_memory=80 * 2**30))
        tight = _gpu_plan(tiny_model_dir, monkeypatch, lambda index: SimpleNamespace(total_memory=2 * 2**30))
    assert roomy.mode == "off" and "nothing recomputes" in roomy.reason and not _warnings(caplog)
    assert tight.mode == "full" and "every layer recomputes: " in tight.reason  # 2 GiB: all of it headroom


def test_the_checks_judge_by_the_least_precise_dtype_the_result_went_through():
    from olmocr_rl.model.fallback import compute_dtype

    model = torch.nn.Linear(2, 2)
    assert compute_dtype(model, torch.float32) == torch.float32
    assert compute_dtype(model.to(torch.bfloat16), torch.float32) == torch.bfloat16  # fp32 log-probs of bf16 weights
    mixed = torch.nn.Sequential(torch.nn.Linear(2, 2).to(torch.float16), torch.nn.Linear(2, 2))  # LoRA on a half base
    assert compute_dtype(mixed, torch.float32) == torch.float16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compute_dtype(torch.nn.Linear(2, 2), torch.float32) == torch.bfloat16
