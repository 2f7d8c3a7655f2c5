"""The tiny local model: built offline, deterministic, loads through the training loader, generates
from an image prompt, and trains with a real trl.GRPOTrainer on CPU."""

from __future__ import annotations

import hashlib
import json

import torch
from PIL import Image, ImageDraw

from olmocr_rl.model.loading import load_model_and_processor
from olmocr_rl.tiny_model import SPECIAL_TOKENS, build_tiny_model


def _page(text: str) -> Image.Image:
    image = Image.new("RGB", (180, 240), "white")
    ImageDraw.Draw(image).text((12, 12), text, fill="black")
    return image


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tiny_model_folder_is_complete(tiny_model_dir):
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja", "processor_config.json", "generation_config.json"):
        assert (tiny_model_dir / name).is_file(), name
    info = json.loads((tiny_model_dir / "olmocr_rl_tiny_model.json").read_text())
    assert 100_000 <= info["parameters"] <= 5_000_000
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2_5_vl"
    # The stock class name is recorded so GPU boxes (with torchvision) build the full processor.
    assert "ImageOnly" not in (tiny_model_dir / "processor_config.json").read_text()


def test_same_seed_same_bytes_other_seed_other_weights(tiny_model_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert _sha(again / "model.safetensors") == _sha(tiny_model_dir / "model.safetensors")
    assert _sha(again / "tokenizer.json") == _sha(tiny_model_dir / "tokenizer.json")
    assert _sha(other / "model.safetensors") != _sha(tiny_model_dir / "model.safetensors")


def test_reload_offline_and_generate_from_image_prompt(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, processor = load_model_and_processor(str(tiny_model_dir))
    assert model.dtype == torch.float32  # CPU default
    tokenizer = processor.tokenizer
    for token in SPECIAL_TOKENS:
        assert tokenizer.convert_tokens_to_ids(token) != tokenizer.unk_token_id
    assert tokenizer.eos_token == "<|im_end|>"

    messages = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.index("Transcribe.") < prompt.index("<|image_pad|>")  # text before image, as given
    assert prompt.endswith("<|im_start|>assistant\n")
    inputs = processor(text=[prompt], images=[_page("Hello world")], return_tensors="pt")
    n_image_tokens = int((inputs["input_ids"] == model.config.image_token_id).sum())
    assert n_image_tokens == int(inputs["image_grid_thw"].prod()) // 4  # one token per 2x2 merged patch
    torch.manual_seed(0)
    out = model.generate(**inputs, max_new_tokens=6, do_sample=True)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 6 or out[0, -1].item() in model.generation_config.eos_token_id




def test_chars_tokenizer_spells_page_text_a_byte_a_token_and_keeps_markup_whole(tmp_path):
    out = build_tiny_model(tmp_path / "reader", seed=0, shape="reader", tokenizer="chars")
    info = json.loads((out / "olmocr_rl_tiny_model.json").read_text())
    assert info["tokenizer"] == "chars" and info["shape"] == "reader"
    _, processor = load_model_and_processor(str(out))
    tokenizer = processor.tokenizer
    text = "Quarterly report 1,204.5 naïve"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.encode("utf-8"))  # no merges: an unseen word costs its bytes
    assert tokenizer.decode(ids) == text
    for piece in ("<td", ' colspan="2"', "</table>", "\\(", "primary_language: en", "---"):
        assert len(tokenizer.encode(piece, add_special_tokens=False)) == 1, piece
    assert len(tokenizer) < 400
