"""Transcribe a bench folder with a checkpoint and score it: the before/after number researchers publish.

    python -m olmocr_rl.evaluate --model out/run/checkpoint-500 --bench bench_data_sample
    python -m olmocr_rl.evaluate --model models/tiny-sft --bench bench_data_sample --num_samples 3 --json
    python -m olmocr_rl.evaluate --model out/run --bench bench_data_sample --pages '^(table|equations)\\.pdf:'
    python -m olmocr_rl.evaluate --model out/lora-run/checkpoint-100 --bench bench_data_sample   # a LoRA adapter
    python -m olmocr_rl.evaluate --model out/run --bench bench_data --backend vllm --protocol olmocr-pipeline
    python -m olmocr_rl.evaluate --model out/run --bench bench_data --backend server --server_url http://127.0.0.1:8000
    python -m olmocr_rl.evaluate --config eval.yaml                 # any flag as a YAML key, as the trainer's
    python -m olmocr_rl.evaluate --compare outputs/eval/base__bench_data outputs/eval/run__bench_data

Every selected page of the bench folder is rendered and prompted exactly as in training
(:class:`~olmocr_rl.data.dataset.OlmOCRBenchDataset`), transcribed K times by a backend (``--backend hf``:
Hugging Face ``generate``; ``vllm``: vLLM's offline engine; ``server``: an OpenAI-compatible endpoint) under a
protocol (``--protocol single``: one pass; ``olmocr-pipeline``: olmOCR's retries, rotation correction and
text-layer fallback; :mod:`olmocr_rl.evaluation`), and each transcription is written, YAML front matter
removed, in olmOCR-bench's candidate layout as its page finishes, with the page's record in ``pages.jsonl``::

    OUTPUTS/<pdf stem>_pg<page>_repeat<k>.md          k = 1..K
    OUTPUTS/<sub>/<pdf stem>_pg<page>_repeat<k>.md    for pdfs/<sub>/<stem>.pdf

A run stopped by Ctrl-C, SIGTERM or a kill continues where it stopped when the same command runs again (a folder
holding another run is refused unless ``--overwrite``). The folder is then scored by the bench scorer
(:mod:`olmocr_rl.bench.score`): per-JSONL pass rates and their mean, as olmOCR-bench reports, with bootstrap
intervals (the leaderboard rows). Under the pipeline, the pipeline's score (fallback pages read from the PDF's text
layer, as olmOCR publishes) and the model-only score (those pages read as the model's last usable answer, or empty)
are both reported. ``--scoring`` names the test rule: ``olmocr-rl`` (default: olmOCR-bench's tests plus this
project's near-empty guard on present/absent) or ``olmocr-bench`` (olmocr's scorer, no guard).

Pages are named ``<pdf>:<page>`` with ``<pdf>`` relative to ``pdfs/`` (``counting.pdf:2``,
``synth/doc0042_page3.pdf:1``); ``--pages`` keeps the pages whose name a regex matches (``re.search``)
and ``--exclude_pages`` drops them, so a run can be scored on pages held out from training. Only the
tests of the selected pages are scored.

Sampling: greedy when K = 1 and no temperature is given; otherwise pure temperature sampling (top-p
1, no top-k, no repetition penalty: the checkpoint's ``generation_config`` sampling settings are
overridden, as in training). Each batch is seeded from ``--seed`` and the name of its first page,
so with ``--batch_size 1`` a page's transcriptions do not depend on which other pages are selected.

Exit status: 0; 2 for a problem the user can fix (one ``error:`` line, before the model loads); 1 when every
request failed (the scores are then not the model's); 128 + the signal's number after SIGTERM (143) or SIGINT
(130), what was done kept.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from olmocr_rl.data.dataset import page_key, select_pages  # noqa: F401  (public here)
from olmocr_rl.evaluation.backends import generation_config, transcribe_batch  # noqa: F401  (public here too)
from olmocr_rl.evaluation.common import EvaluateError, Sampling, batch_seed, output_path, strip_front_matter  # noqa: F401
from olmocr_rl.evaluation.options import DEFAULT_MAX_NEW_TOKENS, DEFAULT_SAMPLING_TEMPERATURE  # noqa: F401
from olmocr_rl.evaluation.options import build_parser, parse_args  # noqa: F401
from olmocr_rl.evaluation.run import ENGINE_CHUNK_PAGES, evaluate  # noqa: F401
from olmocr_rl.evaluation.scoring import check_scoring, format_result, score_outputs  # noqa: F401
from olmocr_rl.evaluation.setup import (BackendFlags, check_backend_flags, check_model_path,  # noqa: F401
                                        compile_page_regex, default_outputs_dir, load_bench_pages, load_model,
                                        resolve_sampling)

PROG = "python -m olmocr_rl.evaluate"


def every_request_failed(result: dict) -> str | None:
    """The error line when an evaluation's every request failed (its scores are then not the model's), else None."""
    if not result.get("requests") or result.get("failed_requests") != result["requests"]:
        return None
    first = f"; the first: {result['first_failure']}" if result.get("first_failure") else ""
    return (f"every request failed ({result['failed_requests']} of {result['requests']}{first}): the scores above "
            "are not the model's; fix the backend (the server, its URL or model name) and run the same command "
            "again, which retries the failed pages")


def _stopped_line(exc: BaseException, how: str) -> str:
    done, total, outputs = (getattr(exc, name, None) for name in ("pages_done", "pages_total", "outputs"))
    if total is None:
        return f"{PROG}: stopped by {how} before any page was transcribed; nothing was written"
    return (f"{PROG}: stopped by {how}: {done} of {total} pages done and kept in {outputs}; the same command "
            "continues with the others")


def _evaluate(args) -> dict:
    for flag, value in (("--model", args.model), ("--bench", args.bench)):
        if value is None:
            raise EvaluateError(f"{flag} is required (unless --compare EVAL_A EVAL_B)")
    return evaluate(
        args.model, args.bench, outputs=args.outputs, num_samples=args.num_samples, temperature=args.temperature,
        max_new_tokens=args.max_new_tokens, jsonl_filter=args.jsonl_filter, pages=args.pages,
        exclude_pages=args.exclude_pages, seed=args.seed, scoring=args.scoring, flags=BackendFlags.from_args(args),
        overwrite=args.overwrite, resamples=args.bootstrap, image_dim=args.target_longest_image_dim)


def main(argv: Sequence[str] | None = None) -> int:
    from olmocr_rl.evaluation.lifetime import Stopped, stdout_to_stderr, stop_signals

    try:
        args = parse_args(None if argv is None else list(argv))
    except SystemExit as exc:  # --help, or a bad flag (its one error line is printed)
        return exc.code if isinstance(exc.code, int) else 0
    try:
        with stop_signals(), stdout_to_stderr():  # the report (or --json) alone on stdout, printed below
            if args.compare:
                from olmocr_rl.evaluation.compare import compare

                result = compare(args.compare, png=args.compare_png, resamples=args.bootstrap, seed=args.seed)
            else:
                result = _evaluate(args)
    except EvaluateError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except Stopped as exc:
        print(_stopped_line(exc, exc.args[0]), file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt as exc:  # SIGINT outside the handler's reach (e.g. another thread installed its own)
        print(_stopped_line(exc, "SIGINT"), file=sys.stderr)
        return 130
    if args.compare:
        from olmocr_rl.evaluation.compare import format_compare

        print(json.dumps(result, indent=2) if args.json else format_compare(result))
        if not args.json:
            print(f"plot: {result['png']}; table: {result['json']}", file=sys.stderr)
        return 0
    print(json.dumps(result, indent=2) if args.json else format_result(result))
    failed = every_request_failed(result)
    if failed:
        print(f"{PROG}: error: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
