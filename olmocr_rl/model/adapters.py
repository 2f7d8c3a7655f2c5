"""LoRA adapters on the language model (``--use_peft``), and LoRA adapter folders taken as models.

Training: :func:`adapter_plan` turns the ``--lora_*`` flags into a ``peft.LoraConfig`` for a model's config,
checked on the model built on the meta device (no weights, seconds) before the weights load. The adapters
go on the language model's linear layers named by ``--lora_target_modules`` and nowhere else: the names
(``q_proj``, ``gate_proj``, ...) also occur in the vision tower, whose LoRA layers vLLM cannot serve, so the
config holds one regular expression anchored at the language model (PEFT matches a string target against
each full module name). TRL's ``GRPOTrainer`` wraps the model with it (its ``peft_config`` argument).

Weight sync: TRL merges the adapters into the base weights in place and unmerges them after the copy, which
moves the frozen base by rounding at every sync (docs/lora.md, "The weight sync to vLLM").
:func:`merged_named_parameters` yields the same merged tensors under the same names, computed out of place, so
the base model never changes.

Adapter folders (``adapter_config.json`` + ``adapter_model.safetensors``, as a ``--use_peft`` checkpoint or
``OUTPUT_DIR/adapter/`` holds them): :func:`load_policy` loads one merged onto its base model, so
``evaluate`` and ``soup`` take it as they take a full model; :func:`write_merged` saves it as a full model
folder (a ``--use_peft`` run's final output, ``--save_merged``).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

# --lora_target_modules' default, the language model's attention and MLP projections: declared with the flag.
from olmocr_rl.config.values import LORA_TARGET_MODULES

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
#: Where a --use_peft run's final adapter goes, beside the merged model at the output folder's root.
ADAPTER_DIR = "adapter"
#: The submodule holding the language model in every supported family (``model.language_model``).
LANGUAGE_MODEL = "language_model"
#: --lora_target_modules value for every linear layer of the language model.
ALL_LINEAR = "all-linear"


class AdapterError(ValueError):
    """A LoRA setting or adapter folder the user must change; the message (one line) says how."""


def unwrap(model):
    """The transformers model inside a PEFT wrapper (``PeftModel.get_base_model``), or ``model`` itself."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def is_peft_model(model) -> bool:
    return hasattr(model, "peft_config") and callable(getattr(model, "get_base_model", None))


def _language_model_name(model) -> str:
    for name, _ in model.named_modules():
        if name == LANGUAGE_MODEL or name.endswith("." + LANGUAGE_MODEL):
            return name
    raise AdapterError(f"{type(model).__name__} has no {LANGUAGE_MODEL} module; --use_peft supports the "
                       "Qwen2-VL family (model.language_model)")


def _language_model_linears(model) -> tuple[str, dict[str, list[str]]]:
    """``(the language model's module name, {leaf name: [full module names of its linear layers]})``."""
    import torch

    prefix = _language_model_name(model)
    found: dict[str, list[str]] = {}
    for name, module in model.named_modules():
        if name.startswith(prefix + ".") and isinstance(module, torch.nn.Linear):
            found.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    return prefix, found


def lora_target_pattern(model, names: Sequence[str]) -> str:
    """The regular expression (PEFT full-matches it on module names) for the language model's linear layers
    named ``names`` (``all-linear``: every one). AdapterError for a name the language model lacks."""
    prefix, linears = _language_model_linears(model)
    chosen = sorted(linears) if ALL_LINEAR in names else list(dict.fromkeys(names))
    missing = [name for name in chosen if name not in linears]
    if missing:
        raise AdapterError(f"--lora_target_modules {missing[0]}: the language model has no linear layer of that name; "
                           f"its linear layers are {', '.join(sorted(linears))} (or all-linear)")
    leaves = "|".join(re.escape(name) for name in sorted(chosen))
    return rf"{re.escape(prefix)}\.(?:.*\.)?(?:{leaves})"


def _modules_to_save(model, names: Sequence[str] | None) -> list[str] | None:
    """``--lora_modules_to_save`` checked against the model (PEFT matches a name on the end of module names)."""
    if not names:
        return None
    module_names = [name for name, _ in model.named_modules()]
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    if tied and "embed_tokens" in names:
        raise AdapterError("--lora_modules_to_save embed_tokens: this model ties its input embedding to lm_head, whose "
                           "weight TRL reads directly for the log-probs, so the trained copy would part from it; "
                           "drop embed_tokens")
    for wanted in names:
        if not any(name == wanted or name.endswith("." + wanted) for name in module_names):
            raise AdapterError(f"--lora_modules_to_save {wanted}: the model has no module of that name "
                               "(e.g. merger, embed_tokens)")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class AdapterPlan:
    """The LoRA config of a run and what it trains, counted on the model's architecture."""

    lora_config: Any  # peft.LoraConfig (None from adapter_plan(..., with_config=False))
    adapter_parameters: int  # the LoRA A and B matrices
    saved_parameters: int  # modules trained in full (--lora_modules_to_save)
    adapted_layers: int


def adapter_plan(model, *, r: int, alpha: float, dropout: float, target_modules: Sequence[str],
                 modules_to_save: Sequence[str] | None = None, with_config: bool = True) -> AdapterPlan:
    """The LoRA config for ``model`` (a loaded model, or one built on the meta device). Raises AdapterError.

    ``with_config=False``: the counts only, without importing peft (a run without --use_peft keeps peft out,
    grpo_train.keep_peft_out, yet its memory arithmetic counts what LoRA would train)."""
    import torch

    pattern = lora_target_pattern(model, target_modules)
    to_save = _modules_to_save(model, modules_to_save)
    config = None
    if with_config:
        from peft import LoraConfig

        config = LoraConfig(task_type="CAUSAL_LM", r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none",
                            target_modules=pattern, modules_to_save=to_save)
    in_saved = [re.compile(rf"(^|.*\.){re.escape(s)}($|\..*)") for s in to_save or ()]  # PEFT's own rule
    modules = dict(model.named_modules())
    adapted = [m for name, m in modules.items() if isinstance(m, torch.nn.Linear) and re.fullmatch(pattern, name)
               and not any(rule.match(name) for rule in in_saved)]
    if not adapted:
        raise AdapterError("--lora_target_modules: every layer it names is inside --lora_modules_to_save; keep at "
                           "least one adapted layer")
    saved_roots = [name for name in modules if any(name == s or name.endswith("." + s) for s in to_save or ())]
    saved_roots = [name for name in saved_roots if not any(name.startswith(other + ".") for other in saved_roots)]
    saved = sum(p.numel() for name in saved_roots for p in modules[name].parameters())
    return AdapterPlan(config, sum(r * (m.in_features + m.out_features) for m in adapted), saved, len(adapted))


def plan_for_run(cfg, model_path: str) -> AdapterPlan:
    """The run's LoRA plan from ``--lora_*``, checked on ``model_path``'s architecture before any weight loads."""
    from transformers import AutoConfig

    from olmocr_rl.model.loading import meta_model

    return adapter_plan(meta_model(AutoConfig.from_pretrained(model_path)), r=cfg.lora_r, alpha=cfg.lora_alpha,
                        dropout=cfg.lora_dropout, target_modules=cfg.lora_target_modules,
                        modules_to_save=cfg.lora_modules_to_save)


# --- the weight sync: merged weights without touching the base ------------------------------------------------

def merged_named_parameters(peft_model) -> Iterator[tuple[str, Any]]:
    """Every weight of ``peft_model`` with its active adapters merged in, under the transformers name.

    The names are what the model has without PEFT (what vLLM loads): no ``base_model.model.`` prefix, no
    ``.base_layer``, a ``--lora_modules_to_save`` module's trained copy under the module's own name (its
    frozen original skipped), no LoRA matrices. A LoRA layer's weight is ``W + ΔW`` computed into a new
    tensor in W's dtype, the value PEFT's in-place merge writes; W itself is never changed.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    base = unwrap(peft_model)
    layers = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    with torch.no_grad():
        for name, param in base.named_parameters():
            if ".lora_" in name or ".original_module." in name:
                continue
            clean = name.replace(".modules_to_save.default.", ".")
            if ".base_layer." not in clean:
                yield clean, param.data
                continue
            owner, leaf = clean.split(".base_layer.", 1)
            clean = f"{owner}.{leaf}"
            layer = layers.get(owner)
            if leaf != "weight" or layer is None or layer.merged or layer.disable_adapters:
                yield clean, param.data
                continue
            value = param.data
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    value = torch.add(value, layer.get_delta_weight(adapter))
            yield clean, value.to(param.dtype)


# --- adapter folders as models ---------------------------------------------------------------------------------

def is_adapter_folder(path: str | Path) -> bool:
    """A local folder holding a LoRA adapter (``adapter_config.json``)."""
    return (Path(path).expanduser() / ADAPTER_CONFIG).is_file()


def adapter_base_name(path: str | Path) -> str:
    """The base model an adapter folder was trained on (its ``base_model_name_or_path``). Raises AdapterError."""
    config_file = Path(path).expanduser() / ADAPTER_CONFIG
    try:
        base = json.loads(config_file.read_text()).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError) as exc:
        raise AdapterError(f"{config_file}: cannot be read ({exc})") from None
    if not base:
        raise AdapterError(f"{config_file}: no base_model_name_or_path; the adapter's base model is unknown")
    return str(base)


def set_adapter_base_name(path: str | Path, base: str) -> None:
    """Record ``base`` (a hub id, an absolute folder or an s3:// prefix) as the adapter folder's base model."""
    config_file = Path(path) / ADAPTER_CONFIG
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = base
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def portable_model_name(name: str) -> str:
    """``--model_name`` as an adapter records its base: a local folder made absolute, a hub id or s3:// kept."""
    path = Path(name).expanduser()
    return str(path.resolve()) if not name.startswith("s3://") and path.exists() else name


def _has_processor(path: Path) -> bool:
    return (path / "tokenizer_config.json").is_file() and any(
        (path / name).is_file() for name in ("processor_config.json", "preprocessor_config.json"))


def load_merged(path: str | Path, *, dtype: Any = None, cache_dir: str | None = None):
    """``(model, processor)``: the adapter folder ``path`` merged onto its base model (a plain transformers model).

    The processor is the adapter folder's when it holds one (a training run saves it there), else the base's."""
    from peft import PeftModel

    from olmocr_rl.model.loading import ModelLoadError, load_model_and_processor, load_processor

    path = Path(path).expanduser()
    base = adapter_base_name(path)
    try:
        model, processor = load_model_and_processor(base, dtype=dtype, cache_dir=cache_dir)
    except (ModelLoadError, OSError) as exc:
        raise AdapterError(f"{path} is a LoRA adapter of {base}, which cannot be loaded: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
    merged = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    logger.info("merged the LoRA adapter %s onto %s", path, base)
    return merged, load_processor(str(path)) if _has_processor(path) else processor


def write_merged(path: str | Path, out_dir: str | Path, *, dtype: Any = None, cache_dir: str | None = None) -> Path:
    """Save the adapter folder ``path`` merged onto its base as a full model folder (weights, config, processor)."""
    model, processor = load_merged(path, dtype=dtype, cache_dir=cache_dir)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


def load_policy(name: str, **kwargs):
    """``(model, processor)`` of a model folder, hub id, ``s3://`` prefix or LoRA adapter folder (merged)."""
    from olmocr_rl.model.loading import load_model_and_processor

    if not str(name).startswith("s3://") and is_adapter_folder(name) and not (Path(name) / "config.json").is_file():
        return load_merged(name, dtype=kwargs.get("dtype"), cache_dir=kwargs.get("cache_dir"))
    return load_model_and_processor(name, **kwargs)
