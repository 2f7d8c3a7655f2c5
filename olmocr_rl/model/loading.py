"""Load a policy model and its processor: HF hub id, local folder or ``s3://bucket/prefix``.

One function, :func:`load_model_and_processor`, serves the training CLI, the evaluator, the soup
tool and the tests, for real checkpoints and for the tiny local model alike::

    model, processor = load_model_and_processor("Qwen/Qwen2.5-VL-7B-Instruct")
    model, processor = load_model_and_processor("models/tiny")            # python -m olmocr_rl.tiny_model models/tiny
    model, processor = load_model_and_processor("s3://bucket/ckpt")        # downloaded once to a local cache

The model class comes from the checkpoint's ``config.json`` (``model_type``, looked up in
:mod:`olmocr_rl.model.families`), not from its name. Weights load in bf16 on a GPU and fp32 on CPU;
flash-attention 2 is used when it is installed and a GPU is present, SDPA otherwise.

Processor: the family's stock processor (``AutoProcessor``: ``Qwen2_5_VLProcessor``, ``Qwen3VLProcessor``, ...)
where torchvision is importable (GPU boxes). On CPU machines torchvision cannot be installed beside the CPU
torch build (docs/design.md), and transformers then cannot build the stock processor (it wants a video
processor and, for Qwen3-VL folders, the torchvision image processor they name), so an image-only subclass
of the family's processor is used: same tokenizer, same chat template, the PIL image processor built from the
same ``preprocessor_config.json``, no video.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
from pathlib import Path
from typing import Any

from olmocr_rl.model.families import UnsupportedModelError, family

logger = logging.getLogger(__name__)



class ModelLoadError(RuntimeError):
    """A model or processor could not be loaded; the message says which path and what to do."""


def meta_model(config):
    """The model of ``config`` built on the meta device: every shape and parameter count, no memory, no weights."""
    import torch
    import transformers

    with torch.device("meta"):
        return getattr(transformers, family(config).model_class)(config)


def torchvision_available() -> bool:
    """True when torchvision can actually be imported (a CUDA-only build fails on CPU machines)."""
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except Exception:  # a broken build raises RuntimeError / OSError, not ImportError
        return False
    return True


#: Fallbacks for tokenizers that do not name their vision tokens (all Qwen-VL families use these).
_VISION_TOKEN_DEFAULTS = {"image": "<|image_pad|>", "video": "<|video_pad|>", "vision_start": "<|vision_start|>",
                          "vision_end": "<|vision_end|>"}


@functools.lru_cache(maxsize=None)
def image_only_processor_class(model_type: str = "qwen2_5_vl"):
    """The family's stock processor without its video processor (no torchvision needed); one class per family.

    ``get_attributes`` derives the sub-processors from ``__init__``'s parameters, so this signature is what
    removes the video part. The class keeps the stock class's ``__name__``, so a processor it saves records the
    stock class (``processor_class``) and loads as the full processor where torchvision exists.
    """
    import transformers
    from transformers.processing_utils import ProcessorMixin

    base = getattr(transformers, family(model_type).processor_class)

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        for kind, default in _VISION_TOKEN_DEFAULTS.items():
            token = getattr(tokenizer, f"{kind}_token", None) or default
            setattr(self, f"{kind}_token", token)
            setattr(self, f"{kind}_token_id", tokenizer.convert_tokens_to_ids(token))
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return type(base.__name__, (base,), {
        "__init__": __init__, "__qualname__": f"ImageOnly{base.__name__}", "__module__": __name__,
        "__doc__": f"``{base.__name__}`` without the video processor (olmocr_rl.model.loading).",
    })


def _chat_template(path: str, tokenizer) -> str | None:
    """The folder's chat template, found where transformers looks: chat_template.json (released Qwen-VL
    folders), chat_template.jinja, else the tokenizer's own."""
    folder = Path(path)
    legacy, raw = folder / "chat_template.json", folder / "chat_template.jinja"
    if legacy.is_file():
        return json.loads(legacy.read_text())["chat_template"]
    if raw.is_file():
        return raw.read_text()
    return getattr(tokenizer, "chat_template", None)


def resolve_model_path(name_or_path: str, cache_dir: str | None = None) -> str:
    """Return a local folder or hub id for ``name_or_path``; ``s3://`` prefixes are downloaded first."""
    if name_or_path.startswith("s3://"):
        from olmocr_rl.storage import StorageError, download_s3_prefix

        try:
            return str(download_s3_prefix(name_or_path, cache_dir=cache_dir))
        except (StorageError, ValueError) as exc:  # unreachable, wrong bucket, no credentials, malformed URI
            raise ModelLoadError(str(exc)) from None
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file() and (path / "adapter_config.json").is_file():
            raise ModelLoadError(
                f"{path} holds a LoRA adapter, not a model; train from a full model folder (a --use_peft run "
                "leaves the adapter merged into its base at the output folder's root), or evaluate the adapter "
                "with `python -m olmocr_rl.evaluate --model DIR`"
            )
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"{path} exists but has no config.json; pass a model folder (e.g. one written by "
                "`python -m olmocr_rl.tiny_model DIR` or a checkpoint-N folder) or a hub id"
            )
        return str(path)
    if name_or_path.startswith((".", "/", "~")):
        raise ModelLoadError(f"model folder {name_or_path} does not exist")
    return name_or_path  # a hub id


def load_processor(path: str, model_type: str = "qwen2_5_vl"):
    """The processor of a model folder/hub id: the stock one where torchvision works, else the family's image-only one.

    Released Qwen-VL folders name torchvision's image processor (``Qwen2VLImageProcessor``, or
    ``Qwen2VLImageProcessorFast`` for Qwen3-VL); without torchvision the PIL one is built from the same
    ``preprocessor_config.json`` (patch and merge size, mean and std, pixel budget: every setting is read).
    """
    from transformers import AutoProcessor, AutoTokenizer

    if torchvision_available():
        try:
            processor = AutoProcessor.from_pretrained(path)
        except (OSError, ValueError, TypeError) as exc:  # e.g. a folder without a video processor config
            logger.warning("AutoProcessor failed for %s (%s); using the image-only processor", path, exc)
        else:
            if hasattr(processor, "image_processor"):
                return processor
            logger.warning("AutoProcessor returned %s for %s; using the image-only processor",
                           type(processor).__name__, path)
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(path)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(path)
    return image_only_processor_class(model_type)(image_processor, tokenizer, chat_template=_chat_template(path, tokenizer))


def expose_router_logits(model) -> bool:
    """Let TRL see a MoE model as one: True when the text config had no ``output_router_logits`` and now has it.

    TRL 1.16 adds the load-balancing loss (``router_aux_loss_coef``) only to models whose text config has an
    ``output_router_logits`` attribute; transformers 5.17 leaves it out of Qwen3-VL-MoE's text config although
    the model returns router logits and the loss when asked. The attribute is set to False (router logits
    only when the trainer asks for them), as other MoE configs default to.
    """
    if not family(model.config).moe:
        return False
    text = model.config.get_text_config()
    if hasattr(text, "output_router_logits"):
        return False
    text.output_router_logits = False
    return True


def save_in_released_layout(model) -> bool:
    """Make ``model.save_pretrained`` write the family's released tensor layout; True when installed.

    transformers 5.17 keeps Qwen3-VL-MoE's stacked experts as (experts, out, in) and reads a released checkpoint's
    (experts, in, out) by comparing shapes, but writes its own layout back, which vLLM 0.31 cannot read
    (``The size of tensor a ... must match the size of tensor b``): a trained checkpoint could not be served, nor a
    warm-started model start a colocated run. Saves of this model write the released layout instead (the tensors
    are transposed views, made contiguous one shard at a time), with transformers' own key conversion switched
    off, which for these families holds only those transposes. A layer whose matrices are square is ambiguous
    to transformers' shape test; such a model keeps transformers' layout (logged).
    """
    import types

    suffixes = family(model.config).released_transposed
    if not suffixes:
        return False
    named = [(name, p) for name, p in model.named_parameters() if name.endswith(suffixes)]
    if any(p.dim() != 3 or p.shape[1] == p.shape[2] for _, p in named):
        logger.warning("%s: square expert matrices; saved in transformers' layout, which vLLM 0.31 cannot load",
                       type(model).__name__)
        return False

    def save_pretrained(self, save_directory, *args, state_dict=None, **kwargs):
        state = self.state_dict() if state_dict is None else state_dict
        state = {k: v.transpose(1, 2) if k.endswith(suffixes) else v for k, v in state.items()}
        kwargs["save_original_format"] = False  # the transposes above are the whole conversion (families)
        return type(self).save_pretrained(self, save_directory, *args, state_dict=state, **kwargs)

    model.save_pretrained = types.MethodType(save_pretrained, model)
    return True


def default_dtype(device: str | None = None):
    import torch

    on_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    return torch.bfloat16 if on_gpu else torch.float32


def load_config(name_or_path: str, cache_dir: str | None = None):
    """The config of a model (hub id, folder or ``s3://``, resolved as :func:`load_model_and_processor` does),
    without its weights. Raises ModelLoadError."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path, cache_dir=cache_dir)
    try:
        return AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:  # ValueError: a model_type this transformers does not know
        raise ModelLoadError(f"cannot load a model config from {name_or_path!r}: {exc}") from exc


def unsupported_model_problem(name_or_path: str, cache_dir: str | None = None) -> str | None:
    """One line when the model's config names a family olmocr_rl does not train (before anything reads its
    architecture); None when it is supported or its config cannot be read (the model load reports that)."""
    try:
        family(load_config(name_or_path, cache_dir))
    except ModelLoadError:
        return None
    except UnsupportedModelError as exc:
        return f"--model_name {name_or_path}: {exc}"
    return None


def router_aux_loss_problem(name_or_path: str, coef: float | None, cache_dir: str | None = None) -> str | None:
    """``--router_aux_loss_coef`` set (non-zero) for a dense model: the one line saying so; None when fine or unknown."""
    if not coef:
        return None
    try:
        config = load_config(name_or_path, cache_dir)
        found = family(config)
    except (ModelLoadError, UnsupportedModelError):
        return None  # the model load right after reports it
    if found.moe:
        return None
    return (f"--router_aux_loss_coef {coef:g}: {name_or_path} is a dense {found.label} model (model_type "
            f"{config.model_type!r}), not a mixture of experts, so it has no router loss; drop the flag")


def load_model_and_processor(
    name_or_path: str,
    *,
    dtype: Any = None,
    attn_implementation: str | None = None,
    cache_dir: str | None = None,
    load_model: bool = True,
):
    """Load ``(model, processor)``.

    Args:
        name_or_path: hub id, local folder, or ``s3://bucket/prefix`` (downloaded to ``cache_dir``).
        dtype: torch dtype; default bf16 when CUDA is available, fp32 otherwise.
        attn_implementation: default ``flash_attention_2`` when flash-attn is installed and CUDA is
            available, else ``sdpa``.
        load_model: False returns ``(None, processor)`` (used by tools that only need the processor).
    """
    import torch
    import transformers

    path = resolve_model_path(name_or_path, cache_dir=cache_dir)
    config = load_config(path)
    try:
        class_name = family(config).model_class
    except UnsupportedModelError as exc:
        raise ModelLoadError(f"{name_or_path}: {exc}") from None
    processor = load_processor(path, config.model_type)
    if not load_model:
        return None, processor

    if dtype is None:
        dtype = default_dtype()
    if attn_implementation is None:
        flash = importlib.util.find_spec("flash_attn") is not None and torch.cuda.is_available()
        attn_implementation = "flash_attention_2" if flash else "sdpa"
    model_cls = getattr(transformers, class_name)
    model = model_cls.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)
    expose_router_logits(model)
    save_in_released_layout(model)
    logger.info(
        "loaded %s from %s (%s, %s, %.1fM parameters)",
        class_name, name_or_path, dtype, attn_implementation, sum(p.numel() for p in model.parameters()) / 1e6,
    )
    return model, processor
