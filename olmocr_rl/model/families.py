"""What the package knows about each model family, in one place.

A family is a ``model_type`` of config.json. Its :class:`Family` entry in :data:`FAMILIES` holds what is fixed
for the family: its transformers classes, the processor classes its released folders name, where its vision
tower keeps its width, whether the tower has attention windows or deepstack layers, whether its text model is
a mixture of experts, and its presets (the released architectures, plus a tiny one for CPU tests). What varies
between checkpoints of one family (patch size, merge size, token ids, which layers are windowed or deepstack,
the number of experts) is read from the checkpoint's config by the functions below, never assumed.

Every other module asks here: ``model.loading`` (classes, processor), ``model.vision_speedups`` (windows,
deepstack), ``model.flops`` and ``model.colocate_memory`` (layers, experts, widths), ``trainer.vllm_generation``
and ``config.grpo`` (the pad tokens vLLM must not sample), ``tiny_model`` and ``gpu_check`` (the presets).
Adding a family is one entry here plus the tests docs/models.md lists. Light: imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

# Placeholder tokens of Qwen-VL-family tokenizers that only the processor may place in a prompt, and those a
# tokenizer knows: declared beside --vllm_block_image_tokens, which keeps vLLM from sampling them.
from olmocr_rl.config.grpo import VISION_PAD_TOKENS, vision_pad_tokens  # noqa: F401  (re-exported)


class UnsupportedModelError(ValueError):
    """A config's ``model_type`` is not a family this package trains; the message names the supported ones."""


@dataclass(frozen=True)
class Family:
    """What is fixed for one model family (see the module docstring)."""

    model_type: str
    label: str  # e.g. "Qwen3-VL", for messages and docs
    model_class: str  # transformers class of the conditional-generation model
    config_class: str
    processor_class: str  # transformers processor class (released processor configs name it)
    released_image_processor: str  # the image processor class released folders name (may need torchvision)
    video_processor_class: str  # what released folders name for video (this package never feeds video)
    vision_width_key: str = "hidden_size"  # vision_config key of the tower's width (Qwen2-VL: embed_dim)
    window_attention: bool = False  # some vision layers attend within windows (fullatt_block_indexes, window_size)
    deepstack: bool = False  # vision features of some tower layers are added to the first LM layers
    experts_class: str | None = None  # transformers class holding the stacked experts of one MoE layer
    interleaved_mrope: bool = False  # M-RoPE sections interleaved over the frequencies (Qwen3-VL)
    image_mean_std: float | None = None  # released processors' mean and std per channel (None: CLIP's)
    separate_processor_files: bool = False  # released folders: preprocessor_config.json + video_preprocessor_config.json
    #: parameter-name suffixes whose released layout (the one vLLM 0.31 reads) is the transpose, over dims 1 and 2,
    #: of transformers 5.17's live layout: Qwen3-VL-MoE's stacked experts, (experts, in, out) on disk. transformers
    #: loads either (it compares shapes) but saves only its own; model.loading writes and trainer.vllm_generation
    #: sends the released one.
    released_transposed: tuple[str, ...] = ()
    #: children of ``model.visual`` that project vision features into the language model: the merger, and
    #: Qwen3-VL's deepstack mergers (what --freeze_vision_merger freezes; applied once per image token)
    merger_modules: tuple[str, ...] = ("merger",)
    #: presets: name -> dict(text=..., vision=..., tie_word_embeddings=..., vocab_size=released vocab,
    #: max_pixels=processor budget for the tiny builder); docs/models.md names the released checkpoints
    shapes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def moe(self) -> bool:
        return self.experts_class is not None


def _qwen25_vision(depth: int = 32, hidden: int = 1280, intermediate: int = 3420, heads: int = 16,
                   fullatt: tuple[int, ...] = (7, 15, 23, 31), out: int = 2048) -> dict:
    return dict(depth=depth, hidden_size=hidden, intermediate_size=intermediate, num_heads=heads,
                fullatt_block_indexes=list(fullatt), window_size=112, patch_size=14, spatial_merge_size=2,
                temporal_patch_size=2, in_channels=3, out_hidden_size=out)


def _qwen3_vision(depth: int, hidden: int, intermediate: int, heads: int, deepstack: tuple[int, ...], out: int,
                  positions: int = 2304) -> dict:
    vision = dict(depth=depth, hidden_size=hidden, intermediate_size=intermediate, num_heads=heads, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3, out_hidden_size=out,
                  num_position_embeddings=positions, hidden_act="gelu_pytorch_tanh")
    if deepstack:  # Qwen3-VL: vision layers whose features go to the first LM layers
        vision["deepstack_visual_indexes"] = list(deepstack)
    return vision


def _text(hidden, intermediate, layers, heads, kv, section, theta, head_dim=None, **extra) -> dict:
    text = dict(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, rope_theta=theta, mrope_section=list(section), **extra)
    if head_dim is not None:
        text["head_dim"] = head_dim
    return text


#: Presets that are not released architectures: ``tiny`` (CPU tests, every family), ``small`` (CPU benchmarks) and
#: ``reader`` (the CPU recipe's reading model, docs/recipe.md).
CPU_SHAPES = ("tiny", "small", "reader")
_TINY_PIXELS_14 = 28 * 28 * 16  # 16 image tokens a page: the CPU demo's budget
_TINY_PIXELS_16 = 32 * 32 * 16
_RELEASED_PIXELS_14 = 28 * 28 * 2560
_RELEASED_PIXELS_16 = 16777216  # Qwen3-VL's preprocessor_config.json: longest_edge

QWEN2_VL = Family(
    model_type="qwen2_vl", label="Qwen2-VL", model_class="Qwen2VLForConditionalGeneration", config_class="Qwen2VLConfig",
    processor_class="Qwen2VLProcessor", released_image_processor="Qwen2VLImageProcessor",
    video_processor_class="Qwen2VLVideoProcessor", vision_width_key="embed_dim",
    shapes={
        "tiny": dict(text=_text(128, 256, 2, 4, 2, (4, 6, 6), 1e6), tie_word_embeddings=False,
                     vision=dict(depth=2, embed_dim=64, hidden_size=128, mlp_ratio=2, num_heads=2, patch_size=14,
                                 spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
                     max_pixels=_TINY_PIXELS_14, vocab_size=None),
        "7b": dict(text=_text(3584, 18944, 28, 28, 4, (16, 24, 24), 1e6), tie_word_embeddings=False,
                   vision=dict(depth=32, embed_dim=1280, hidden_size=3584, mlp_ratio=4, num_heads=16, patch_size=14,
                               spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
                   max_pixels=_RELEASED_PIXELS_14, vocab_size=152064),
    },
)

QWEN2_5_VL = Family(
    model_type="qwen2_5_vl", label="Qwen2.5-VL", model_class="Qwen2_5_VLForConditionalGeneration",
    config_class="Qwen2_5_VLConfig", processor_class="Qwen2_5_VLProcessor",
    released_image_processor="Qwen2VLImageProcessor", video_processor_class="Qwen2VLVideoProcessor",
    window_attention=True,
    shapes={
        "tiny": dict(text=_text(128, 256, 2, 4, 2, (4, 6, 6), 1e6), tie_word_embeddings=False,
                     vision=_qwen25_vision(2, 64, 128, 2, (1,), 128), max_pixels=_TINY_PIXELS_14, vocab_size=None),
        # CPU benchmarks (scripts/bench/): big enough that matrix work, not Python, dominates a step on 2 cores
        "small": dict(text=_text(512, 1536, 4, 8, 2, (8, 12, 12), 1e6), tie_word_embeddings=False,
                      vision=_qwen25_vision(4, 256, 512, 4, (3,), 512), max_pixels=28 * 28 * 1024, vocab_size=None),
        # the CPU recipe's reading model (docs/recipe.md): every vision layer attends to the whole page, and the
        # pixel budget is a 448 px page's 12 x 16 image tokens (olmocr_rl.recipe.grid at its default D)
        "reader": dict(text=_text(128, 384, 3, 4, 4, (4, 6, 6), 1e4), tie_word_embeddings=False,
                       vision=_qwen25_vision(2, 64, 128, 2, (0, 1), 128), max_pixels=28 * 28 * 192, vocab_size=None),
        "3b": dict(text=_text(2048, 11008, 36, 16, 2, (16, 24, 24), 1e6), tie_word_embeddings=True,
                   vision=_qwen25_vision(out=2048), max_pixels=_RELEASED_PIXELS_14, vocab_size=151936),
        "7b": dict(text=_text(3584, 18944, 28, 28, 4, (16, 24, 24), 1e6), tie_word_embeddings=False,
                   vision=_qwen25_vision(out=3584), max_pixels=_RELEASED_PIXELS_14, vocab_size=152064),
    },
)

QWEN3_VL = Family(
    model_type="qwen3_vl", label="Qwen3-VL", model_class="Qwen3VLForConditionalGeneration", config_class="Qwen3VLConfig",
    processor_class="Qwen3VLProcessor", released_image_processor="Qwen2VLImageProcessorFast",
    video_processor_class="Qwen3VLVideoProcessor", deepstack=True, interleaved_mrope=True, image_mean_std=0.5,
    separate_processor_files=True, merger_modules=("merger", "deepstack_merger_list"),
    shapes={
        "tiny": dict(text=_text(128, 256, 2, 4, 2, (6, 5, 5), 5e6, head_dim=32), tie_word_embeddings=False,
                     vision=_qwen3_vision(3, 64, 128, 2, (0, 1), 128, positions=256), max_pixels=_TINY_PIXELS_16,
                     vocab_size=None),
        "2b": dict(text=_text(2048, 6144, 28, 16, 8, (24, 20, 20), 5e6, head_dim=128), tie_word_embeddings=True,
                   vision=_qwen3_vision(24, 1024, 4096, 16, (5, 11, 17), 2048), max_pixels=_RELEASED_PIXELS_16,
                   vocab_size=151936),
        "4b": dict(text=_text(2560, 9728, 36, 32, 8, (24, 20, 20), 5e6, head_dim=128), tie_word_embeddings=True,
                   vision=_qwen3_vision(24, 1024, 4096, 16, (5, 11, 17), 2560), max_pixels=_RELEASED_PIXELS_16,
                   vocab_size=151936),
        "8b": dict(text=_text(4096, 12288, 36, 32, 8, (24, 20, 20), 5e6, head_dim=128), tie_word_embeddings=False,
                   vision=_qwen3_vision(27, 1152, 4304, 16, (8, 16, 24), 4096), max_pixels=_RELEASED_PIXELS_16,
                   vocab_size=151936),
    },
)

# 32: neither expert matrix square (2 x 32 != 128, 32 != 128: transformers tells the released layout apart by
# shape), and a multiple of 32 (vLLM's CPU MoE kernel pads other sizes, which its weight sync cannot follow)
_MOE_TINY = dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                 mlp_only_layers=[], router_aux_loss_coef=0.001)
QWEN3_VL_MOE = Family(
    model_type="qwen3_vl_moe", label="Qwen3-VL-MoE", model_class="Qwen3VLMoeForConditionalGeneration",
    config_class="Qwen3VLMoeConfig", processor_class="Qwen3VLProcessor",
    released_image_processor="Qwen2VLImageProcessorFast", video_processor_class="Qwen3VLVideoProcessor",
    deepstack=True, interleaved_mrope=True, experts_class="Qwen3VLMoeTextExperts", image_mean_std=0.5,
    separate_processor_files=True, released_transposed=("mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
    merger_modules=("merger", "deepstack_merger_list"),
    shapes={
        "tiny": dict(text=_text(128, 256, 2, 4, 2, (6, 5, 5), 5e6, head_dim=32, **_MOE_TINY), tie_word_embeddings=False,
                     vision=_qwen3_vision(3, 64, 128, 2, (0, 1), 128, positions=256), max_pixels=_TINY_PIXELS_16,
                     vocab_size=None),
        "30b-a3b": dict(text=_text(2048, 6144, 48, 32, 4, (24, 20, 20), 5e6, head_dim=128, moe_intermediate_size=768,
                                   num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[],
                                   router_aux_loss_coef=0.001),
                        tie_word_embeddings=False, vision=_qwen3_vision(27, 1152, 4304, 16, (8, 16, 24), 2048),
                        max_pixels=_RELEASED_PIXELS_16, vocab_size=151936),
    },
)

FAMILIES: dict[str, Family] = {f.model_type: f for f in (QWEN2_VL, QWEN2_5_VL, QWEN3_VL, QWEN3_VL_MOE)}

_QWEN3_5_GAP = ("its text model's gated-delta-net (linear attention) layers do not run on vLLM 0.31's CPU engine "
                "(no float32 causal_conv1d kernel; in bfloat16 TRL's weight sync fails on their conv1d weights), so the "
                "vLLM guarantees cannot "
                "be checked, and the FLOP counter and colocate preflight do not model those layers (HF training "
                "alone works: docs/models.md)")
#: Model types that were tried and are refused, with what is missing (one line each).
NOT_SUPPORTED = {"qwen3_5": f"Qwen3.5: {_QWEN3_5_GAP}", "qwen3_5_moe": f"Qwen3.5-MoE: {_QWEN3_5_GAP}"}


def family(config_or_type) -> Family:
    """The family of a config (or a ``model_type`` string). Raises UnsupportedModelError with the supported types."""
    model_type = config_or_type if isinstance(config_or_type, str) else getattr(config_or_type, "model_type", None)
    found = FAMILIES.get(model_type)
    if found is not None:
        return found
    why = NOT_SUPPORTED.get(model_type)
    supported = ", ".join(f"{t} ({f.label})" for t, f in FAMILIES.items())
    raise UnsupportedModelError(f"model_type {model_type!r} is not supported" + (f": {why}" if why else "")
                                + f"; olmocr_rl trains {supported}")


# ---------------------------------------------------------------------------------------------------------------
# Facts read from a checkpoint's config


class VisionTokens(NamedTuple):
    image: int
    video: int
    vision_start: int
    vision_end: int


def vision_tokens(config) -> VisionTokens:
    """The vision token ids of a config (image and video pads, vision start and end)."""
    return VisionTokens(config.image_token_id, config.video_token_id, config.vision_start_token_id,
                        config.vision_end_token_id)


@dataclass(frozen=True)
class VisionLayout:
    """The vision tower of one checkpoint, as the speed-ups, the FLOP counter and the builders need it."""

    patch_size: int  # pixels per patch side
    merge_size: int  # patches merged per image token along each side
    temporal_patch_size: int
    depth: int
    width: int  # hidden size of the tower's blocks
    full_attention_layers: tuple[int, ...]  # layers attending over the whole image
    windowed_layers: tuple[int, ...]  # layers attending within windows (Qwen2.5-VL)
    window_patches: int  # patches in one window of a windowed layer (0: no windows)
    deepstack_layers: tuple[int, ...]  # tower layers whose features are added to the first LM layers

    @property
    def token_block_px(self) -> int:
        """Side, in pixels, of the square one image token covers (patch x merge: 28 for 14 px patches, 32 for 16)."""
        return self.patch_size * self.merge_size


def vision_layout(config) -> VisionLayout:
    fam = family(config)
    vision = config.vision_config
    depth = vision.depth
    if fam.window_attention:
        full = tuple(vision.fullatt_block_indexes)
        window_patches = (vision.window_size // vision.patch_size) ** 2
    else:
        full, window_patches = tuple(range(depth)), 0
    return VisionLayout(
        patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
        temporal_patch_size=vision.temporal_patch_size, depth=depth, width=getattr(vision, fam.vision_width_key),
        full_attention_layers=full, windowed_layers=tuple(i for i in range(depth) if i not in full),
        window_patches=window_patches,
        deepstack_layers=tuple(getattr(vision, "deepstack_visual_indexes", ()) or ()) if fam.deepstack else (),
    )


@dataclass(frozen=True)
class Experts:
    """The mixture-of-experts layout of a text model."""

    num_experts: int
    top_k: int  # experts each token is routed to
    sparse_layers: tuple[int, ...]  # layers whose MLP is the expert block
    router_aux_loss_coef: float  # the config's load-balancing loss weight


def experts(config) -> Experts | None:
    """The experts of a MoE config, None for a dense one."""
    if not family(config).moe:
        return None
    text = config.get_text_config()
    step = getattr(text, "decoder_sparse_step", 1) or 1
    dense = set(getattr(text, "mlp_only_layers", None) or ())
    sparse = tuple(i for i in range(text.num_hidden_layers)
                   if i not in dense and text.num_experts > 0 and (i + 1) % step == 0)
    return Experts(num_experts=text.num_experts, top_k=text.num_experts_per_tok, sparse_layers=sparse,
                   router_aux_loss_coef=float(getattr(text, "router_aux_loss_coef", 0.0) or 0.0))


def vision_merger_modules(config) -> tuple[str, ...]:
    """The names, under ``model.visual``, of the modules that project vision features into the language model."""
    return family(config).merger_modules


def head_dim(text_config) -> int:
    """The attention head size of a text config (explicit, or hidden size / heads)."""
    return getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads


def vision_pad_ids(processor) -> list[int]:
    """The image and video pad ids a processor expands (the tokens only it may place in a prompt)."""
    ids = [processor.image_token_id]
    video = getattr(processor, "video_token_id", None)
    if video is not None:
        ids.append(video)
    return ids


# ---------------------------------------------------------------------------------------------------------------
# Configs of the presets


def preset_config(model_type: str, shape: str, *, vocab_size: int | None = None,
                  token_ids: Mapping[str, int] | None = None):
    """The transformers config of a preset: the released architecture (or the tiny one) of a family.

    ``vocab_size`` defaults to the released vocabulary; ``token_ids`` (special token -> id) to the released ids.
    A preset the family lacks raises ValueError naming the ones it has.
    """
    import transformers

    fam = family(model_type)
    if shape not in fam.shapes:
        raise ValueError(f"{fam.label} has no shape {shape!r}; choose one of {', '.join(fam.shapes)}")
    preset = fam.shapes[shape]
    vocab = vocab_size or preset["vocab_size"]
    if vocab is None:
        raise ValueError(f"{fam.label} shape {shape!r} has no released vocabulary; pass vocab_size")
    ids = dict(token_ids or {"<|endoftext|>": 151643, "<|im_end|>": 151645, "<|vision_start|>": 151652,
                             "<|vision_end|>": 151653, "<|image_pad|>": 151655, "<|video_pad|>": 151656})
    text = dict(preset["text"])
    rope = {"rope_type": "default", "rope_theta": text.pop("rope_theta"), "mrope_section": text.pop("mrope_section")}
    if fam.interleaved_mrope:
        rope["mrope_interleaved"] = True
    text_config = dict(vocab_size=vocab, max_position_embeddings=32768 if shape == "tiny" else 128000,
                       rms_norm_eps=1e-6, rope_parameters=rope, bos_token_id=ids["<|endoftext|>"],
                       eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], **text)
    return getattr(transformers, fam.config_class)(
        text_config=text_config, vision_config=dict(preset["vision"]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=preset["tie_word_embeddings"],
    )
