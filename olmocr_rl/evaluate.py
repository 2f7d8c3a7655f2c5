"""Transcribe a bench folder with a checkpoint and score it: the before/after number researchers publish.

    python -m olmocr_rl.evaluate --model out/run/checkpoint-500 --bench bench_data_sample
    python -m olmocr_rl.evaluate --model models/tiny-sft --bench bench_data_sample --num_samples 3 --json
    python -m olmocr_rl.evaluate --model out/run --bench bench_data_sample --pages '^(table|equations)\\.pdf:'
    python -m olmocr_rl.evaluate --model out/lora-run/checkpoint-100 --bench bench_data_sample   # a LoRA adapter
    python -m olmocr_rl.evaluate --model out/run --bench bench_data --backend vllm --protocol olmocr-pipeline
    python -m olmocr_rl.evaluate --model out/run --bench bench_data --backend server --server_url http://127.0.0.1:8000
    python -m olmocr_rl.evaluate --compare outputs/eval/base__bench_data outputs/eval/run__bench_data

Every selected page of the bench folder is rendered and prompted exactly as in training
(:class:`~olmocr_rl.data.dataset.OlmOCRBenchDataset`), transcribed K times by a backend (``--backend hf``:
Hugging Face ``generate``; ``vllm``: vLLM's offline engine; ``server``: an OpenAI-compatible endpoint) under a
protocol (``--protocol single``: one pass; ``olmocr-pipeline``: olmOCR's retries, rotation correction and
text-layer fallback; :mod:`olmocr_rl.evaluation`), and each transcription is written, YAML front matter
removed, in olmOCR-bench's candidate layout, beside ``scores.json`` and ``evaluation.json``::

    OUTPUTS/<pdf stem>_pg<page>_repeat<k>.md          k = 1..K
    OUTPUTS/<sub>/<pdf stem>_pg<page>_repeat<k>.md    for pdfs/<sub>/<stem>.pdf

The folder is then scored by the bench scorer (:mod:`olmocr_rl.bench.score`, the same code as
``python -m olmocr_rl.bench.score``): per-JSONL pass rates and their mean, as olmOCR-bench reports. The
report names the scoring rule: ``--scoring olmocr-rl`` (default: olmOCR-bench's tests plus this project's
near-empty guard on present/absent) or ``--scoring olmocr-bench`` (olmocr's scorer, no guard: numbers
comparable with the published leaderboard; docs/evaluate.md lists what else differs).

Pages are named ``<pdf>:<page>`` with ``<pdf>`` relative to ``pdfs/`` (``counting.pdf:2``,
``synth/doc0042_page3.pdf:1``); ``--pages`` keeps the pages whose name a regex matches (``re.search``)
and ``--exclude_pages`` drops them, so a run can be scored on pages held out from training. Only the
tests of the selected pages are scored.

Sampling: greedy when K = 1 and no temperature is given; otherwise pure temperature sampling (top-p
1, no top-k, no repetition penalty: the checkpoint's ``generation_config`` sampling settings are
overridden, as in training). Each batch is seeded from ``--seed`` and the name of its first page,
so with ``--batch_size 1`` a page's transcriptions do not depend on which other pages are selected.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from olmocr_rl.bench.prepared import PROJECT_RULE
from olmocr_rl.bench.score import output_files
from olmocr_rl.data.dataset import page_key, select_pages
from olmocr_rl.evaluation.backends import BACKENDS, HFBackend, ServerBackend, VLLMBackend
from olmocr_rl.evaluation.backends import generation_config, transcribe_batch  # noqa: F401  (public here too)
from olmocr_rl.evaluation.common import EvaluateError, Sampling, batch_seed, output_path, strip_front_matter  # noqa: F401
from olmocr_rl.evaluation.folder import SCORES, SUMMARY, Progress, publish, staged, test_set_digest, versions, write_json
from olmocr_rl.evaluation.scoring import check_scoring, format_pipeline, format_result, score_outputs  # noqa: F401
from olmocr_rl.evaluation.protocol import (DEFAULT_MAX_ATTEMPTS, MODEL_MAX_CONTEXT, PIPELINE_MAX_TOKENS, PROTOCOLS,
                                           TEMPERATURE_BY_ATTEMPT, protocol_counts, run_pipeline, run_single)

#: Temperature used when sampling K > 1 transcriptions and none is given (the training CLI's default).
DEFAULT_SAMPLING_TEMPERATURE = 0.8
#: Default cap on new tokens (--protocol single): a dense page of olmOCR-bench runs to ~2-3k tokens.
DEFAULT_MAX_NEW_TOKENS = 3000
#: Pages per call to the vLLM engine or per round of server requests (the hf backend uses --batch_size).
ENGINE_CHUNK_PAGES = 64


# --- pages -----------------------------------------------------------------------------------------


def compile_page_regex(flag: str, pattern: str | None) -> re.Pattern | None:
    """``pattern`` compiled, None for None; EvaluateError naming the flag when it is not a regex."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise EvaluateError(f"{flag} {pattern!r} is not a valid regular expression ({exc})") from None


# --- sampling --------------------------------------------------------------------------------------


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


# --- the run ---------------------------------------------------------------------------------------


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


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_bench_pages(bench: str | os.PathLike, jsonl_filter: str | None, keep: re.Pattern | None,
                     drop: re.Pattern | None):
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
    dataset = OlmOCRBenchDataset(bench, jsonl_filter=jsonl_filter, report=report)  # the folder read once
    keys = [page_key(sample["pdf"], sample["page"]) for sample in dataset.samples]
    selected = select_pages(keys, keep, drop)
    if not selected:
        filters = " ".join(f"{flag} {pattern!r}" for flag, pattern in
                           (("--jsonl_filter", jsonl_filter), ("--pages", keep and keep.pattern),
                            ("--exclude_pages", drop and drop.pattern)) if pattern)
        raise EvaluateError(
            f"{filters} selects none of the {len(keys)} pages of {bench} "
            f"(page names look like {keys[0]!r}: <pdf under pdfs/>:<page>)"
        )
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
    """How pages are transcribed: the backend, the protocol and the flags only some backends take (None: not given)."""

    backend: str = "hf"
    protocol: str = "single"
    server_url: str | None = None
    server_model: str | None = None
    server_concurrency: int = 8
    server_timeout: float = 600.0
    server_retries: int = 3
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None
    vllm_dtype: str | None = None
    vllm_max_model_len: int = MODEL_MAX_CONTEXT
    vllm_gpu_memory_utilization: float = 0.9
    vllm_enforce_eager: bool = False
    max_attempts: int | None = None
    device: str | None = None
    batch_size: int | None = None


def check_backend_flags(flags: BackendFlags, temperature: float | None) -> None:
    """EvaluateError (one line) for a backend or protocol flag the chosen backend or protocol cannot honour, and
    for ``--backend vllm`` where vLLM is not installed; nothing is loaded or contacted."""
    import importlib.util

    if flags.backend not in BACKENDS:
        raise EvaluateError(f"--backend {flags.backend!r}: choose one of {', '.join(BACKENDS)}")
    if flags.protocol not in PROTOCOLS:
        raise EvaluateError(f"--protocol {flags.protocol!r}: choose one of {', '.join(PROTOCOLS)}")
    only = {"server": (("--server_url", flags.server_url), ("--server_model", flags.server_model)),
            "vllm": (("--tensor_parallel_size", flags.tensor_parallel_size),
                     ("--data_parallel_size", flags.data_parallel_size), ("--vllm_dtype", flags.vllm_dtype),
                     ("--vllm_enforce_eager", True if flags.vllm_enforce_eager else None)),
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


def build_backend(model: str, flags: BackendFlags, seed: int):
    """The backend, loaded (hf: the checkpoint; vllm: the engine) or checked (server: reachable, serves the model)."""
    if flags.backend == "server":
        backend = ServerBackend(flags.server_url, flags.server_model or model, concurrency=flags.server_concurrency,
                                timeout=flags.server_timeout, retries=flags.server_retries,
                                api_key=os.environ.get("OLMOCR_RL_SERVER_API_KEY"))
        backend.check()
        return backend
    if flags.backend == "vllm":
        import torch

        dtype = flags.vllm_dtype or ("bfloat16" if torch.cuda.is_available() else "float32")
        return VLLMBackend(model, dtype=dtype, tensor_parallel_size=flags.tensor_parallel_size or 1,
                           data_parallel_size=flags.data_parallel_size or 1, max_model_len=flags.vllm_max_model_len,
                           gpu_memory_utilization=flags.vllm_gpu_memory_utilization, seed=seed,
                           enforce_eager=flags.vllm_enforce_eager)
    policy, processor = load_model(model, flags.device)
    return HFBackend(policy, processor, batch_size=flags.batch_size or 1)


def evaluate(
    model: str,
    bench: str | os.PathLike,
    *,
    outputs: str | os.PathLike | None = None,
    num_samples: int = 1,
    temperature: float | None = None,
    max_new_tokens: int | None = None,
    jsonl_filter: str | None = None,
    pages: str | None = None,
    exclude_pages: str | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    device: str | None = None,
    scoring: str = PROJECT_RULE,
    flags: BackendFlags | None = None,
    backend=None,
) -> dict:
    """Transcribe the selected pages of ``bench`` with ``model``, write them, score them under ``scoring``
    (``olmocr-rl``, the project's rule, or ``olmocr-bench``, olmocr's scorer's; docs/evaluate.md).

    ``flags`` chooses the backend and protocol (default: Hugging Face ``generate``, one pass); ``backend`` (tests,
    benchmarks) is an already built one to use instead of building it. The evaluation folder gets the
    transcriptions, ``scores.json`` and ``evaluation.json``, all or nothing. Returns a JSON-ready dict: the
    scorer's result (``overall_pass_rate``, ``per_jsonl``, ``per_type``, ``missing_outputs``, ``tests``) plus
    ``evaluation.json``'s keys. Raises EvaluateError for anything the user can fix; every check that can runs
    before the model is loaded.
    """
    flags = flags or BackendFlags(device=device, batch_size=batch_size)
    pipeline = flags.protocol == "olmocr-pipeline"
    # 1. Flags, model path, bench folder and page selection: fail before the slow model load.
    check_backend_flags(flags, temperature)
    sampling = resolve_sampling(num_samples, 1.0 if pipeline else temperature)
    if max_new_tokens is None:
        max_new_tokens = PIPELINE_MAX_TOKENS if pipeline else DEFAULT_MAX_NEW_TOKENS
    check_scoring(scoring)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise EvaluateError(f"--max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    keep = compile_page_regex("--pages", pages)
    drop = compile_page_regex("--exclude_pages", exclude_pages)
    if flags.backend != "server":
        check_model_path(model)
    dataset, selected = load_bench_pages(bench, jsonl_filter, keep, drop)
    outputs = Path(outputs) if outputs is not None else default_outputs_dir(model, str(bench))

    # 2. Backend, then transcriptions, scores and summary, staged and published whole.
    owned = backend is None  # built here: closed here (the vLLM engine's memory is freed at the end)
    backend = backend or build_backend(model, flags, seed)
    try:
        return _run(backend, model, bench, outputs, flags, dataset, selected, sampling, max_new_tokens, seed, scoring)
    finally:
        if owned:
            backend.close()


def _run(backend, model, bench, outputs: Path, flags: BackendFlags, dataset, selected, sampling: Sampling,
         max_new_tokens: int, seed: int, scoring: str) -> dict:
    """Transcribe, write, score and publish the evaluation folder (staged: all or nothing)."""
    pipeline = flags.protocol == "olmocr-pipeline"
    _progress(f"[evaluate] {model} on {len(selected)}/{len(dataset)} pages of {bench} with --backend {backend.name} "
              f"--protocol {flags.protocol}, {sampling.describe() if not pipeline else 'olmOCR pipeline'}, "
              f"max {max_new_tokens} new tokens -> {outputs}")
    chosen = [dataset.samples[i] for i in selected]
    with staged(outputs) as staging:
        began = time.perf_counter()
        transcriptions = transcribe_pages(backend, dataset, selected, flags, sampling, max_new_tokens, seed)
        seconds = time.perf_counter() - began
        write_pages(staging, chosen, transcriptions)
        result = score_outputs(bench, staging, pages=chosen, scoring=scoring)
        summary = run_summary(model, bench, outputs, flags, backend.name, chosen, sampling, max_new_tokens, seed,
                              transcriptions, seconds, result)
        write_json(staging / SCORES, result)
        write_json(staging / SUMMARY, summary)
        replaced = [old for sample in chosen for old in output_files(outputs, sample["pdf"], sample["page"])]
        publish(staging, outputs, replaced)
    return {**result, **summary}


def transcribe_pages(backend, dataset, selected: Sequence[int], flags: BackendFlags, sampling: Sampling,
                     max_new_tokens: int, seed: int) -> list:
    """Every selected page's K :class:`~olmocr_rl.evaluation.protocol.Transcription`, in chunks of pages (rendered
    lazily), with the progress bar on stderr."""
    chunk = (flags.batch_size or 1) if backend.name == "hf" else ENGINE_CHUNK_PAGES
    progress = Progress(len(selected))
    out: list = []
    try:
        for start in range(0, len(selected), chunk):
            part = selected[start : start + chunk]
            items = [dataset[i] for i in part]
            keys = [page_key(item["pdf"], item["page"]) for item in items]
            if flags.protocol == "olmocr-pipeline":
                out += run_pipeline(backend, items, keys, num_samples=sampling.num_samples,
                                    max_attempts=flags.max_attempts or DEFAULT_MAX_ATTEMPTS,
                                    max_tokens=max_new_tokens, seed=seed,
                                    page_done=lambda i, note, keys=keys: progress.update(f"{keys[i]}: {note}"))
            else:
                out += run_single(backend, items, keys, num_samples=sampling.num_samples,
                                  temperature=sampling.temperature, max_tokens=max_new_tokens, seed=seed,
                                  chunk=len(items),
                                  page_done=lambda i, note, keys=keys: progress.update(f"{keys[i]}: {note}"))
    finally:
        progress.close()
    return out


def write_pages(folder: Path, chosen: Sequence[dict], transcriptions: Sequence[Sequence]) -> None:
    """Each page's K transcriptions in the bench layout (front matter already removed); a failed request's
    repeat is not written (its tests fail as missing)."""
    for sample, repeats in zip(chosen, transcriptions):
        for k, transcription in enumerate(repeats, start=1):
            if transcription.outcome == "error":
                continue
            path = output_path(folder, sample["pdf"], sample["page"], k)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(transcription.text, encoding="utf-8")


def run_summary(model, bench, outputs, flags: BackendFlags, backend_name: str, chosen, sampling: Sampling,
                max_new_tokens: int, seed: int, transcriptions, seconds: float, result: dict) -> dict:
    """``evaluation.json``: what ran (backend, protocol, model, seed, versions) and what it counted."""
    flat = [t for page in transcriptions for t in page]
    summary = {
        "model": model, "bench": str(bench), "outputs": str(outputs), "backend": backend_name,
        "protocol": flags.protocol, "server_model": (flags.server_model or model) if backend_name == "server" else None,
        "pages": [page_key(sample["pdf"], sample["page"]) for sample in chosen],
        "sampling": {"num_samples": sampling.num_samples, "do_sample": sampling.do_sample,
                     "temperature": sampling.temperature if flags.protocol == "single" else None,
                     "max_new_tokens": max_new_tokens, "batch_size": flags.batch_size or 1, "seed": seed},
        "seed": seed, "scoring": result["scoring"], "test_set": test_set_digest(list(result["tests"])),
        "generated_tokens": sum(t.tokens for t in flat),
        "capped_samples": sum(t.finish == "length" and t.outcome == "answer" for t in flat),
        "failed_requests": sum(t.outcome == "error" for t in flat),
        "generate_s": round(seconds, 3), "pages_per_s": round(len(chosen) / seconds, 4) if seconds else None,
        "versions": versions(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if flags.protocol == "olmocr-pipeline":
        summary["pipeline"] = protocol_counts(transcriptions, flags.max_attempts or DEFAULT_MAX_ATTEMPTS)
    return summary


# --- command line ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.evaluate",
        description=(
            "Transcribe every page of an olmOCR-bench folder with a checkpoint, write the outputs in "
            "olmOCR-bench's layout (<pdf stem>_pg<page>_repeat<k>.md, front matter removed) and score "
            "them with the bench scorer (python -m olmocr_rl.bench.score): per-JSONL and overall pass "
            "rates. Backends: Hugging Face generate, vLLM's offline engine, or any OpenAI-compatible server; "
            "protocols: one pass, or olmOCR's pipeline. --compare EVAL_A EVAL_B compares two evaluation folders."
        ),
        epilog=(
            "Pages are named <pdf under pdfs/>:<page>, e.g. counting.pdf:2 or synth/doc0042_page3.pdf:1. "
            "Held-out evaluation: train on some pages, then score the others with --exclude_pages (or "
            "--pages) and the same regex. The progress bar goes to stderr, the report (or --json) to stdout; "
            "the folder gets the transcriptions, scores.json and evaluation.json (docs/evaluate.md)."
        ),
    )
    parser.add_argument("--model", default=None,
                        help="checkpoint folder (or s3://bucket/prefix, or a hub id), or a LoRA adapter folder "
                             "(a --use_peft checkpoint, or OUTPUT_DIR/adapter), merged onto its base model first; "
                             "required except with --compare (with --backend server: the name the report uses)")
    parser.add_argument("--bench", default=None,
                        help="olmOCR-bench folder: *.jsonl test files + pdfs/ (required except with --compare)")
    parser.add_argument("--outputs", default=None,
                        help="the evaluation folder (default outputs/eval/<model>__<bench>): transcriptions, "
                             "scores.json, evaluation.json; the selected pages' earlier repeat files are replaced")
    parser.add_argument("--backend", default="hf", choices=BACKENDS,
                        help="hf (default): Hugging Face generate; vllm: vLLM's offline engine on this machine; "
                             "server: an OpenAI-compatible endpoint (--server_url)")
    parser.add_argument("--protocol", default="single", choices=PROTOCOLS,
                        help="single (default): one pass per repeat, the quantity RL changes; olmocr-pipeline: "
                             "olmOCR's process_page (temperature per attempt, retries, rotation correction, "
                             "text-layer fallback), the protocol of the published leaderboard")
    parser.add_argument("--num_samples", type=int, default=1,
                        help="K transcriptions per page (repeat1..repeatK); a test passes when more than "
                             "half of its page's K transcriptions pass it, as in olmOCR-bench")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature (--protocol single); default 0 (greedy) for K=1, "
                             f"{DEFAULT_SAMPLING_TEMPERATURE} for K>1")
    parser.add_argument("--max_new_tokens", type=int, default=None,
                        help=f"cap on tokens generated per transcription (default {DEFAULT_MAX_NEW_TOKENS}; "
                             f"{PIPELINE_MAX_TOKENS} with --protocol olmocr-pipeline, olmOCR's MAX_TOKENS)")
    parser.add_argument("--max_attempts", type=int, default=None,
                        help=f"--protocol olmocr-pipeline: attempts per page (default {DEFAULT_MAX_ATTEMPTS}, "
                             "olmOCR's --max_page_retries)")
    parser.add_argument("--batch_size", type=int, default=None,
                        help="--backend hf: pages per generate call (each gives K sequences), left-padded (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default %(default)s)")
    parser.add_argument("--jsonl_filter", default=None,
                        help="regex searched (case-insensitive) in JSONL file names; only their tests are used")
    parser.add_argument("--pages", default=None, metavar="REGEX",
                        help="only pages whose name (<pdf>:<page>) this regex searches into")
    parser.add_argument("--exclude_pages", default=None, metavar="REGEX",
                        help="leave out pages whose name (<pdf>:<page>) this regex searches into")
    parser.add_argument("--device", default=None,
                        help="--backend hf: torch device (default cuda when available, else cpu)")
    add_engine_flags(parser)
    parser.add_argument("--scoring", default=PROJECT_RULE, metavar="RULE",
                        help="olmocr-rl (default): olmOCR-bench's tests plus this project's near-empty guard on "
                             "present/absent; olmocr-bench: exactly as olmocr's scorer (no guard), comparable with "
                             "the published leaderboard (docs/evaluate.md)")
    parser.add_argument("--compare", nargs=2, metavar=("EVAL_A", "EVAL_B"), default=None,
                        help="compare two evaluation folders of the same tests: per-JSONL and per-type table, "
                             "B - A with a bootstrap 95%% interval over pages (and repeats), and a PNG")
    parser.add_argument("--compare_png", default=None,
                        help="--compare: where the PNG goes (default EVAL_B/compare.png)")
    parser.add_argument("--bootstrap", type=int, default=1000,
                        help="--compare: bootstrap resamples (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return parser


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """The vLLM engine's and the server's flags."""
    parser.add_argument("--tensor_parallel_size", type=int, default=None,
                        help="--backend vllm: GPUs per engine (tensor parallel, default 1)")
    parser.add_argument("--data_parallel_size", type=int, default=None,
                        help="--backend vllm: engine replicas (data parallel, default 1)")
    parser.add_argument("--vllm_dtype", default=None,
                        help="--backend vllm: the engine's dtype (default bfloat16 on CUDA, float32 on CPU: as hf)")
    parser.add_argument("--vllm_max_model_len", type=int, default=MODEL_MAX_CONTEXT,
                        help="--backend vllm: context length (default %(default)s, olmOCR's MODEL_MAX_CONTEXT)")
    parser.add_argument("--vllm_gpu_memory_utilization", type=float, default=0.9,
                        help="--backend vllm: share of GPU memory the engine may take (default %(default)s)")
    parser.add_argument("--vllm_enforce_eager", action="store_true",
                        help="--backend vllm: no torch.compile or graph capture (starts in seconds; slower decoding)")
    parser.add_argument("--server_url", default=None,
                        help="--backend server: the endpoint's base URL, e.g. http://127.0.0.1:8000 (POST "
                             "/v1/chat/completions; an API key goes in OLMOCR_RL_SERVER_API_KEY)")
    parser.add_argument("--server_model", default=None,
                        help="--backend server: the model name the server serves (default: --model)")
    parser.add_argument("--server_concurrency", type=int, default=8,
                        help="--backend server: requests in flight at most (default %(default)s)")
    parser.add_argument("--server_timeout", type=float, default=600.0,
                        help="--backend server: seconds per request before it counts as timed out (default %(default)s)")
    parser.add_argument("--server_retries", type=int, default=3,
                        help="--backend server: retries of a request after a connection error, a timeout, a 429 "
                             "or a 5xx, waiting 2, 4, 8... s (default %(default)s); then the page is counted failed")


def flags_from_args(args) -> BackendFlags:
    return BackendFlags(
        backend=args.backend, protocol=args.protocol, server_url=args.server_url, server_model=args.server_model,
        server_concurrency=args.server_concurrency, server_timeout=args.server_timeout,
        server_retries=args.server_retries, tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size, vllm_dtype=args.vllm_dtype,
        vllm_max_model_len=args.vllm_max_model_len, vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        vllm_enforce_eager=args.vllm_enforce_eager,
        max_attempts=args.max_attempts, device=args.device, batch_size=args.batch_size)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.compare:
            from olmocr_rl.evaluation.compare import compare_main

            return compare_main(args.compare, png=args.compare_png, resamples=args.bootstrap, seed=args.seed,
                                as_json=args.json)
        for flag, value in (("--model", args.model), ("--bench", args.bench)):
            if value is None:
                raise EvaluateError(f"{flag} is required (unless --compare EVAL_A EVAL_B)")
        result = evaluate(
            args.model, args.bench, outputs=args.outputs, num_samples=args.num_samples,
            temperature=args.temperature, max_new_tokens=args.max_new_tokens, jsonl_filter=args.jsonl_filter,
            pages=args.pages, exclude_pages=args.exclude_pages, seed=args.seed, scoring=args.scoring,
            flags=flags_from_args(args),
        )
    except EvaluateError as exc:
        print(f"python -m olmocr_rl.evaluate: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_result(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
