"""What ``python -m olmocr_rl.evaluate`` settles before anything slow: the page selection, the sampling, the model
path, the backend's flags; then the backend itself (the checkpoint, the vLLM engine, or the server, checked).

Every check here raises :class:`~olmocr_rl.evaluation.common.EvaluateError` with one line naming the flag, before
the model loads.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from olmocr_rl.data.dataset import page_key, select_pages
from olmocr_rl.data.page_names import list_pages_command, page_names_hint
from olmocr_rl.evaluation.backends import HFBackend, ServerBackend, VLLMBackend
from olmocr_rl.evaluation.common import EvaluateError, Sampling
from olmocr_rl.evaluation.options import BACKENDS, DEFAULT_SAMPLING_TEMPERATURE, DEFAULTS, SERVER_VLLM_FIELDS
from olmocr_rl.evaluation.protocol import PROTOCOLS, TEMPERATURE_BY_ATTEMPT


def compile_page_regex(flag: str, pattern: str | None) -> re.Pattern | None:
    """``pattern`` compiled, None for None; EvaluateError naming the flag when it is not a regex."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise EvaluateError(f"{flag} {pattern!r} is not a valid regular expression ({exc})") from None


def resolve_sampling(num_samples: int, temperature: float | None) -> Sampling:
    """Greedy for one sample and no temperature (or 0); sampling otherwise.

    ``temperature`` None means 0 (greedy) for K = 1 and :data:`DEFAULT_SAMPLING_TEMPERATURE` for
    K > 1. K > 1 at temperature 0 would write K identical files, so it is an EvaluateError.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise EvaluateError(f"--num_samples must be a positive integer, got {num_samples!r}")
    if temperature is None:
        temperature = 0.0 if num_samples == 1 else DEFAULT_SAMPLING_TEMPERATURE
    if not temperature >= 0:  # also rejects NaN
        raise EvaluateError(f"--temperature must be >= 0 (0 = greedy), got {temperature}")
    if temperature == 0 and num_samples > 1:
        raise EvaluateError(
            f"--num_samples {num_samples} at --temperature 0 would write {num_samples} identical greedy "
            "transcriptions; give a temperature > 0 (e.g. 0.8) or --num_samples 1"
        )
    return Sampling(num_samples, temperature > 0, float(temperature))


def check_model_path(model: str) -> None:
    """EvaluateError for a local model folder that is missing or holds no config.json.

    ``s3://`` prefixes and hub ids (``org/name`` that is not a local path) are left to the loader.
    """
    if model.startswith("s3://"):
        return
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
            raise EvaluateError(
                f"--model {model}: folder has no config.json (nor adapter_config.json); pass a checkpoint folder "
                "(e.g. out/run/checkpoint-500, or one written by `python -m olmocr_rl.tiny_model DIR`)"
            )
        return
    if path.exists():
        raise EvaluateError(f"--model {model}: not a folder; pass a checkpoint folder")
    if model.startswith((".", "/", "~")) or model.count("/") != 1:
        raise EvaluateError(f"--model {model}: no such model folder")


def default_outputs_dir(model: str, bench: str) -> Path:
    """``outputs/eval/<model folder name>__<bench folder name>`` (``outputs/`` is git-ignored)."""
    model_name = Path(model.rstrip("/")).name or "model"
    bench_name = Path(str(bench).rstrip("/")).name or "bench"
    return Path("outputs") / "eval" / f"{model_name}__{bench_name}"


def load_bench_pages(bench: str | os.PathLike, jsonl_filter: str | None, keep: re.Pattern | None,
                     drop: re.Pattern | None, image_dim: int | None = None):
    """``(dataset, selected)``: the bench folder as a dataset and the indices of the pages to transcribe.

    EvaluateError (one line) when the folder has problems (the first is named) or the filters keep no page.
    """
    from olmocr_rl.data.dataset import OlmOCRBenchDataset
    from olmocr_rl.data.validation import validate_bench_folder

    if not Path(bench).is_dir():
        raise EvaluateError(f"--bench {bench}: no such folder; pass an olmOCR-bench folder (*.jsonl + pdfs/)")
    report = validate_bench_folder(bench, jsonl_filter)
    if not report.ok:
        raise EvaluateError(f"{report.summary_line()} (python -m olmocr_rl.validate_bench {bench} lists all)")
    sized = {} if image_dim is None else {"target_longest_image_dim": image_dim}
    dataset = OlmOCRBenchDataset(bench, jsonl_filter=jsonl_filter, report=report, **sized)  # the folder read once
    keys = [page_key(sample["pdf"], sample["page"]) for sample in dataset.samples]
    selected = select_pages(keys, keep, drop)
    if not selected:
        filters = " ".join(f"{flag} {pattern!r}" for flag, pattern in
                           (("--jsonl_filter", jsonl_filter), ("--pages", keep and keep.pattern),
                            ("--exclude_pages", drop and drop.pattern)) if pattern)
        raise EvaluateError(f"{filters} selects no page of {bench}: "
                            f"{page_names_hint(keys, list_pages_command(bench, jsonl_filter))}")
    return dataset, selected


def load_model(model: str, device: str | None):
    """``(model, processor)`` in eval mode on ``device`` (default cuda when available); EvaluateError if unloadable."""
    import torch

    from olmocr_rl.model.adapters import load_policy
    from olmocr_rl.model.loading import ModelLoadError

    try:
        policy, processor = load_policy(model)  # a LoRA adapter folder is merged onto its base model
    except (ModelLoadError, OSError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EvaluateError(f"--model {model}: cannot load it: {first_line}") from None
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return policy.to(device).eval(), processor


@dataclass
class BackendFlags:
    """How pages are transcribed: the backend, the protocol and the flags only some backends take (None: not given).
    Defaults: the flags' (:data:`~olmocr_rl.evaluation.options.DEFAULTS`)."""

    backend: str = DEFAULTS["backend"]
    protocol: str = DEFAULTS["protocol"]
    server_url: str | None = DEFAULTS["server_url"]
    server_model: str | None = DEFAULTS["server_model"]
    server_concurrency: int = DEFAULTS["server_concurrency"]
    server_timeout: float = DEFAULTS["server_timeout"]
    server_retries: int = DEFAULTS["server_retries"]
    server_vllm_fields: str = DEFAULTS["server_vllm_fields"]
    tensor_parallel_size: int | None = DEFAULTS["tensor_parallel_size"]
    data_parallel_size: int | None = DEFAULTS["data_parallel_size"]
    vllm_dtype: str | None = DEFAULTS["vllm_dtype"]
    vllm_max_model_len: int = DEFAULTS["vllm_max_model_len"]
    vllm_gpu_memory_utilization: float = DEFAULTS["vllm_gpu_memory_utilization"]
    vllm_enforce_eager: bool = DEFAULTS["vllm_enforce_eager"]
    vllm_kv_cache_gib: float | None = DEFAULTS["vllm_kv_cache_gib"]
    max_attempts: int | None = DEFAULTS["max_attempts"]
    device: str | None = DEFAULTS["device"]
    batch_size: int | None = DEFAULTS["batch_size"]

    @classmethod
    def from_args(cls, args) -> BackendFlags:
        """From parsed flags (every field is a flag of the same name)."""
        from dataclasses import fields

        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


def check_backend_flags(flags: BackendFlags, temperature: float | None) -> None:
    """EvaluateError (one line) for a backend or protocol flag the chosen backend or protocol cannot honour, and
    for ``--backend vllm`` where vLLM is not installed; nothing is loaded or contacted."""
    if flags.backend not in BACKENDS:
        raise EvaluateError(f"--backend {flags.backend!r}: choose one of {', '.join(BACKENDS)}")
    if flags.protocol not in PROTOCOLS:
        raise EvaluateError(f"--protocol {flags.protocol!r}: choose one of {', '.join(PROTOCOLS)}")
    only = {"server": (("--server_url", flags.server_url), ("--server_model", flags.server_model)),
            "vllm": (("--tensor_parallel_size", flags.tensor_parallel_size),
                     ("--data_parallel_size", flags.data_parallel_size), ("--vllm_dtype", flags.vllm_dtype),
                     ("--vllm_enforce_eager", True if flags.vllm_enforce_eager else None),
                     ("--vllm_kv_cache_gib", flags.vllm_kv_cache_gib)),
            "hf": (("--device", flags.device), ("--batch_size", flags.batch_size))}
    for backend, pairs in only.items():
        for flag, value in pairs:
            if value is not None and flags.backend != backend:
                raise EvaluateError(f"{flag} is for --backend {backend}, not --backend {flags.backend}; drop it "
                                    f"or pass --backend {backend}")
    if flags.backend == "server" and not flags.server_url:
        raise EvaluateError("--backend server needs --server_url (e.g. http://127.0.0.1:8000 of `vllm serve MODEL`)")
    if flags.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise EvaluateError("--backend vllm: vLLM is not installed in this environment; install it (pip install "
                            "'olmocr_rl[gpu]', or `bash scripts/setup_env.sh --vllm` for the CPU build) or use "
                            "--backend hf")
    if flags.protocol == "olmocr-pipeline" and temperature is not None:
        raise EvaluateError("--temperature cannot be honoured by --protocol olmocr-pipeline: it samples attempt a at "
                            f"{list(TEMPERATURE_BY_ATTEMPT)}[a]; drop --temperature or use --protocol single")
    if flags.protocol == "single" and flags.max_attempts is not None:
        raise EvaluateError("--max_attempts is for --protocol olmocr-pipeline; drop it or pass that protocol")
    positive = (("--server_concurrency", flags.server_concurrency), ("--tensor_parallel_size", flags.tensor_parallel_size),
                ("--data_parallel_size", flags.data_parallel_size), ("--max_attempts", flags.max_attempts),
                ("--batch_size", flags.batch_size), ("--vllm_max_model_len", flags.vllm_max_model_len))
    for flag, value in positive:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise EvaluateError(f"{flag} must be a positive integer, got {value!r}")
    if not flags.server_timeout > 0 or not flags.server_retries >= 0:
        raise EvaluateError("--server_timeout must be > 0 seconds and --server_retries >= 0")
    if flags.server_vllm_fields not in SERVER_VLLM_FIELDS:
        raise EvaluateError(f"--server_vllm_fields {flags.server_vllm_fields!r}: choose one of "
                            f"{', '.join(SERVER_VLLM_FIELDS)}")
    if flags.vllm_kv_cache_gib is not None and not flags.vllm_kv_cache_gib > 0:
        raise EvaluateError(f"--vllm_kv_cache_gib must be > 0 GiB, got {flags.vllm_kv_cache_gib}")


def build_backend(model: str, flags: BackendFlags, seed: int, kv_cache_bytes: int | None = None, note=print):
    """The backend, loaded (hf: the checkpoint; vllm: the engine, with ``kv_cache_bytes`` of KV cache when given) or
    checked (server: reachable, serves the model; ``note`` gets its line about vLLM's request fields)."""
    if flags.backend == "server":
        backend = ServerBackend(flags.server_url, flags.server_model or model, concurrency=flags.server_concurrency,
                                timeout=flags.server_timeout, retries=flags.server_retries,
                                api_key=os.environ.get("OLMOCR_RL_SERVER_API_KEY"))
        backend.check()
        backend.decide_vllm_fields(flags.server_vllm_fields, note)
        return backend
    if flags.backend == "vllm":
        return VLLMBackend(model, dtype=vllm_dtype(flags), tensor_parallel_size=flags.tensor_parallel_size or 1,
                           data_parallel_size=flags.data_parallel_size or 1, max_model_len=flags.vllm_max_model_len,
                           gpu_memory_utilization=flags.vllm_gpu_memory_utilization, seed=seed,
                           enforce_eager=flags.vllm_enforce_eager, kv_cache_bytes=kv_cache_bytes)
    policy, processor = load_model(model, flags.device)
    return HFBackend(policy, processor, batch_size=flags.batch_size or 1)


def vllm_dtype(flags: BackendFlags) -> str:
    """The engine's dtype: --vllm_dtype, else bfloat16 on CUDA and float32 on CPU (as hf)."""
    if flags.vllm_dtype:
        return flags.vllm_dtype
    import torch

    return "bfloat16" if torch.cuda.is_available() else "float32"
