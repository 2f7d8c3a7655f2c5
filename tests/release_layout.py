"""Random-weight Qwen3-VL / Qwen3-VL-MoE folders laid out as the released checkpoints are, built WITHOUT the
project's own builder (``olmocr_rl.tiny_model``), so that tests see what a user's downloaded folder holds.

What a released ``Qwen/Qwen3-VL-*-Instruct`` folder has, and what this writes (same file names, same keys):

- ``config.json``: ``model_type`` ``qwen3_vl`` / ``qwen3_vl_moe``, the text config with the pre-5.x rope keys
  (``rope_theta`` and ``rope_scaling`` with ``mrope_interleaved`` / ``mrope_section``), the vision config with
  its old ``model_type`` (``qwen3_vl``), ``deepstack_visual_indexes``, 16 px patches, merge 2;
- ``preprocessor_config.json``: ``image_processor_type`` ``Qwen2VLImageProcessorFast`` (needs torchvision),
  ``processor_class`` ``Qwen3VLProcessor``, ``size`` as shortest/longest edge in pixels, mean and std 0.5;
- ``video_preprocessor_config.json``: ``Qwen3VLVideoProcessor``;
- ``model.safetensors`` with the released tensor layout (MoE experts stacked as (experts, in, out));
- ``chat_template.json`` (the template as a JSON string), ``tokenizer.json`` + ``tokenizer_config.json``
  (``Qwen2Tokenizer``, special tokens after the ordinary vocabulary, as Qwen's ids are), ``generation_config.json``.

Only the sizes are small (hidden 128, 2 layers; vision depth 3, hidden 64) and the tokenizer is trained here on
the sample bench's references, so nothing is downloaded. The chat template is written for these tests.
"""

from __future__ import annotations

import json
from pathlib import Path

BENCH_DATA_SAMPLE = Path(__file__).resolve().parents[1] / "bench_data_sample"

#: Qwen's special tokens, appended after the ordinary vocabulary (Qwen3: ids 151643...).
QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
]

# Written for these tests: no default system turn (as Qwen3-VL's), images and text in the order given.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' or 'image' in item or 'image_url' in item -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'video' or 'video' in item -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _train_tokenizer(out: Path, vocab: int = 1024) -> dict[str, int]:
    """Byte-level BPE on the sample's references, Qwen's special tokens after it; returns their ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = [p.read_text() for p in sorted((BENCH_DATA_SAMPLE / "claude_original").rglob("*.md"))]
    corpus.append("Below is the image of one page of a document. Return the plain text representation of this "
                  "document as if you were reading it naturally.\n---\nprimary_language: en\nis_table: false\n---")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer.add_special_tokens(QWEN_SPECIAL_TOKENS)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in QWEN_SPECIAL_TOKENS}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "processor_class": "Qwen3VLProcessor",
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "errors": "replace", "model_max_length": 262144, "split_special_tokens": False,
        "clean_up_tokenization_spaces": False, "add_prefix_space": False,
        "added_tokens_decoder": {str(i): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                          "normalized": False, "single_word": False} for t, i in ids.items()},
    }, indent=2))
    return ids


def _config(ids: dict[str, int], vocab_size: int, moe: bool) -> dict:
    text = {
        "model_type": "qwen3_vl_moe_text" if moe else "qwen3_vl_text", "vocab_size": vocab_size,
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu", "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6, "attention_bias": False, "attention_dropout": 0.0, "use_cache": True,
        "initializer_range": 0.02, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "rope_theta": 5000000, "dtype": "bfloat16",
        "rope_scaling": {"rope_type": "default", "mrope_interleaved": True, "mrope_section": [6, 5, 5]},
    }
    if moe:  # the 30B-A3B layout, small: every layer sparse, top-k of the experts per token
        text.update({"moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
                     "mlp_only_layers": [], "norm_topk_prob": True, "router_aux_loss_coef": 0.001})
    vision = {
        "model_type": "qwen3_vl_moe" if moe else "qwen3_vl", "depth": 3, "hidden_size": 64, "intermediate_size": 128,
        "num_heads": 2, "in_channels": 3, "hidden_act": "gelu_pytorch_tanh", "patch_size": 16,
        "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 128, "num_position_embeddings": 256,
        "deepstack_visual_indexes": [0, 1], "initializer_range": 0.02,
    }
    return {
        "architectures": ["Qwen3VLMoeForConditionalGeneration" if moe else "Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl_moe" if moe else "qwen3_vl", "text_config": text, "vision_config": vision,
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
        "tie_word_embeddings": False, "transformers_version": "4.57.0.dev0",
    }


def _processor_files(out: Path, longest_edge: int) -> None:
    common = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
              "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}
    (out / "preprocessor_config.json").write_text(json.dumps(
        {**common, "size": {"longest_edge": longest_edge, "shortest_edge": 65536},
         "image_processor_type": "Qwen2VLImageProcessorFast"}, indent=2))
    (out / "video_preprocessor_config.json").write_text(json.dumps(
        {**common, "size": {"longest_edge": 25165824, "shortest_edge": 4096},
         "video_processor_type": "Qwen3VLVideoProcessor"}, indent=2))
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2))


def write_release_folder(out: str | Path, *, moe: bool = False, seed: int = 0,
                         longest_edge: int = 16777216) -> Path:
    """A random-weight Qwen3-VL (``moe=False``) or Qwen3-VL-MoE folder in the released layout; returns its path.

    ``longest_edge`` is the processor's pixel budget (the releases': 16,777,216, i.e. 4096 x 4096).
    """
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoConfig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = _train_tokenizer(out)
    vocab_size = -(-(max(ids.values()) + 1) // 64) * 64 + 64  # padded above the tokenizer, as released
    (out / "config.json").write_text(json.dumps(_config(ids, vocab_size, moe), indent=2))
    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(seed)
    model_class = "Qwen3VLMoeForConditionalGeneration" if moe else "Qwen3VLForConditionalGeneration"
    model = getattr(transformers, model_class)(config)
    # The released MoE checkpoints store each layer's stacked experts as (experts, in, out): the transpose of
    # transformers 5.x's live (experts, out, in), which it undoes on load by comparing shapes.
    released = {k: (v.transpose(1, 2) if moe and k.endswith(("experts.gate_up_proj", "experts.down_proj")) else v)
                for k, v in model.state_dict().items()}
    save_file({k: v.contiguous() for k, v in released.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    _processor_files(out, longest_edge)
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"], "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
    }, indent=2))
    return out
