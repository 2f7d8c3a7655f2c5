"""Transcribe a bench folder with a checkpoint and score it: the before/after number researchers publish.

    python -m olmocr_rl.evaluate --model out/run/checkpoint-500 --bench bench_data_sample
    python -m olmocr_rl.evaluate --model models/tiny-sft --bench bench_data_sample --num_samples 3 --json
    python -m olmocr_rl.evaluate --model out/run --bench bench_data_sample --pages '^(table|equations)\\.pdf:'
    python -m olmocr_rl.evaluate --model out/lora-run/checkpoint-100 --bench bench_data_sample   # a LoRA adapter

Every selected page of the bench folder is rendered and prompted exactly as in training
(:class:`~olmocr_rl.data.dataset.OlmOCRBenchDataset`), transcribed K times with Hugging Face
``generate`` (CPU or GPU; vLLM is not wired here), and each transcription is written, YAML front matter
removed, in olmOCR-bench's candidate layout::

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
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from olmocr_rl.bench.prepared import PROJECT_RULE, SCORING_RULES
from olmocr_rl.data.dataset import page_key, select_pages

#: Temperature used when sampling K > 1 transcriptions and none is given (the training CLI's default).
DEFAULT_SAMPLING_TEMPERATURE = 0.8
#: Default cap on new tokens: a dense page of olmOCR-bench runs to ~2-3k tokens.
DEFAULT_MAX_NEW_TOKENS = 3000


class EvaluateError(ValueError):
    """A problem the user can fix (flag, folder, model path); the message is one line naming it."""


# --- pages -----------------------------------------------------------------------------------------


def compile_page_regex(flag: str, pattern: str | None) -> re.Pattern | None:
    """``pattern`` compiled, None for None; EvaluateError naming the flag when it is not a regex."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise EvaluateError(f"{flag} {pattern!r} is not a valid regular expression ({exc})") from None


def output_path(outputs: str | os.PathLike, pdf: str, page: int, repeat: int) -> Path:
    """Where olmOCR-bench looks for transcription ``repeat`` (1-based) of ``pdf`` page ``page``.

    ``pdf`` is relative to the bench's ``pdfs/`` and keeps its sub-folders: ``synth/doc.pdf`` page 1,
    repeat 2 -> ``OUTPUTS/synth/doc_pg1_repeat2.md``.
    """
    if repeat < 1:
        raise ValueError(f"repeat is 1-based, got {repeat}")
    stem = os.path.splitext(pdf)[0]
    return Path(outputs) / f"{stem}_pg{page}_repeat{repeat}.md"


# --- sampling --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """How each page is transcribed: ``num_samples`` sequences, greedy or at ``temperature``."""

    num_samples: int
    do_sample: bool
    temperature: float  # 0.0 when greedy

    def describe(self) -> str:
        how = "greedy" if not self.do_sample else f"sampled at temperature {self.temperature:g}"
        return f"{self.num_samples} transcription(s) per page, {how}"


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


def batch_seed(seed: int, first_page: str) -> int:
    """The torch seed of a batch: from the run's seed and its first page's name, not its position."""
    return (seed * 1_000_003 + zlib.crc32(first_page.encode("utf-8"))) % (2**32)


def generation_config(model, processor, sampling: Sampling, max_new_tokens: int):
    """A GenerationConfig with the checkpoint's special tokens and this run's decoding only.

    Plain greedy or plain temperature sampling (top-p 1, no top-k, no repetition penalty), as the
    trainer samples. The checkpoint's own defaults (Qwen2.5-VL ships top_k=1, top_p=0.001,
    repetition_penalty=1.05) would otherwise turn sampling into near-greedy decoding.
    """
    from transformers import GenerationConfig

    stored = model.generation_config
    tokenizer = processor.tokenizer
    eos = stored.eos_token_id if stored.eos_token_id is not None else tokenizer.eos_token_id
    pad = stored.pad_token_id if stored.pad_token_id is not None else tokenizer.pad_token_id
    if pad is None:
        pad = eos[0] if isinstance(eos, list) else eos
    # Every decoding knob is set: unset (None) ones would be filled from the checkpoint's config.
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        num_return_sequences=sampling.num_samples,
        do_sample=sampling.do_sample,
        temperature=sampling.temperature if sampling.do_sample else 1.0,
        top_p=1.0,
        top_k=0 if sampling.do_sample else None,  # greedy ignores it (and warns when it is set)
        repetition_penalty=1.0,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=stored.bos_token_id,
    )


def transcribe_batch(model, processor, items: Sequence[dict], config, seed: int) -> list[list[tuple[str, int, bool]]]:
    """Transcribe dataset items in one ``generate`` call.

    Returns, per item, ``config.num_return_sequences`` tuples ``(raw text, new tokens, hit the
    max_new_tokens cap)``; the text is decoded without special tokens and keeps its front matter.
    Prompts are padded on the left whatever the tokenizer's ``padding_side``.
    """
    import torch

    texts = [processor.apply_chat_template(item["prompt"], add_generation_prompt=True, tokenize=False) for item in items]
    # Left padding: every prompt must end where its generation starts (the tokenizer's default is right).
    inputs = processor(text=texts, images=[item["image"] for item in items], return_tensors="pt", padding=True,
                       padding_side="left")
    inputs = inputs.to(model.device)
    torch.manual_seed(seed)
    with torch.inference_mode():
        sequences = model.generate(**inputs, generation_config=config)
    completions = sequences[:, inputs["input_ids"].shape[1] :].cpu()

    eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    stop_ids = torch.tensor(sorted({t for t in [*eos, config.pad_token_id] if t is not None}))
    results: list[tuple[str, int, bool]] = []
    for row in completions:
        stops = torch.isin(row, stop_ids).nonzero()
        tokens = int(stops[0]) if len(stops) else len(row)
        capped = not len(stops) and len(row) >= config.max_new_tokens
        results.append((processor.tokenizer.decode(row[:tokens], skip_special_tokens=True), tokens, capped))
    k = config.num_return_sequences
    return [results[i * k : (i + 1) * k] for i in range(len(items))]


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


def write_transcriptions(policy, processor, dataset, selected: Sequence[int], config, outputs: Path, *,
                         batch_size: int, seed: int) -> dict:
    """Transcribe the ``selected`` pages in batches and write each in the bench layout under ``outputs``.

    A page's earlier repeat files are removed first (the scorer reads every repeat it finds). One
    progress line per page goes to stderr. Returns ``generated_tokens``, ``capped_samples`` (stopped
    by ``max_new_tokens``) and ``generate_s``.
    """
    from olmocr_rl.bench.score import output_files

    stats = {"generated_tokens": 0, "capped_samples": 0, "generate_s": 0.0}
    for start in range(0, len(selected), batch_size):
        batch = selected[start : start + batch_size]
        samples = [dataset.samples[i] for i in batch]
        names = [page_key(sample["pdf"], sample["page"]) for sample in samples]
        began = time.perf_counter()
        transcriptions = transcribe_batch(policy, processor, [dataset[i] for i in batch], config, batch_seed(seed, names[0]))
        seconds = time.perf_counter() - began
        stats["generate_s"] += seconds
        for position, (sample, name, repeats) in enumerate(zip(samples, names, transcriptions)):
            for old in output_files(outputs, sample["pdf"], sample["page"]):
                old.unlink()
            for k, (text, _tokens, _capped) in enumerate(repeats, start=1):
                path = output_path(outputs, sample["pdf"], sample["page"], k)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(strip_front_matter(text), encoding="utf-8")
            capped = sum(hit_cap for *_, hit_cap in repeats)
            stats["generated_tokens"] += sum(tokens for _, tokens, _ in repeats)
            stats["capped_samples"] += capped
            lengths = "+".join(str(tokens) for _, tokens, _ in repeats)
            _progress(f"[{start + position + 1}/{len(selected)}] {name}: {lengths} tokens"
                      f"{f', {capped} hit the cap' if capped else ''} ({seconds / len(batch):.1f}s)")
    stats["generate_s"] = round(stats["generate_s"], 3)
    return stats


def evaluate(
    model: str,
    bench: str | os.PathLike,
    *,
    outputs: str | os.PathLike | None = None,
    num_samples: int = 1,
    temperature: float | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    jsonl_filter: str | None = None,
    pages: str | None = None,
    exclude_pages: str | None = None,
    batch_size: int = 1,
    seed: int = 0,
    device: str | None = None,
    scoring: str = PROJECT_RULE,
) -> dict:
    """Transcribe the selected pages of ``bench`` with ``model``, write them, score them under ``scoring``
    (``olmocr-rl``, the project's rule, or ``olmocr-bench``, olmocr's scorer's; docs/evaluate.md).

    Returns a JSON-ready dict: the scorer's result (``overall_pass_rate``, ``per_jsonl``,
    ``per_type``, ``missing_outputs``, ``tests``; see :func:`score_outputs`) plus ``model``,
    ``bench``, ``outputs``, ``pages`` (the names transcribed and scored), ``sampling`` (settings),
    ``generated_tokens``, ``capped_samples`` and ``generate_s``. Raises EvaluateError for anything
    the user can fix; every cheap check runs before the model is loaded.
    """
    # 1. Flags, model path, bench folder and page selection: fail before the slow model load.
    sampling = resolve_sampling(num_samples, temperature)
    check_scoring(scoring)
    for flag, value in (("--max_new_tokens", max_new_tokens), ("--batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EvaluateError(f"{flag} must be a positive integer, got {value!r}")
    keep = compile_page_regex("--pages", pages)
    drop = compile_page_regex("--exclude_pages", exclude_pages)
    check_model_path(model)
    dataset, selected = load_bench_pages(bench, jsonl_filter, keep, drop)
    outputs = Path(outputs) if outputs is not None else default_outputs_dir(model, str(bench))

    # 2. Model, then transcriptions in the bench layout.
    policy, processor = load_model(model, device)
    config = generation_config(policy, processor, sampling, max_new_tokens)
    _progress(f"[evaluate] {model} on {len(selected)}/{len(dataset)} pages of {bench}, {sampling.describe()}, "
              f"max {max_new_tokens} new tokens, batches of {batch_size} on {policy.device} -> {outputs}")
    stats = write_transcriptions(policy, processor, dataset, selected, config, outputs, batch_size=batch_size, seed=seed)

    # 3. The bench scorer, on the transcribed pages' tests only.
    chosen = [dataset.samples[i] for i in selected]
    result = score_outputs(bench, outputs, pages=chosen, scoring=scoring)
    result.update(
        model=model,
        bench=str(bench),
        outputs=str(outputs),
        pages=[page_key(sample["pdf"], sample["page"]) for sample in chosen],
        sampling={"num_samples": sampling.num_samples, "do_sample": sampling.do_sample,
                  "temperature": sampling.temperature, "max_new_tokens": max_new_tokens,
                  "batch_size": batch_size, "seed": seed},
        **stats,
    )
    return result


def strip_front_matter(text: str) -> str:
    """The page text olmOCR-bench scores: the completion without its YAML front matter.

    A completion without a parseable front-matter block is kept whole (stripped), as olmOCR treats
    it as page text.
    """
    from olmocr_rl.data.front_matter import split_front_matter

    return split_front_matter(text)[1]


# --- scoring ---------------------------------------------------------------------------------------


def check_scoring(scoring: str) -> None:
    """EvaluateError naming ``--scoring`` for an unknown rule."""
    if scoring not in SCORING_RULES:
        raise EvaluateError(f"--scoring {scoring!r} is not a scoring rule; choose one of {', '.join(SCORING_RULES)}")


def score_outputs(bench: str | os.PathLike, outputs: str | os.PathLike, *, pages: Sequence[dict] | None = None,
                  scoring: str = PROJECT_RULE) -> dict:
    """Score ``outputs`` with the bench scorer (:func:`olmocr_rl.bench.score.score_bench`) under the rule
    ``scoring``; its JSON form, with ``scoring`` (the rule's name) and ``scoring_rule`` (a line describing it).

    ``pages`` (dataset samples: ``pdf``, ``page``, ``test_ids``) restricts the score to those pages'
    tests and to the ``baseline`` tests the scorer adds for their PDFs, so held-out pages and
    ``--jsonl_filter`` runs are not charged for pages they did not transcribe. None scores the whole
    bench exactly as ``python -m olmocr_rl.bench.score --bench BENCH --outputs OUTPUTS`` does.
    Keys: ``overall_pass_rate`` (mean of per-JSONL pass rates), ``per_jsonl``, ``per_type``,
    ``missing_outputs``, ``tests``.
    """
    from olmocr_rl.bench.score import BASELINE_GROUP, BenchScore, UsageError, describe_rule, score_bench

    check_scoring(scoring)
    try:
        result = score_bench(Path(bench), Path(outputs), rule=scoring)
    except UsageError as exc:
        raise EvaluateError(f"scoring {outputs} against {bench}: {str(exc).splitlines()[0]}") from None
    if pages is not None:
        test_ids = {test_id for sample in pages for test_id in sample["test_ids"]}
        names = {page_key(sample["pdf"], sample["page"]) for sample in pages}
        prefixes = tuple(f"{os.path.splitext(sample['pdf'])[0]}_pg{sample['page']}_" for sample in pages)
        result = BenchScore(
            tests=[
                score for score in result.tests
                if score.test.id in test_ids
                or (score.group == BASELINE_GROUP and page_key(score.test.pdf, score.test.page) in names)
            ],
            missing=[pattern for pattern in result.missing if pattern.startswith(prefixes)],
        )
    return {"scoring": scoring, "scoring_rule": describe_rule(scoring), **result.to_json()}


def format_result(result: dict) -> str:
    """The human report: what was run, pass rate per JSONL file and type, and the overall number."""
    sampling = result["sampling"]
    how = "greedy" if not sampling["do_sample"] else f"temperature {sampling['temperature']:g}"
    lines = [
        f"model   {result['model']}",
        f"bench   {result['bench']}: {len(result['pages'])} page(s), {sampling['num_samples']} transcription(s) "
        f"each ({how}, max {sampling['max_new_tokens']} new tokens)",
        f"outputs {result['outputs']}",
        f"scoring {result['scoring_rule']}",
        "",
    ]
    for title, table in (("JSONL", result["per_jsonl"]), ("type", result["per_type"])):
        width = max([len(title), *(len(name) for name in table)])
        lines.append(f"{title:<{width}}  pass rate  passed/total")
        lines += [f"{name:<{width}}  {100 * row['pass_rate']:8.1f}%  {row['passed']}/{row['total']}"
                  for name, row in table.items()]
        lines.append("")
    passed = sum(row["passed"] for row in result["per_jsonl"].values())
    total = sum(row["total"] for row in result["per_jsonl"].values())
    lines.append(f"overall pass rate (mean of per-JSONL pass rates): {100 * result['overall_pass_rate']:.1f}% "
                 f"({passed}/{total} tests)")
    if result["capped_samples"]:
        lines.append(f"note: {result['capped_samples']} transcription(s) stopped at --max_new_tokens "
                     f"{sampling['max_new_tokens']}; raise it if pages are cut off")
    if result["missing_outputs"]:
        lines.append(f"missing outputs (their tests fail): {', '.join(result['missing_outputs'])}")
    return "\n".join(lines)


# --- command line ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.evaluate",
        description=(
            "Transcribe every page of an olmOCR-bench folder with a checkpoint, write the outputs in "
            "olmOCR-bench's layout (<pdf stem>_pg<page>_repeat<k>.md, front matter removed) and score "
            "them with the bench scorer (python -m olmocr_rl.bench.score): per-JSONL and overall pass "
            "rates. Generation is Hugging Face generate on CPU or GPU; vLLM is not wired here."
        ),
        epilog=(
            "Pages are named <pdf under pdfs/>:<page>, e.g. counting.pdf:2 or synth/doc0042_page3.pdf:1. "
            "Held-out evaluation: train on some pages, then score the others with --exclude_pages (or "
            "--pages) and the same regex. Progress goes to stderr, the report (or --json) to stdout."
        ),
    )
    parser.add_argument("--model", required=True,
                        help="checkpoint folder (or s3://bucket/prefix, or a hub id), or a LoRA adapter folder "
                             "(a --use_peft checkpoint, or OUTPUT_DIR/adapter), merged onto its base model first")
    parser.add_argument("--bench", required=True, help="olmOCR-bench folder: *.jsonl test files + pdfs/")
    parser.add_argument("--outputs", default=None,
                        help="folder for the transcriptions (default outputs/eval/<model>__<bench>); "
                             "the selected pages' earlier repeat files there are replaced")
    parser.add_argument("--num_samples", type=int, default=1,
                        help="K transcriptions per page (repeat1..repeatK); a test passes when more than "
                             "half of its page's K transcriptions pass it, as in olmOCR-bench")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature; default 0 (greedy) for K=1, "
                             f"{DEFAULT_SAMPLING_TEMPERATURE} for K>1")
    parser.add_argument("--max_new_tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                        help="cap on tokens generated per transcription (default %(default)s)")
    parser.add_argument("--batch_size", type=int, default=1,
                        help="pages per generate call (each gives K sequences); left-padded")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default %(default)s)")
    parser.add_argument("--jsonl_filter", default=None,
                        help="regex searched (case-insensitive) in JSONL file names; only their tests are used")
    parser.add_argument("--pages", default=None, metavar="REGEX",
                        help="only pages whose name (<pdf>:<page>) this regex searches into")
    parser.add_argument("--exclude_pages", default=None, metavar="REGEX",
                        help="leave out pages whose name (<pdf>:<page>) this regex searches into")
    parser.add_argument("--device", default=None, help="torch device (default cuda when available, else cpu)")
    parser.add_argument("--scoring", default=PROJECT_RULE, metavar="RULE",
                        help="olmocr-rl (default): olmOCR-bench's tests plus this project's near-empty guard on "
                             "present/absent; olmocr-bench: exactly as olmocr's scorer (no guard), comparable with "
                             "the published leaderboard (docs/evaluate.md)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = evaluate(
            args.model,
            args.bench,
            outputs=args.outputs,
            num_samples=args.num_samples,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            jsonl_filter=args.jsonl_filter,
            pages=args.pages,
            exclude_pages=args.exclude_pages,
            batch_size=args.batch_size,
            seed=args.seed,
            device=args.device,
            scoring=args.scoring,
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
