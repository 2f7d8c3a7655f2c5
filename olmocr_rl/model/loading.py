"""Load a policy model and its processor: HF hub id, local folder or ``s3://bucket/prefix``.

One function, :func:`load_model_and_processor`, serves the training CLI, the evaluator, the soup
tool and the tests, for real checkpoints and for the tiny local model alike::

    model, processor = load_model_and_processor("Qwen/Qwen2.5-VL-7B-Instruct")
    model, processor = load_model_and_processor("models/tiny")            # python -m olmocr_rl.tiny_model models/tiny
    model, processor = load_model_and_processor("s3://bucket/ckpt")        # downloaded once to a local cache

The model class comes from the checkpoint's ``config.json`` (``model_type``), not from its name.
Weights load in bf16 on a GPU and fp32 on CPU; flash-attention 2 is used when it is installed and a
GPU is present, SDPA otherwise.

Processor: the stock ``Qwen2_5_VLProcessor`` (``AutoProcessor``) where torchvision is importable (GPU
boxes). On CPU machines torchvision cannot be installed beside the CPU torch build (docs/design.md), and
transformers then cannot build the stock processor (it wants a video processor), so an image-only
subclass is used: same tokenizer, same PIL image processor, no video.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from olmocr_rl.model.families import MODEL_CLASSES

logger = logging.getLogger(__name__)



class ModelLoadError(RuntimeError):
    """A model or processor could not be loaded; the message says which path and what to do."""


def meta_model(config):
    """The model of ``config`` built on the meta device: every shape and parameter count, no memory, no weights."""
    import torch
    import transformers

    with torch.device("meta"):
        return getattr(transformers, MODEL_CLASSES[config.model_type])(config)


def head_dim(text_config) -> int:
    """The attention head size of a text config (explicit, or hidden size / heads)."""
    return getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads


def torchvision_available() -> bool:
    """True when torchvision can actually be imported (a CUDA-only build fails on CPU machines)."""
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except Exception:  # a broken build raises RuntimeError / OSError, not ImportError
        return False
    return True


def _image_only_processor_class():
    """Build (lazily, transformers is slow to import) the image-only Qwen2.5-VL processor class."""
    from transformers.processing_utils import ProcessorMixin
    from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor

    class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
        """``Qwen2_5_VLProcessor`` without the video processor (no torchvision needed).

        ``get_attributes`` derives the sub-processors from ``__init__``'s parameters, so this
        signature is what removes the video part.
        """

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImageOnlyQwen2_5_VLProcessor


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


def load_processor(path: str):
    """Load the processor for a model folder/hub id (stock where torchvision works, else image-only)."""
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
    chat_template = getattr(tokenizer, "chat_template", None)
    template_file = Path(path) / "chat_template.jinja"
    if template_file.is_file():
        chat_template = template_file.read_text()
    return _image_only_processor_class()(image_processor, tokenizer, chat_template=chat_template)


def default_dtype(device: str | None = None):
    import torch

    on_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    return torch.bfloat16 if on_gpu else torch.float32


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
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path, cache_dir=cache_dir)
    try:
        config = AutoConfig.from_pretrained(path)
    except OSError as exc:
        raise ModelLoadError(f"cannot load a model config from {name_or_path!r}: {exc}") from exc
    class_name = MODEL_CLASSES.get(config.model_type)
    if class_name is None:
        raise ModelLoadError(
            f"{name_or_path}: model_type {config.model_type!r} is not supported; olmocr_rl trains "
            f"vision-language OCR models of types {sorted(MODEL_CLASSES)}"
        )
    processor = load_processor(path)
    if not load_model:
        return None, processor

    if dtype is None:
        dtype = default_dtype()
    if attn_implementation is None:
        flash = importlib.util.find_spec("flash_attn") is not None and torch.cuda.is_available()
        attn_implementation = "flash_attention_2" if flash else "sdpa"
    model_cls = getattr(transformers, class_name)
    model = model_cls.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)
    logger.info(
        "loaded %s from %s (%s, %s, %.1fM parameters)",
        class_name, name_or_path, dtype, attn_implementation, sum(p.numel() for p in model.parameters()) / 1e6,
    )
    return model, processor
