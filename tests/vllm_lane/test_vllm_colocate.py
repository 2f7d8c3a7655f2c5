"""The training CLI with ``--vllm_mode colocate`` on the real vLLM engine (CPU build), fp32.

Three steps at a large learning rate (1e-3), so that a weight sync that did not happen, or vision
features cached from the old weights, would show as a log-prob gap from step 2 on. Each run records
the prompt token ids the trainer scores and the ones vLLM expanded (tests/vllm_lane/record_rollouts.py).
"""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file

from vllm_lane.lane import BENCH, failure, read_metrics, run_recorded

ARMS = {"plain": [], "olmorl": ["--olmorl"]}
MAX_LOGP_GAP = 1e-3


def colocate_flags(model, out, *, steps=3, generations=4, image_dim=448, completion=128, compiled=False) -> list:
    """The lane's colocated run. ``--vllm_enforce_eager`` unless ``compiled``: vLLM's CPU engine spends about 110 s
    compiling each new engine (model folder, context) on a quiet core, which the claims here do not need. The
    compiled engine, vLLM's default, is proven by the warm-model and LoRA runs below (one compile, then vLLM's
    compile cache): each step's weight sync lands in the weights the compiled model reads."""
    return [
        "--train_bench_data_folder", BENCH, "--model_name", model, "--output_dir", out, "--reward_bench",
        "--num_generations", generations, "--per_device_train_batch_size", generations,
        "--gradient_accumulation_steps", 1, "--max_steps", steps, "--max_completion_length", completion,
        "--vllm_mode", "colocate", "--report_to", "none", "--no-log_completions", "--logging_steps", 1,
        "--target_longest_image_dim", image_dim, "--learning_rate", 1e-3, "--warmup_steps", 0,
        "--save_steps", 100000, "--seed", 0, *([] if compiled else ["--vllm_enforce_eager"]),
    ]


def check_engine(stderr: str, *, compiled: bool) -> None:
    """The colocated engine was built in float32, compiled (vLLM's default) or eager as the run asked."""
    line = next((line for line in stderr.splitlines() if "colocated vLLM engine: " in line), "")
    assert "dtype=float32" in line, stderr[-3000:]
    assert ("enforce_eager=True" in line) is not compiled, line


def vision_pad_ids(model_dir) -> set[int]:
    config = json.loads((model_dir / "config.json").read_text())
    return {config["image_token_id"], config["video_token_id"]}


def check_prompts_and_pads(records, pads, steps):
    assert [r["step"] for r in records] == list(range(steps))
    for record in records:
        # what vLLM sampled from is token for token what the trainer scores
        assert record["vllm_prompt_ids"] == record["trainer_prompt_ids"]
        for completion in record["completion_ids"]:
            assert not pads & set(completion), "vLLM sampled a vision pad token"


PAD_LOGIT_SCALE = 100.0


@pytest.fixture(scope="module")
def pad_heavy_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny random model with its two vision pad rows of lm_head set to +-100 u (u a fixed unit vector): for
    any hidden state h one of them has the logit 100 |u.h|, so an unbanned sampler picks a pad at about 94 % of
    positions (the stock random model: about 0.3 %, once per 360 tokens). Checked here on random contexts."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForImageTextToText

    model = tmp_path_factory.mktemp("pad_heavy") / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = load_file(model / "model.safetensors")
    head = weights["lm_head.weight"]
    u = torch.randn(head.shape[1], generator=torch.Generator().manual_seed(0))
    first, second = sorted(vision_pad_ids(model))
    head[first], head[second] = PAD_LOGIT_SCALE * u / u.norm(), -PAD_LOGIT_SCALE * u / u.norm()
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    hf = AutoModelForImageTextToText.from_pretrained(model, dtype=torch.float32)
    contexts = torch.randint(7, head.shape[0], (4, 128), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        probs = hf(input_ids=contexts).logits.softmax(-1)[..., [first, second]].sum(-1)
    assert probs.mean() > 0.85, probs.mean()  # the rig took: pads dominate whatever the context
    return model


@pytest.mark.parametrize("arm", list(ARMS))
def test_a_pad_heavy_policy_never_samples_image_tokens(pad_heavy_model_dir, tmp_path, arm):
    """vLLM's bad_words keep the vision pads out of every completion, across the weight syncs of three steps: a
    policy that puts about 94 % of each token's mass on them samples none in 3 x 4 completions of 96 forced tokens
    (unbanned, about 1,080 pads would be expected)."""
    out = tmp_path / "out"
    flags = colocate_flags(pad_heavy_model_dir, out, completion=96) + [
        "--generation_kwargs", json.dumps({"ignore_eos": True})] + ARMS[arm]
    result, records = run_recorded(tmp_path, flags)
    assert result.returncode == 0, failure(result)
    check_engine(result.stderr, compiled=False)
    check_prompts_and_pads(records, vision_pad_ids(pad_heavy_model_dir), steps=3)
    lengths = [len(c) for r in records for c in r["completion_ids"]]
    assert lengths == [96] * 12, lengths
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3]


@pytest.mark.parametrize("arm", list(ARMS))
def test_warm_model_vllm_logprobs_equal_the_trainers_at_every_step(sft_model_dir, tmp_path, arm):
    out = tmp_path / "out"
    flags = colocate_flags(sft_model_dir, out, compiled=True) + ["--pages", "simple_lines"] + ARMS[arm]
    result, records = run_recorded(tmp_path, flags)
    assert result.returncode == 0, failure(result)
    check_engine(result.stderr, compiled=True)
    check_prompts_and_pads(records, vision_pad_ids(sft_model_dir), steps=3)
    metrics = read_metrics(out)
    gaps = [m["sampling/sampling_logp_difference/mean"] for m in metrics]
    assert len(gaps) == 3 and max(gaps) <= MAX_LOGP_GAP, gaps
    # The large learning rate moved the weights, so steps 2-3 would show a missing sync.
    before, after = load_file(sft_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    moved = max((after[k] - before[k]).abs().max().item() for k in before)
    assert moved > 1e-3
    print(f"{arm}: mean |vLLM - trainer| log-prob per step {gaps}; "
          f"max {[m['sampling/sampling_logp_difference/max'] for m in metrics]}")


def test_real_qwen25_vl_processor_config_gives_the_same_prompt(sft_model_dir, tmp_path):
    """Released Qwen2.5-VL image settings (min 3,136 / max 12,845,056 px, 14 px patches, merge 2), 1288 px page."""
    model = tmp_path / "model"
    shutil.copytree(sft_model_dir, model)
    config_file = model / "processor_config.json"
    config = json.loads(config_file.read_text())
    for part in ("image_processor", "video_processor"):
        config[part]["size"] = {"shortest_edge": 3136, "longest_edge": 12845056}
    config_file.write_text(json.dumps(config, indent=2))
    out = tmp_path / "out"
    flags = colocate_flags(model, out, steps=1, generations=2, image_dim=1288, completion=16) + ["--pages", "simple_lines"]
    result, records = run_recorded(tmp_path, flags)
    assert result.returncode == 0, failure(result)
    check_prompts_and_pads(records, vision_pad_ids(model), steps=1)
    image_tokens = records[0]["trainer_prompt_ids"][0].count(json.loads((model / "config.json").read_text())["image_token_id"])
    assert image_tokens > 1000  # a full-size page, not the tiny preset's 16
    assert read_metrics(out)[0]["sampling/sampling_logp_difference/mean"] <= MAX_LOGP_GAP


def test_lora_colocate_run_sends_the_merged_weights_at_every_step(sft_model_dir, tmp_path):
    """LoRA (--use_peft) at a large learning rate: every step's sync hands vLLM the adapters merged into the base
    weights under the names it loads (a missing or misnamed weight would show as a log-prob gap from step 2 on),
    and the encoder cache is still reset after each sync."""
    out = tmp_path / "out"
    flags = colocate_flags(sft_model_dir, out, compiled=True) + ["--pages", "simple_lines", "--use_peft",
                                                                 "--learning_rate", 1e-2]
    result, records = run_recorded(tmp_path, flags)
    assert result.returncode == 0, failure(result)
    check_engine(result.stderr, compiled=True)
    assert "LoRA: adapters on 14 layers of the language model" in result.stderr
    check_prompts_and_pads(records, vision_pad_ids(sft_model_dir), steps=3)
    assert [r["encoder_cache_resets"] for r in records] == [1, 2, 3]  # one sync, one reset before each step
    metrics = read_metrics(out)
    gaps = [m["sampling/sampling_logp_difference/mean"] for m in metrics]
    assert len(gaps) == 3 and max(gaps) <= MAX_LOGP_GAP, gaps
    before, after = load_file(sft_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    moved = max((after[k] - before[k]).abs().max().item() for k in before)
    assert moved > 1e-3 and (out / "adapter" / "adapter_model.safetensors").is_file()  # the merged model at the root
    print(f"lora: mean |vLLM - trainer| log-prob per step {gaps}; merged weights moved by up to {moved:.4f}")
