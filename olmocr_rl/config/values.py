"""The value forms flags take, and the constants their declarations use (light: stdlib only).

The parsers here (``parse_bool``, ``json_object``, ...) are argparse ``type`` functions and also convert
``--config`` YAML values; the two actions spell booleans (``--X``, ``--X false``, ``--no-X``). The constants are
defaults and choices that other packages read from here (the page size of ``data``, the LoRA layers of ``model``),
so ``config`` imports nothing above itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from types import MappingProxyType
from typing import Any, Mapping

# TRL 1.16's loss formulations (GRPOConfig.loss_type).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
VLLM_MODES = ("auto", "colocate", "server", "none")
VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
VLLM_MODEL_IMPLS = ("vllm", "transformers")
#: Upper bound on a page prompt's text tokens (instructions, chat markup, vision start/end).
PROMPT_TEXT_TOKENS = 512
#: The rendered page's longest side in pixels (--target_longest_image_dim; the renderer's default too).
DEFAULT_TARGET_LONGEST_IMAGE_DIM = 1288
#: The language model's linear layers that get LoRA adapters (--lora_target_modules; model.adapters' default too).
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """A flag or flag combination the user must change; the message (one line) says how."""


def parse_bool(value: Any) -> bool:
    """``true``/``false`` and their usual spellings (1/0, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "y", "on"):
        return True
    if text in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def json_object(text: str) -> dict:
    """``--generation_kwargs``: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}); e.g. '{{\"min_new_tokens\": 256}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, e.g. '{{\"min_new_tokens\": 256}}', got {text!r}")
    return value


def optional_float(value: Any) -> float | None:
    """A number, or ``none`` / ``null`` for no value (TRL's ``None``)."""
    if value is None or str(value).strip().lower() in ("none", "null"):
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or none, got {value!r}") from None


def parse_checkpointing(value: Any) -> str:
    """``--gradient_checkpointing``: ``auto`` or ``vision``, or a boolean spelling (as ``true`` / ``false``)."""
    text = str(value).strip().lower() if not isinstance(value, bool) else ("true" if value else "false")
    if text in ("auto", "vision"):
        return text
    try:
        return "true" if parse_bool(text) else "false"
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto, true, false or vision, got {value!r}") from None


class BoolFlag(argparse.Action):
    """``--flag`` (true), ``--flag false`` / ``--flag true``, and ``--no-flag`` (false)."""

    def __init__(self, option_strings, dest, default=None, help=None, **kwargs):
        names = list(option_strings)
        for opt in option_strings:
            if opt.startswith("--"):
                names.append("--no-" + opt[2:])
        super().__init__(names, dest, nargs="?", const=True, default=default, type=parse_bool, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string.startswith("--no-"):
            values = False
        setattr(namespace, self.dest, True if values is None else values)


class CheckpointingFlag(BoolFlag):
    """``--gradient_checkpointing`` (true), ``--no-gradient_checkpointing`` (false), or ``--gradient_checkpointing
    auto|vision|true|false``."""

    def __init__(self, option_strings, dest, default=None, help=None, **kwargs):
        super().__init__(option_strings, dest, default=default, help=help)
        self.type, self.const = parse_checkpointing, "true"

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, "false" if option_string.startswith("--no-") else (values or "true"))


def plain(value: Any) -> Any:
    """A read-only value as plain, JSON-ready data: tuples as lists, mappings as dicts, all the way down."""
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    return value


def frozen(value: Any) -> Any:
    """A read-only copy of a flag value: lists as tuples, dicts as read-only mappings."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    return value
