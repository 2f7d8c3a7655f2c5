"""Tests for olmocr_rl.soup: exact uniform averages, layout kept, state dropped, clear refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from olmocr_rl.soup import SoupError, average_tensors, main, soup_checkpoints

CONFIG = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl"}


def make_ckpt(path: Path, shards: dict[str, dict[str, torch.Tensor]], config=CONFIG, extra=None, index=None):
    """Write a checkpoint folder: ``shards`` maps file name -> tensors; ``index`` adds the sharding index."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    for name, tensors in shards.items():
        if name.endswith(".bin"):
            torch.save(tensors, path / name)
        else:
            save_file(tensors, path / name, metadata={"format": "pt"})
    if index is None:
        index = len(shards) > 1
    if index:
        weight_map = {t: name for name, tensors in shards.items() for t in tensors}
        first = next(iter(shards))
        index_name = "pytorch_model.bin.index.json" if first.endswith(".bin") else "model.safetensors.index.json"
        (path / index_name).write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    for name, text in (extra or {}).items():
        (path / name).write_text(text)
    return path


def run_main(capsys, *argv):
    """Run the CLI in-process; return (exit code, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    return exc.value.code, capsys.readouterr().err


# --------------------------------------------------------------------------------------------- maths


def test_average_hand_worked_fp32():
    a = torch.tensor([1.0, 2.0, 3.0])
    b = torch.tensor([3.0, 6.0, -1.0])
    c = torch.tensor([2.0, 1.0, 1.0])
    assert torch.equal(average_tensors([a, b]), torch.tensor([2.0, 4.0, 1.0]))
    assert torch.equal(average_tensors([a, b, c]), torch.tensor([2.0, 3.0, 1.0]))
    # A lazy iterable (how the CLI streams inputs) gives the same mean and leaves the inputs untouched.
    assert torch.equal(average_tensors(t for t in (a, b, c)), torch.tensor([2.0, 3.0, 1.0]))
    assert torch.equal(a, torch.tensor([1.0, 2.0, 3.0]))


def test_average_accumulates_in_fp32_not_bf16():
    # In bf16 (8 significant bits) 256 + 1 rounds back to 256, so a bf16 running sum of 256, 1, 1 is 256
    # and its mean 85.33 -> 85.5; the fp32 sum is 258, mean 86 exactly, which bf16 represents.
    inputs = [torch.tensor([256.0], dtype=torch.bfloat16), torch.tensor([1.0], dtype=torch.bfloat16),
              torch.tensor([1.0], dtype=torch.bfloat16)]
    naive = (inputs[0] + inputs[1] + inputs[2]) / 3
    assert naive.item() != 86.0
    out = average_tensors(inputs)
    assert out.dtype == torch.bfloat16
    assert out.item() == 86.0


def test_integer_buffers_must_match():
    ids = torch.arange(4)
    assert torch.equal(average_tensors([ids, ids.clone()]), ids)
    with pytest.raises(SoupError, match="non-floating tensor pos .* differs"):
        average_tensors([ids, ids + 1], name="pos")


# --------------------------------------------------------------------------------------------- files


def _two_sharded(tmp_path):
    a = make_ckpt(tmp_path / "a", {
        "model-00001-of-00002.safetensors": {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
                                             "h": torch.tensor([0.5, 1.5], dtype=torch.bfloat16)},
        "model-00002-of-00002.safetensors": {"lm_head.weight": torch.tensor([10.0, -2.0], dtype=torch.float16),
                                             "pos": torch.arange(3)},
    })
    b = make_ckpt(tmp_path / "b", {
        "model-00001-of-00002.safetensors": {"w": torch.tensor([[3.0, 0.0], [1.0, -4.0]]),
                                             "h": torch.tensor([1.5, 2.5], dtype=torch.bfloat16)},
        "model-00002-of-00002.safetensors": {"lm_head.weight": torch.tensor([0.0, 4.0], dtype=torch.float16),
                                             "pos": torch.arange(3)},
    })
    return a, b


def test_sharded_soup_is_exact_mean_and_keeps_layout(tmp_path):
    a, b = _two_sharded(tmp_path)
    out = tmp_path / "soup"
    summary = soup_checkpoints([a, b], out)
    assert summary.num_tensors == 4
    first = load_file(out / "model-00001-of-00002.safetensors")
    second = load_file(out / "model-00002-of-00002.safetensors")
    assert set(first) == {"w", "h"} and set(second) == {"lm_head.weight", "pos"}
    assert torch.equal(first["w"], torch.tensor([[2.0, 1.0], [2.0, 0.0]]))
    assert first["h"].dtype == torch.bfloat16 and torch.equal(first["h"].float(), torch.tensor([1.0, 2.0]))
    assert second["lm_head.weight"].dtype == torch.float16
    assert torch.equal(second["lm_head.weight"].float(), torch.tensor([5.0, 1.0]))
    assert torch.equal(second["pos"], torch.arange(3))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {"w": "model-00001-of-00002.safetensors", "h": "model-00001-of-00002.safetensors",
                                   "lm_head.weight": "model-00002-of-00002.safetensors",
                                   "pos": "model-00002-of-00002.safetensors"}
    with safe_open(out / "model-00001-of-00002.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}  # transformers refuses files without it


def test_random_tensors_exact_mean(tmp_path):
    gen = torch.Generator().manual_seed(0)
    ta = {"x": torch.randn(7, 5, generator=gen), "y": torch.randn(3, generator=gen).to(torch.bfloat16)}
    tb = {"x": torch.randn(7, 5, generator=gen), "y": torch.randn(3, generator=gen).to(torch.bfloat16)}
    a = make_ckpt(tmp_path / "a", {"model.safetensors": ta})
    b = make_ckpt(tmp_path / "b", {"model.safetensors": tb})
    soup_checkpoints([a, b], tmp_path / "out")
    got = load_file(tmp_path / "out" / "model.safetensors")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]
    for key in ta:
        expected = ((ta[key].float() + tb[key].float()) / 2).to(ta[key].dtype)
        assert got[key].dtype == ta[key].dtype
        assert torch.equal(got[key], expected)


def test_drops_training_state_and_copies_processor_files(tmp_path):
    processor_files = {
        "generation_config.json": "{}",
        "tokenizer.json": "{}",
        "tokenizer_config.json": "{}",
        "chat_template.jinja": "{{ messages }}",
        "preprocessor_config.json": "{}",
        "special_tokens_map.json": "{}",
        "vocab.json": "{}",
        "merges.txt": "#version",
    }
    state_files = {
        "optimizer.pt": "x", "scheduler.pt": "x", "rng_state_0.pth": "x", "rng_state.pth": "x",
        "trainer_state.json": "{}", "training_args.bin": "x", "scaler.pt": "x", "latest": "global_step10",
    }
    a = make_ckpt(tmp_path / "a", {"model.safetensors": {"x": torch.ones(2)}}, extra={**processor_files, **state_files})
    (a / "global_step10").mkdir()
    (a / "global_step10" / "mp_rank_00_model_states.pt").write_text("x")
    b = make_ckpt(tmp_path / "b", {"model.safetensors": {"x": torch.zeros(2)}},
                  extra={"tokenizer.json": '{"from": "b"}'})
    summary = soup_checkpoints([a, b], tmp_path / "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(["config.json", "model.safetensors", *processor_files])
    assert (tmp_path / "out" / "tokenizer.json").read_text() == "{}"  # from the first input
    assert set(summary.dropped) == {*state_files, "global_step10/"}


def test_bin_inputs_become_safetensors(tmp_path):
    a = make_ckpt(tmp_path / "a", {"pytorch_model-00001-of-00002.bin": {"x": torch.tensor([1.0, 3.0])},
                                   "pytorch_model-00002-of-00002.bin": {"y": torch.tensor([2.0])}})
    b = make_ckpt(tmp_path / "b", {"pytorch_model-00001-of-00002.bin": {"x": torch.tensor([3.0, 5.0])},
                                   "pytorch_model-00002-of-00002.bin": {"y": torch.tensor([0.0])}})
    soup_checkpoints([a, b], tmp_path / "out")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json"])
    assert torch.equal(load_file(out / "model-00001-of-00002.safetensors")["x"], torch.tensor([2.0, 4.0]))
    assert torch.equal(load_file(out / "model-00002-of-00002.safetensors")["y"], torch.tensor([1.0]))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}


def test_stale_bin_beside_safetensors_is_not_copied(tmp_path):
    a = make_ckpt(tmp_path / "a", {"model.safetensors": {"x": torch.ones(1)}})
    torch.save({"x": torch.ones(1)}, a / "pytorch_model.bin")
    b = make_ckpt(tmp_path / "b", {"model.safetensors": {"x": torch.ones(1)}})
    soup_checkpoints([a, b], tmp_path / "out")
    assert not (tmp_path / "out" / "pytorch_model.bin").exists()


# --------------------------------------------------------------------------------------------- CLI refusals


def _single(tmp_path, name, tensors, config=CONFIG, **kw):
    return make_ckpt(tmp_path / name, {"model.safetensors": tensors}, config=config, **kw)


@pytest.mark.parametrize(
    ("b_kwargs", "message"),
    [
        (dict(config={**CONFIG, "architectures": ["Qwen2VLForConditionalGeneration"]}),
         "architecture mismatch: .*a/config.json has architectures=\\['Qwen2_5_VLForConditionalGeneration'\\] "
         "but .*b/config.json has \\['Qwen2VLForConditionalGeneration'\\]"),
        (dict(config={**CONFIG, "model_type": "qwen2_vl"}), "architecture mismatch: .*model_type='qwen2_5_vl'"),
        (dict(tensors={"x": torch.ones(2), "extra": torch.ones(1)}),
         "tensor names differ in model.safetensors: .*b lacks \\[\\] and has extra \\['extra'\\]"),
        (dict(tensors={"x": torch.ones(3)}), "shape mismatch for x in model.safetensors: \\[2\\] in .*a vs \\[3\\] in .*b"),
        (dict(tensors={"x": torch.ones(2, dtype=torch.bfloat16)}),
         "dtype mismatch for x in model.safetensors: torch.float32 in .*a vs torch.bfloat16 in .*b"),
    ],
)
def test_mismatches_refused_with_clear_message(tmp_path, capsys, b_kwargs, message):
    a = _single(tmp_path, "a", {"x": torch.ones(2)})
    b = _single(tmp_path, "b", b_kwargs.get("tensors", {"x": torch.zeros(2)}), config=b_kwargs.get("config", CONFIG))
    code, err = run_main(capsys, a, b, tmp_path / "out")
    assert code == 2
    assert err.startswith("soup: error: ") and err.count("\n") == 1
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_different_weight_files_refused(tmp_path, capsys):
    a = _single(tmp_path, "a", {"x": torch.ones(2), "y": torch.ones(1)})
    b = make_ckpt(tmp_path / "b", {"model-00001-of-00002.safetensors": {"x": torch.ones(2)},
                                   "model-00002-of-00002.safetensors": {"y": torch.ones(1)}})
    code, err = run_main(capsys, a, b, tmp_path / "out")
    assert code == 2
    assert "weight files differ: only in" in err and "['model.safetensors']" in err
    assert "['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']" in err


def test_argument_errors(tmp_path, capsys):
    a = _single(tmp_path, "a", {"x": torch.ones(2)})
    b = _single(tmp_path, "b", {"x": torch.zeros(2)})
    code, err = run_main(capsys, a, tmp_path / "out")
    assert code == 2 and "soup needs at least 2 checkpoints, got 1" in err

    code, err = run_main(capsys, a, tmp_path / "nope", tmp_path / "out")
    assert code == 2 and f"{tmp_path / 'nope'}: no such directory" in err

    code, err = run_main(capsys, a, "s3://bucket/ckpt", tmp_path / "out")
    assert code == 2 and "only local folders are supported" in err

    code, err = run_main(capsys, a, b, a)
    assert code == 2 and "is also an input" in err

    no_config = tmp_path / "c"
    no_config.mkdir()
    save_file({"x": torch.ones(2)}, no_config / "model.safetensors")
    code, err = run_main(capsys, a, no_config, tmp_path / "out")
    assert code == 2 and "no config.json" in err

    lora = _single(tmp_path, "lora", {"x": torch.ones(2)}, extra={"adapter_model.safetensors": ""})
    code, err = run_main(capsys, a, lora, tmp_path / "out")
    assert code == 2 and "LoRA adapter" in err


def test_non_empty_out_dir_needs_overwrite(tmp_path, capsys):
    a = _single(tmp_path, "a", {"x": torch.ones(2)})
    b = _single(tmp_path, "b", {"x": torch.zeros(2)})
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    code, err = run_main(capsys, a, b, out)
    assert code == 2 and "exists and is not empty; pass --overwrite" in err
    assert (out / "old.txt").read_text() == "keep me"

    assert main([str(a), str(b), str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert torch.equal(load_file(out / "model.safetensors")["x"], torch.full((2,), 0.5))
    assert "averaged 2 checkpoints (1 tensors in 1 file(s))" in capsys.readouterr().out

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(a), str(b), str(empty)]) == 0  # an existing empty folder is fine


def test_cli_help_and_no_traceback(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    help_text = capsys.readouterr().out
    assert "CKPT_DIR... OUT_DIR" in help_text and "Local folders only" in help_text and "--overwrite" in help_text
    with pytest.raises(SystemExit) as exc:  # `python -m olmocr_rl.soup` exits with main()'s SystemExit
        main([str(tmp_path / "x"), str(tmp_path / "y"), str(tmp_path / "out")])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"soup: error: {tmp_path / 'x'}: no such directory\n"


# --------------------------------------------------------------------------------------------- real model


def test_souped_tiny_qwen25vl_loads_and_generates(tiny_model_dir, tmp_path):
    """The project's own model: two seeds of the tiny Qwen2.5-VL, souped, reload through the training
    loader (processor files were copied) and transcribe an image prompt."""
    from PIL import Image, ImageDraw

    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.tiny_model import build_tiny_model

    other = build_tiny_model(tmp_path / "seed1", seed=1)
    out = tmp_path / "soup"
    assert main([str(tiny_model_dir), str(other), str(out)]) == 0

    weights = [load_file(d / "model.safetensors") for d in (tiny_model_dir, other, out)]
    assert set(weights[2]) == set(weights[0])
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    for key, souped in weights[2].items():
        expected = ((weights[0][key].float() + weights[1][key].float()) / 2).to(weights[0][key].dtype)
        assert torch.equal(souped, expected), key

    model, processor = load_model_and_processor(str(out))
    image = Image.new("RGB", (180, 240), "white")
    ImageDraw.Draw(image).text((12, 12), "Soup page", fill="black")
    messages = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[prompt], images=[image], return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=4, do_sample=False, min_new_tokens=4)
    assert generated.shape[1] == inputs["input_ids"].shape[1] + 4
