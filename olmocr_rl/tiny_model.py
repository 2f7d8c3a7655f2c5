"""Build a small random-weight Qwen2.5-VL model folder locally, with nothing downloaded.

    python -m olmocr_rl.tiny_model models/tiny                 # ~1M parameters, CPU-friendly
    python -m olmocr_rl.tiny_model models/tiny --seed 3
    python -m olmocr_rl.tiny_model models/qwen3b --shape 3b    # real Qwen2.5-VL-3B architecture, random weights

The folder is complete: ``config.json`` + safetensors weights, a byte-level BPE tokenizer trained
here with ``tokenizers`` on a built-in corpus (plus any ``--corpus`` markdown), Qwen's special tokens,
a Qwen-style chat template that places image parts, ``generation_config.json`` and the image
processor config. It loads with :func:`olmocr_rl.model.loading.load_model_and_processor`, the same loader
the training CLI uses for real checkpoints. The same seed and corpus give byte-identical weights.

``--sft BENCH_DIR`` then warm-starts the model with a short supervised run on the bench folder's
``claude_original/`` references (see :mod:`olmocr_rl.model.warm_start`), so that GRPO starts from a policy that
passes some tests but not all.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterable

#: Qwen's special tokens, in Qwen's order. ``<|im_end|>`` ends an assistant turn (EOS).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# A Qwen-style chat template written for this project: a default system turn, text and image parts in
# the order given, and the assistant header when a generation prompt is asked for.
CHAT_TEMPLATE = (
    "{% if not messages or messages[0]['role'] != 'system' %}"
    "<|im_start|>system{{ '\\n' }}You are a helpful assistant.<|im_end|>{{ '\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}{{ '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)

# Built-in tokenizer corpus (after the prompt and a front matter block, see base_corpus): markdown/HTML/LaTeX pieces and
# plain English, so that transcriptions tokenize into words rather than bytes.
_BASE_CORPUS_TEXT = """\
# Title ## Section ### Subsection **bold** *italic* - item 1. item
<table><thead><tr><th>Name</th><th>Value</th></tr></thead><tbody><tr><td>alpha</td><td>1.5</td></tr></tbody></table>
| Year | Revenue | Cost |
|------|---------|------|
| 2023 | 100 | 50 |
\\( x^2 + y^2 = z^2 \\) \\[ \\int_0^1 f(x) \\, dx = \\frac{a}{b} \\] \\alpha \\beta \\sum_{i=1}^{n} \\sqrt{2}
The quick brown fox jumps over the lazy dog. A report on the results of the annual meeting of the
committee, with tables of figures, notes and references. Page 1 of 10. Chapter one introduces the
method; chapter two describes the data and the experiments; the conclusion summarises the findings.
0 1 2 3 4 5 6 7 8 9 10 100 2024 3.14 50% $12.00 (a) (b) [1] [2] et al. e.g. i.e. Fig. Table Eq.
"""

#: Architecture presets. ``tiny`` is for CPU tests, ``small`` for CPU benchmarks; ``3b``/``7b`` are the real Qwen2.5-VL shapes
#: (hidden sizes, layers, heads, vision tower) with this tokenizer's vocabulary.
SHAPES = {
    "tiny": dict(
        text=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, mrope_section=[4, 6, 6], tie_word_embeddings=False),
        vision=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, fullatt_block_indexes=[1]),
        max_pixels=28 * 28 * 16,
    ),
    # CPU benchmarks (scripts/bench/): big enough that matrix work, not Python, dominates a step on 2 cores.
    "small": dict(
        text=dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, mrope_section=[8, 12, 12], tie_word_embeddings=False),
        vision=dict(depth=4, hidden_size=256, intermediate_size=512, num_heads=4, fullatt_block_indexes=[3]),
        max_pixels=28 * 28 * 1024,
    ),
    "3b": dict(
        text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                  num_key_value_heads=2, mrope_section=[16, 24, 24], tie_word_embeddings=True),
        vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                    fullatt_block_indexes=[7, 15, 23, 31]),
        max_pixels=28 * 28 * 2560,
    ),
    "7b": dict(
        text=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                  num_key_value_heads=4, mrope_section=[16, 24, 24], tie_word_embeddings=False),
        vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                    fullatt_block_indexes=[7, 15, 23, 31]),
        max_pixels=28 * 28 * 2560,
    ),
}


def base_corpus() -> str:
    """The built-in corpus: the v4 prompt, a front matter block, then markdown/HTML/LaTeX and prose."""
    from olmocr_rl.data.front_matter import PageResponse, format_front_matter
    from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt

    front_matter = format_front_matter(PageResponse(
        primary_language="en", is_rotation_valid=True, rotation_correction=0, is_table=False, is_diagram=False,
        natural_text=None))
    return build_no_anchoring_v4_yaml_prompt() + "\n" + front_matter + "\n" + _BASE_CORPUS_TEXT


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 2048):
    """Train a byte-level BPE tokenizer with Qwen's special tokens (ids 0-6) on ``corpus``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(corpus), trainer)
    return tokenizer


def _wrap_tokenizer(raw_tokenizer):
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw_tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:2] + SPECIAL_TOKENS[3:],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def read_corpus_dir(folder: str | Path) -> list[str]:
    """All ``*.md`` files under ``folder`` (sorted, so the tokenizer is deterministic)."""
    return [p.read_text(encoding="utf-8") for p in sorted(Path(folder).rglob("*.md"))]


def build_tiny_model(
    out_dir: str | Path,
    seed: int = 0,
    *,
    shape: str = "tiny",
    extra_corpus: Iterable[str] = (),
    vocab_size: int = 2048,
    dtype: str = "float32",
    device: str = "cpu",
) -> Path:
    """Write a complete random-weight Qwen2.5-VL model folder to ``out_dir`` and return its path."""
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration

    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of {sorted(SHAPES)}")
    preset = SHAPES[shape]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    corpus = [base_corpus()] + list(extra_corpus)
    tokenizer = _wrap_tokenizer(train_tokenizer(corpus, vocab_size=vocab_size))
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    config = _model_config(preset, len(tokenizer), ids)
    torch.manual_seed(seed)
    with torch.device(device):  # a real-size shape initialises in seconds on a GPU
        model = Qwen2_5_VLForConditionalGeneration(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=True,
        temperature=0.8,
    )
    model.save_pretrained(out)

    _save_processor(out, tokenizer, preset["max_pixels"])
    _add_video_processor(out / "processor_config.json")
    (out / "olmocr_rl_tiny_model.json").write_text(
        json.dumps({"seed": seed, "shape": shape, "vocab_size": len(tokenizer),
                    "parameters": sum(p.numel() for p in model.parameters())}, indent=2) + "\n"
    )
    return out


def _model_config(preset: dict, vocab_size: int, ids: dict[str, int]):
    """The Qwen2.5-VL config of a shape preset, with the tokenizer's special-token ids."""
    from transformers import Qwen2_5_VLConfig

    text = dict(preset["text"])
    mrope_section = text.pop("mrope_section")
    tie = text.pop("tie_word_embeddings")
    text_config = dict(
        vocab_size=vocab_size,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": mrope_section},
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        **text,
    )
    vision_config = dict(
        patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
        out_hidden_size=text["hidden_size"], in_channels=3, **preset["vision"],
    )
    return Qwen2_5_VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=tie,
    )


def _save_processor(out: Path, tokenizer, max_pixels: int) -> None:
    """The image-only processor and tokenizer beside the weights, recorded as the stock processor class."""
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from olmocr_rl.model.loading import _image_only_processor_class

    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=56 * 56, max_pixels=max_pixels, patch_size=14, temporal_patch_size=2, merge_size=2,
    )
    processor = _image_only_processor_class()(image_processor, tokenizer, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # Record the stock class so AutoProcessor builds the full processor where torchvision exists.
    for name in ("processor_config.json", "tokenizer_config.json", "preprocessor_config.json"):
        file = out / name
        if file.is_file():
            file.write_text(file.read_text().replace('"ImageOnlyQwen2_5_VLProcessor"', '"Qwen2_5_VLProcessor"'))


def _add_video_processor(processor_config: Path) -> None:
    """Declare a video processor beside the image processor, as released Qwen2.5-VL folders do.

    Stock loaders (transformers' ``AutoProcessor`` where torchvision exists, vLLM's processor) refuse a
    Qwen2.5-VL folder without one. It mirrors the image processor's sizes; the tiny model never sees video.
    """
    config = json.loads(processor_config.read_text())
    image = config["image_processor"]
    video = {k: v for k, v in image.items() if k != "image_processor_type"}
    config["video_processor"] = {**video, "video_processor_type": "Qwen2VLVideoProcessor"}
    processor_config.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.tiny_model",
        description="Write a random-weight Qwen2.5-VL model folder (tokenizer trained locally, nothing downloaded).",
    )
    parser.add_argument("out_dir", help="folder to write the model into (created if missing)")
    parser.add_argument("--seed", type=int, default=0, help="weight-initialisation seed (default 0)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                        help="architecture: tiny (~1M params, CPU tests), small (~25M, CPU benchmarks) or the real "
                             "Qwen2.5-VL 3b/7b shapes (default tiny)")
    parser.add_argument("--vocab_size", type=int, default=2048, help="BPE vocabulary size (default 2048)")
    parser.add_argument("--corpus", action="append", default=[], metavar="DIR",
                        help="extra folder of *.md files for the tokenizer corpus (repeatable)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help="stored weight dtype (default float32 for tiny, bfloat16 for 3b/7b)")
    parser.add_argument("--device", default=None, help="where to initialise the weights (default cuda for 3b/7b when available)")
    parser.add_argument("--sft", metavar="BENCH_DIR", default=None,
                        help="after building, warm-start with supervised training on BENCH_DIR/claude_original "
                             "(its references also join the tokenizer corpus)")
    parser.add_argument("--sft_steps", type=int, default=None, help="optimizer steps of the warm start (default 120)")
    parser.add_argument("--sft_pages", default=None, metavar="REGEX",
                        help="warm-start only on pages whose name <pdf>:<page> matches (as the CLI's --pages)")
    parser.add_argument("--sft_image_dim", type=int, default=448,
                        help="rendered page size for the warm start; match the GRPO run's --target_longest_image_dim")
    args = parser.parse_args(argv)

    extra: list[str] = []
    for folder in args.corpus + ([str(Path(args.sft) / "claude_original")] if args.sft else []):
        if not Path(folder).is_dir():
            parser.error(f"--corpus/--sft folder {folder} does not exist")
        extra.extend(read_corpus_dir(folder))
    big = args.shape in ("3b", "7b")
    dtype = args.dtype or ("bfloat16" if big else "float32")
    device = args.device
    if device is None:
        import torch

        device = "cuda" if big and torch.cuda.is_available() else "cpu"
    out = build_tiny_model(args.out_dir, args.seed, shape=args.shape, extra_corpus=extra,
                           vocab_size=args.vocab_size, dtype=dtype, device=device)
    info = json.loads((out / "olmocr_rl_tiny_model.json").read_text())
    print(f"wrote {args.shape} Qwen2.5-VL to {out} ({info['parameters']:,} parameters, vocab {info['vocab_size']})")
    if args.sft:
        from olmocr_rl.model.warm_start import warm_start

        kwargs = {} if args.sft_steps is None else {"steps": args.sft_steps}
        warm_start(out, args.sft, seed=args.seed, image_dim=args.sft_image_dim, pages=args.sft_pages, **kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
