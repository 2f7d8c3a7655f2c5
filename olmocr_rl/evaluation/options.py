"""The flags of ``python -m olmocr_rl.evaluate``, one declaration each, through the training command's mechanism.

Each flag is a field of :class:`EvaluateOptions`, ``name: type = flag(GROUP, default, help, ...)``
(:func:`olmocr_rl.config.options.flag`); :func:`build_parser` generates the parser from them as the trainer's is
generated (``config.flags.declared_parser``: booleans take ``--no-X``, ``--help`` shows each default) and
:func:`parse_args` fills the same fields from ``--config FILE.yaml`` (keys are flag names) with the command line on
top. The run's own settings (:class:`~olmocr_rl.evaluation.setup.BackendFlags`) take their defaults from here.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from olmocr_rl.bench.prepared import PROJECT_RULE, SCORING_RULES
from olmocr_rl.config.flags import declared_parser
from olmocr_rl.config.flags import parse_args as parse_declared
from olmocr_rl.config.options import declared, flag
from olmocr_rl.config.values import DEFAULT_TARGET_LONGEST_IMAGE_DIM
from olmocr_rl.evaluation.backends import BACKENDS
from olmocr_rl.evaluation.protocol import DEFAULT_MAX_ATTEMPTS, MODEL_MAX_CONTEXT, PIPELINE_MAX_TOKENS, PROTOCOLS

#: Temperature used when sampling K > 1 transcriptions and none is given (the training CLI's default).
DEFAULT_SAMPLING_TEMPERATURE = 0.8
#: Default cap on new tokens (--protocol single): a dense page of olmOCR-bench runs to ~2-3k tokens.
DEFAULT_MAX_NEW_TOKENS = 3000
SERVER_VLLM_FIELDS = ("auto", "on", "off")

CONFIG = "config"
WHAT = "what to evaluate, and where the evaluation folder goes"
HOW = "transcription"
SCORING = "scoring and the report"
VLLM = "--backend vllm: vLLM's offline engine on this machine"
SERVER = "--backend server: an OpenAI-compatible endpoint"
COMPARE = "--compare: two evaluations side by side"


@dataclass(frozen=True)
class EvaluateOptions:
    """Every flag of ``python -m olmocr_rl.evaluate`` (see the module docstring)."""

    config: str | None = flag(CONFIG, None, "YAML file of flag values (keys are flag names without --); the command "
        "line wins")

    # ---- what ---------------------------------------------------------------------------------------------------
    model: str | None = flag(WHAT, None, "checkpoint folder (or s3://bucket/prefix, or a hub id), or a LoRA adapter "
        "folder (merged onto its base model first); required except with --compare (with --backend server: the name "
        "the report uses)")
    bench: str | None = flag(WHAT, None, "olmOCR-bench folder: *.jsonl test files + pdfs/ (required except with "
        "--compare)")
    outputs: str | None = flag(WHAT, None, "the evaluation folder (default outputs/eval/<model>__<bench>): "
        "transcriptions, each page's record as it finishes (pages.jsonl), scores.json, evaluation.json. The same "
        "command continues a stopped run there; another run's folder is refused (see --overwrite)")
    overwrite: bool = flag(WHAT, False, "start afresh in an --outputs folder that holds another run's evaluation "
        "(different model, bench, pages or settings): its evaluation files are deleted first")
    jsonl_filter: str | None = flag(WHAT, None, "regex searched (case-insensitive) in JSONL file names; only their "
        "tests are used", metavar="REGEX")
    pages: str | None = flag(WHAT, None, "only pages whose name (<pdf>:<page>) this regex searches into",
        metavar="REGEX")
    exclude_pages: str | None = flag(WHAT, None, "leave out pages whose name (<pdf>:<page>) this regex searches into",
        metavar="REGEX")

    target_longest_image_dim: int = flag(WHAT, DEFAULT_TARGET_LONGEST_IMAGE_DIM, "each page is rendered with its "
        f"longest side this many pixels, as the training command's flag of the same name (default "
        f"{DEFAULT_TARGET_LONGEST_IMAGE_DIM}, olmOCR's); score a model at the size it was trained on (the CPU "
        "recipe's: 448)")

    # ---- how ----------------------------------------------------------------------------------------------------
    backend: str = flag(HOW, "hf", "hf: Hugging Face generate; vllm: vLLM's offline engine on this machine; server: "
        "an OpenAI-compatible endpoint (--server_url)", choices=BACKENDS)
    protocol: str = flag(HOW, "single", "single: one pass per repeat, the model's own answer (the quantity RL "
        "changes); olmocr-pipeline: olmOCR's process_page (temperature per attempt, retries, rotation correction, "
        "text-layer fallback), the protocol of the published leaderboard. Both report the model-only score; the "
        "pipeline also the pipeline's", choices=PROTOCOLS)
    num_samples: int = flag(HOW, 1, "K transcriptions per page (repeat1..repeatK); a test passes when more than half "
        "of its page's K transcriptions pass it, as in olmOCR-bench")
    temperature: float | None = flag(HOW, None, "sampling temperature (--protocol single); default 0 (greedy) for "
        f"K=1, {DEFAULT_SAMPLING_TEMPERATURE} for K>1")
    max_new_tokens: int | None = flag(HOW, None, f"cap on tokens generated per transcription (default "
        f"{DEFAULT_MAX_NEW_TOKENS}; {PIPELINE_MAX_TOKENS} with --protocol olmocr-pipeline, olmOCR's MAX_TOKENS)")
    max_attempts: int | None = flag(HOW, None, f"--protocol olmocr-pipeline: attempts per page (default "
        f"{DEFAULT_MAX_ATTEMPTS}, olmOCR's --max_page_retries)")
    seed: int = flag(HOW, 0, "sampling seed (each request's seed comes from it and the page's name); also the "
        "bootstrap's")
    batch_size: int | None = flag(HOW, None, "--backend hf: pages per generate call (each gives K sequences), "
        "left-padded (default 1)")
    device: str | None = flag(HOW, None, "--backend hf: torch device (default cuda when available, else cpu)")

    # ---- scoring ------------------------------------------------------------------------------------------------
    scoring: str = flag(SCORING, PROJECT_RULE, "olmocr-rl: olmOCR-bench's tests plus this project's near-empty guard "
        "on present/absent; olmocr-bench: exactly as olmocr's scorer (no guard), comparable with the published "
        "leaderboard (docs/evaluate.md)", choices=SCORING_RULES, metavar="RULE")
    bootstrap: int = flag(SCORING, 1000, "bootstrap resamples of pages (and repeats) behind every 95%% interval: "
        "the leaderboard rows of one evaluation, and --compare's B - A")
    json: bool = flag(SCORING, False, "print the result as one JSON object on stdout (alone: everything else goes "
        "to stderr); docs/evaluate.md lists its keys")

    # ---- vllm ---------------------------------------------------------------------------------------------------
    tensor_parallel_size: int | None = flag(VLLM, None, "GPUs per engine (tensor parallel, default 1)")
    data_parallel_size: int | None = flag(VLLM, None, "engine replicas (data parallel, default 1)")
    vllm_dtype: str | None = flag(VLLM, None, "the engine's dtype (default bfloat16 on CUDA, float32 on CPU: as hf)")
    vllm_max_model_len: int = flag(VLLM, MODEL_MAX_CONTEXT, "context length (olmOCR's MODEL_MAX_CONTEXT)")
    vllm_gpu_memory_utilization: float = flag(VLLM, 0.9, "share of GPU memory the engine may take")
    vllm_enforce_eager: bool = flag(VLLM, False, "no torch.compile or graph capture (starts in seconds; slower "
        "decoding)")
    vllm_kv_cache_gib: float | None = flag(VLLM, None, "the engine's KV cache in GiB. Default on CPU: what the "
        "pages in flight need (up to 64 pages x K sequences of prompt + --max_new_tokens tokens), at least one "
        "--vllm_max_model_len sequence, at most half the free memory (VLLM_CPU_KVCACHE_SPACE, when set, wins); on "
        "a GPU, vLLM's own sizing from --vllm_gpu_memory_utilization", metavar="GIB")

    # ---- server -------------------------------------------------------------------------------------------------
    server_url: str | None = flag(SERVER, None, "the endpoint's base URL, e.g. http://127.0.0.1:8000 (POST "
        "/v1/chat/completions; an API key goes in OLMOCR_RL_SERVER_API_KEY)")
    server_model: str | None = flag(SERVER, None, "the model name the server serves (default: --model)")
    server_concurrency: int = flag(SERVER, 8, "requests in flight at most")
    server_timeout: float = flag(SERVER, 600.0, "seconds per request before it counts as timed out")
    server_retries: int = flag(SERVER, 3, "retries of a request after a connection error, a timeout, a 429 or a "
        "5xx, waiting 2, 4, 8... s; then the request counts as failed")
    server_vllm_fields: str = flag(SERVER, "auto", "send vLLM's request fields (top_k, repetition_penalty, "
        "bad_words, skip_special_tokens) that a strict OpenAI server may refuse: auto = when GET /v1/models says the "
        "server is vLLM (owned_by vllm); on; off", choices=SERVER_VLLM_FIELDS)

    # ---- compare ------------------------------------------------------------------------------------------------
    compare: tuple[str, str] | None = flag(COMPARE, None, "compare two evaluation folders of the same tests: the "
        "model-only and pipeline scores per JSONL and per type, B - A with a paired bootstrap 95%% interval over "
        "pages (and repeats), each side's fallbacks, failed requests and missing outputs, a PNG and compare.json",
        nargs=2, metavar=("EVAL_A", "EVAL_B"))
    compare_png: str | None = flag(COMPARE, None, "where the PNG goes (default EVAL_B/compare.png; compare.json "
        "beside it)")


#: Every flag's default (the one place each is written).
DEFAULTS: dict[str, Any] = {name: spec.default for name, _, spec in declared(EvaluateOptions)}


def build_parser() -> argparse.ArgumentParser:
    return declared_parser(
        EvaluateOptions,
        prog="python -m olmocr_rl.evaluate",
        description=(
            "Transcribe every page of an olmOCR-bench folder with a checkpoint, write the outputs in olmOCR-bench's "
            "layout (<pdf stem>_pg<page>_repeat<k>.md, front matter removed) page by page, and score them with the "
            "bench scorer (python -m olmocr_rl.bench.score): per-JSONL, per-type and overall pass rates with "
            "bootstrap intervals, the model-only score and, under olmOCR's pipeline, the pipeline's. Backends: "
            "Hugging Face generate, vLLM's offline engine, or any OpenAI-compatible server. A stopped run (Ctrl-C, "
            "SIGTERM, a kill) continues where it stopped when the same command runs again. --compare EVAL_A EVAL_B "
            "compares two evaluation folders. --config FILE.yaml supplies any flag (the command line wins)."
        ),
        epilog=(
            "Pages are named <pdf under pdfs/>:<page>, e.g. counting.pdf:2 or synth/doc0042_page3.pdf:1. Held-out "
            "evaluation: train on some pages, then score the others with --exclude_pages (or --pages) and the same "
            "regex. Progress goes to stderr, the report (or --json) alone to stdout (docs/evaluate.md)."
        ),
        error_prefix="python -m olmocr_rl.evaluate: ",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags (``--config`` YAML first, the command line on top); a bad flag or file: one error line, exit 2."""
    return parse_declared(argv, build=build_parser)
