"""How much KV cache ``--backend vllm`` asks for on a CPU: what the pages need, within what the machine has free.

vLLM's CPU engine otherwise takes ``--vllm_gpu_memory_utilization`` (0.9) of the machine's whole RAM, less what it
already holds, for its KV cache -- about 21 GiB of a 24 GiB machine -- so a second engine, or a 16 GB laptop, fails
with vLLM's memory error. Here the cache holds what the requests in flight at once can fill: up to 64 pages (one
engine call) x K sequences, each of the page prompt (image tokens + prompt text) plus ``--max_new_tokens``, at most
``--vllm_max_model_len`` tokens; at least one whole ``--vllm_max_model_len`` sequence (vLLM refuses to start with
less); at most half of the memory free now, after the engine's copy of the weights. ``--vllm_kv_cache_gib`` sets it
(on a GPU too, where vLLM's own sizing from ``--vllm_gpu_memory_utilization`` is otherwise kept), and
``VLLM_CPU_KVCACHE_SPACE`` set in the environment wins, as in vLLM.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from olmocr_rl.evaluation.common import EvaluateError

GIB = 2**30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "half": 2, "float": 4}
#: vLLM's CPU engine allocates its cache in blocks of this many tokens (block_size 128 on CPU).
BLOCK_TOKENS = 128
#: The share of the free memory (after the weights) the cache may take by default.
FREE_SHARE = 0.5


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def kv_bytes_per_token(config, dtype_bytes: int) -> int:
    """2 (K and V) x layers x KV heads x head size x bytes, from a model's config."""
    from olmocr_rl.model.families import head_dim

    text = config.get_text_config()
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return 2 * text.num_hidden_layers * heads * head_dim(text) * dtype_bytes


def weight_bytes(model: str, config, dtype_bytes: int) -> int:
    """The engine's copy of the weights: the folder's safetensors at the engine's dtype (0 where not local)."""
    folder = Path(model).expanduser()
    stored = sum(p.stat().st_size for p in folder.glob("*.safetensors")) if folder.is_dir() else 0
    stored_dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "bfloat16")
    return stored * dtype_bytes // DTYPE_BYTES.get(stored_dtype.replace("torch.", ""), 2)


def _block_round(tokens: int) -> int:
    return math.ceil(tokens / BLOCK_TOKENS) * BLOCK_TOKENS


def kv_cache_bytes(model: str, flags, *, pages: int, repeats: int, max_new_tokens: int, image_dim: int,
                   chunk_pages: int, cuda: bool | None = None, free: int | None = None) -> tuple[int | None, str]:
    """``(bytes for vLLM's kv_cache_memory_bytes, or None to leave vLLM's sizing; the line saying why)``;
    EvaluateError (one line) when one sequence cannot fit in the free memory. From the config alone."""
    from transformers import AutoConfig

    from olmocr_rl.config.checks import max_image_tokens
    from olmocr_rl.config.values import PROMPT_TEXT_TOKENS
    from olmocr_rl.evaluation.setup import vllm_dtype

    if flags.vllm_kv_cache_gib is not None:
        size = int(flags.vllm_kv_cache_gib * GIB)
        return size, f"vLLM KV cache: {size / GIB:.2f} GiB (--vllm_kv_cache_gib)"
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if cuda:
        return None, ""
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return None, (f"vLLM KV cache: {os.environ['VLLM_CPU_KVCACHE_SPACE']} GiB (VLLM_CPU_KVCACHE_SPACE in the "
                      "environment; --vllm_kv_cache_gib is ignored beside it)")
    dtype = vllm_dtype(flags)
    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise EvaluateError(f"--model {model}: cannot read its config for the KV cache size ({exc}); pass "
                            "--vllm_kv_cache_gib") from None
    per_token = kv_bytes_per_token(config, DTYPE_BYTES.get(dtype, 4))
    sequence = min(flags.vllm_max_model_len, max_image_tokens(image_dim) + PROMPT_TEXT_TOKENS + max_new_tokens)
    sequences = min(pages, chunk_pages) * repeats
    need = sequences * _block_round(sequence) * per_token
    floor = (_block_round(flags.vllm_max_model_len) + BLOCK_TOKENS) * per_token
    free = available_bytes() if free is None else free
    weights = weight_bytes(model, config, DTYPE_BYTES.get(dtype, 4))
    ceiling = int(FREE_SHARE * (free - weights)) if free is not None else None
    if ceiling is not None and floor > ceiling:
        raise EvaluateError(
            f"--backend vllm: one {flags.vllm_max_model_len:,}-token sequence needs {floor / GIB:.2f} GiB of KV cache "
            f"({dtype}), more than half of the {max(0, free - weights) / GIB:.1f} GiB free after the weights; lower "
            "--vllm_max_model_len (a page needs about "
            f"{max_image_tokens(image_dim) + PROMPT_TEXT_TOKENS + max_new_tokens:,}), free memory, or set "
            "--vllm_kv_cache_gib")
    size = max(floor, need if ceiling is None else min(need, ceiling))
    size = math.ceil(size / 2**20) * 2**20
    why = (f"{sequences} sequence(s) in flight of up to {sequence:,} tokens, {per_token:,} bytes a token in {dtype}; at "
           f"least one {flags.vllm_max_model_len:,}-token sequence" + (f"; at most half of the {free / GIB:.1f} GiB free"
                                                                      if free is not None else ""))
    return size, f"vLLM KV cache on CPU: {size / GIB:.2f} GiB ({why}; --vllm_kv_cache_gib sets it)"
