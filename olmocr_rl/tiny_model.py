"""Build a small random-weight vision-language model folder locally, with nothing downloaded.

    python -m olmocr_rl.tiny_model models/tiny                           # Qwen2.5-VL, ~1M parameters, CPU-friendly
    python -m olmocr_rl.tiny_model models/tiny --seed 3
    python -m olmocr_rl.tiny_model models/qwen3b --shape 3b              # real Qwen2.5-VL-3B architecture, random weights
    python -m olmocr_rl.tiny_model models/tiny3 --family qwen3_vl        # Qwen3-VL (deepstack, 16 px patches)
    python -m olmocr_rl.tiny_model models/moe --family qwen3_vl_moe      # Qwen3-VL-MoE (4 experts, top 2)
    python -m olmocr_rl.tiny_model models/q8b --family qwen3_vl --shape 8b   # real Qwen3-VL-8B architecture

``--family`` is a ``model_type`` of :mod:`olmocr_rl.model.families` (default ``qwen2_5_vl``) and ``--shape``
one of its presets (``tiny``, or a released architecture: ``python -m olmocr_rl.tiny_model --help`` lists
them). The folder is complete: ``config.json`` + safetensors weights, a byte-level BPE tokenizer trained
here with ``tokenizers`` on a built-in corpus (plus any ``--corpus`` markdown), Qwen's special tokens,
a Qwen-style chat template that places image parts, ``generation_config.json`` and the processor files in
the layout the family's releases use (Qwen3-VL: ``preprocessor_config.json`` naming
``Qwen2VLImageProcessorFast`` and ``Qwen3VLProcessor``, mean/std 0.5, and ``video_preprocessor_config.json``).
It loads with :func:`olmocr_rl.model.loading.load_model_and_processor`, the same loader the training CLI
uses for real checkpoints. The same seed and corpus give byte-identical weights.

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

def base_corpus() -> str:
    """The built-in corpus: the v4 prompt, a front matter block, then markdown/HTML/LaTeX and prose."""
    from olmocr_rl.data.front_matter import PageResponse, format_front_matter
    from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt

    front_matter = format_front_matter(PageResponse(
        primary_language="en", is_rotation_valid=True, rotation_correction=0, is_table=False, is_diagram=False,
        natural_text=None))
    return build_no_anchoring_v4_yaml_prompt() + "\n" + front_matter + "\n" + _BASE_CORPUS_TEXT


def whole_pieces() -> list[str]:
    """The strings the ``chars`` tokenizer keeps whole: the prompt's lines, the default system turn, every front
    matter line, and the table, footnote and math markup of the transcriptions.

    Everything else (the page's words and numbers) is spelled one byte a token, so a word the model never saw is
    written with the same tokens as any other: reading it is reading its letters.
    """
    from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt

    front_matter = ["---", "primary_language: en", "primary_language: null"]
    front_matter += [f"is_rotation_valid: {v}" for v in ("True", "False")]
    front_matter += [f"rotation_correction: {r}" for r in (0, 90, 180, 270)]
    front_matter += [f"{key}: {v}" for key in ("is_table", "is_diagram") for v in ("True", "False")]
    tags = [f"<{close}{tag}>" for tag in ("table", "tr", "td", "th", "sup") for close in ("", "/")] + ["<td", "<th"]
    spans = [f' {kind}="{n}"' for kind in ("rowspan", "colspan") for n in range(2, 6)]
    math = ["\\(", "\\)", "\\[", "\\]"]
    return build_no_anchoring_v4_yaml_prompt().split("\n") + ["You are a helpful assistant."] + front_matter + tags \
        + spans + math


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


def char_tokenizer():
    """A byte-level tokenizer with no merges (one token a byte) plus :func:`whole_pieces` as single tokens."""
    from tokenizers import AddedToken

    raw = train_tokenizer([], vocab_size=256 + len(SPECIAL_TOKENS))
    raw.add_tokens([AddedToken(piece, normalized=False, single_word=False) for piece in whole_pieces()])
    return raw


TOKENIZERS = ("bpe", "chars")


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
    family: str = "qwen2_5_vl",
    shape: str = "tiny",
    extra_corpus: Iterable[str] = (),
    vocab_size: int = 2048,
    tokenizer: str = "bpe",
    dtype: str = "float32",
    device: str = "cpu",
) -> Path:
    """Write a complete random-weight model folder of ``family`` (a model_type) and ``shape`` to ``out_dir``."""
    import torch
    import transformers
    from transformers import GenerationConfig

    from olmocr_rl.model.families import family as family_of
    from olmocr_rl.model.families import preset_config

    fam = family_of(family)
    if shape not in fam.shapes:
        raise ValueError(f"unknown shape {shape!r} for {fam.label}; choose one of {', '.join(fam.shapes)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer_kind = tokenizer
    if tokenizer == "chars":
        tokenizer = _wrap_tokenizer(char_tokenizer())
    elif tokenizer == "bpe":
        tokenizer = _wrap_tokenizer(train_tokenizer([base_corpus()] + list(extra_corpus), vocab_size=vocab_size))
    else:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose one of {', '.join(TOKENIZERS)}")
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    config = preset_config(family, shape, vocab_size=len(tokenizer), token_ids=ids)
    config.text_config.max_position_embeddings = 32768
    torch.manual_seed(seed)
    with torch.device(device):  # a real-size shape initialises in seconds on a GPU
        model = getattr(transformers, fam.model_class)(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=True,
        temperature=0.8,
    )
    from olmocr_rl.model.loading import save_in_released_layout

    save_in_released_layout(model)  # Qwen3-VL-MoE: the experts as released (and as vLLM reads them)
    model.save_pretrained(out)

    _save_processor(out, tokenizer, fam, config, fam.shapes[shape]["max_pixels"])
    (out / "olmocr_rl_tiny_model.json").write_text(
        json.dumps({"seed": seed, "family": family, "shape": shape, "tokenizer": tokenizer_kind,
                    "vocab_size": len(tokenizer), "parameters": sum(p.numel() for p in model.parameters())}, indent=2) + "\n"
    )
    return out


def _save_processor(out: Path, tokenizer, fam, config, max_pixels: int) -> None:
    """The tokenizer, chat template and image processor beside the weights, in the family's release layout.

    The processor is saved as the image-only one this package loads without torchvision, then its files name
    what the releases name: the stock processor class, the family's released image processor class and a video
    processor (stock loaders, transformers' ``AutoProcessor`` where torchvision exists and vLLM's processor,
    refuse a folder without one; it mirrors the image sizes, the tiny model never sees video).
    """
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from olmocr_rl.model.families import vision_layout
    from olmocr_rl.model.loading import image_only_processor_class

    layout = vision_layout(config)
    settings = dict(size={"shortest_edge": (2 * layout.token_block_px) ** 2, "longest_edge": max_pixels},
                    patch_size=layout.patch_size, temporal_patch_size=layout.temporal_patch_size,
                    merge_size=layout.merge_size)
    if fam.image_mean_std is not None:
        settings.update(image_mean=[fam.image_mean_std] * 3, image_std=[fam.image_mean_std] * 3)
    image_processor = Qwen2VLImageProcessorPil(**settings)
    processor = image_only_processor_class(fam.model_type)(image_processor, tokenizer, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    processor_config = out / "processor_config.json"
    nested = json.loads(processor_config.read_text())
    image = {**nested["image_processor"], "image_processor_type": fam.released_image_processor}
    video = {k: v for k, v in image.items() if k != "image_processor_type"}
    video["video_processor_type"] = fam.video_processor_class
    if fam.separate_processor_files:  # Qwen3-VL's releases: one file per sub-processor, the processor named in each
        for name, part in (("preprocessor_config.json", image), ("video_preprocessor_config.json", video)):
            (out / name).write_text(json.dumps({**part, "processor_class": fam.processor_class}, indent=2,
                                               sort_keys=True) + "\n")
        processor_config.unlink()
    else:
        nested.update(image_processor=image, video_processor=video, processor_class=fam.processor_class)
        processor_config.write_text(json.dumps(nested, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    from olmocr_rl.model.families import FAMILIES

    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.tiny_model",
        description="Write a random-weight vision-language model folder (tokenizer trained locally, nothing downloaded).",
    )
    parser.add_argument("out_dir", help="folder to write the model into (created if missing)")
    parser.add_argument("--seed", type=int, default=0, help="weight-initialisation seed (default 0)")
    parser.add_argument("--family", choices=list(FAMILIES), default="qwen2_5_vl",
                        help="model family (config.json model_type; default qwen2_5_vl)")
    presets = "; ".join(f"{t}: {', '.join(f.shapes)}" for t, f in FAMILIES.items())
    parser.add_argument("--shape", default="tiny",
                        help=f"architecture: tiny (~1M params, CPU tests), small (Qwen2.5-VL, ~25M, CPU benchmarks) or a "
                             f"released one of the family ({presets}); default tiny")
    parser.add_argument("--tokenizer", choices=TOKENIZERS, default="bpe",
                        help="bpe (default): byte-level BPE trained on the corpus; chars: one token a byte, plus the "
                             "prompt, front matter and markup pieces as whole tokens (the recipe's reading model: an "
                             "unseen word is spelled with the same tokens as a seen one)")
    parser.add_argument("--vocab_size", type=int, default=2048, help="BPE vocabulary size (default 2048; bpe only)")
    parser.add_argument("--corpus", action="append", default=[], metavar="DIR",
                        help="extra folder of *.md files for the tokenizer corpus (repeatable)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help="stored weight dtype (default float32 for tiny, bfloat16 for released shapes)")
    parser.add_argument("--device", default=None,
                        help="where to initialise the weights (default cuda for released shapes when available)")
    parser.add_argument("--sft", metavar="BENCH_DIR", default=None,
                        help="after building, warm-start with supervised training on BENCH_DIR/claude_original "
                             "(its references also join the tokenizer corpus)")
    parser.add_argument("--sft_steps", type=int, default=None, help="optimizer steps of the warm start (default 120)")
    parser.add_argument("--sft_pages", default=None, metavar="REGEX",
                        help="warm-start only on pages whose name <pdf>:<page> matches (as the CLI's --pages)")
    parser.add_argument("--sft_image_dim", type=int, default=448,
                        help="rendered page size for the warm start; match the GRPO run's --target_longest_image_dim")
    args = parser.parse_args(argv)
    family = FAMILIES[args.family]
    if args.shape not in family.shapes:
        parser.error(f"--shape {args.shape}: {family.label} has {', '.join(family.shapes)}")

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
    out = build_tiny_model(args.out_dir, args.seed, family=args.family, shape=args.shape, extra_corpus=extra,
                           vocab_size=args.vocab_size, tokenizer=args.tokenizer, dtype=dtype, device=device)
    info = json.loads((out / "olmocr_rl_tiny_model.json").read_text())
    print(f"wrote {args.shape} {family.label} to {out} ({info['parameters']:,} parameters, vocab {info['vocab_size']})")
    if args.sft:
        from olmocr_rl.model.warm_start import warm_start

        kwargs = {} if args.sft_steps is None else {"steps": args.sft_steps}
        warm_start(out, args.sft, seed=args.seed, image_dim=args.sft_image_dim, pages=args.sft_pages, **kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
