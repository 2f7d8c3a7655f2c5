"""One evaluation, end to end: check, open the folder (resuming a stopped run), transcribe the pages not done yet
(each page's files and record written as it finishes), score, and write the results.

:func:`evaluate` is ``python -m olmocr_rl.evaluate``'s run (and its Python API); docs/evaluate.md describes the
folder, the scores and every key of the result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from olmocr_rl.bench.prepared import PROJECT_RULE
from olmocr_rl.data.dataset import page_key
from olmocr_rl.evaluation.common import EvaluateError, Sampling
from olmocr_rl.evaluation.folder import MODEL_ONLY, EvaluationFolder, model_fingerprint
from olmocr_rl.evaluation.leaderboard import DEFAULT_RESAMPLES
from olmocr_rl.evaluation.options import DEFAULT_MAX_NEW_TOKENS
from olmocr_rl.evaluation.progress import Progress
from olmocr_rl.evaluation.protocol import DEFAULT_MAX_ATTEMPTS, PIPELINE_MAX_TOKENS, run_pipeline, run_single
from olmocr_rl.evaluation.scoring import check_scoring, score_outputs
from olmocr_rl.evaluation.setup import (BackendFlags, build_backend, check_backend_flags, check_model_path,
                                        compile_page_regex, default_outputs_dir, load_bench_pages, resolve_sampling)
from olmocr_rl.evaluation.summary import results

#: Pages per call to the vLLM engine or per round of server requests (the hf backend uses --batch_size).
ENGINE_CHUNK_PAGES = 64


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Plan:
    """What a run settled before anything slow: the pages, how they are sampled, the folder and its identity."""

    model: str
    bench: str
    flags: BackendFlags
    sampling: Sampling
    max_new_tokens: int
    seed: int
    scoring: str
    dataset: object
    selected: list[int]
    folder: EvaluationFolder
    identity: dict

    @property
    def pipeline(self) -> bool:
        return self.flags.protocol == "olmocr-pipeline"

    @property
    def max_attempts(self) -> int | None:
        return (self.flags.max_attempts or DEFAULT_MAX_ATTEMPTS) if self.pipeline else None

    def sample(self, index: int) -> dict:
        return self.dataset.samples[index]

    def key(self, index: int) -> str:
        return page_key(self.sample(index)["pdf"], self.sample(index)["page"])


def plan(model: str, bench, *, outputs, num_samples: int, temperature, max_new_tokens, jsonl_filter, pages,
         exclude_pages, seed: int, scoring: str, flags: BackendFlags, image_dim: int | None = None) -> Plan:
    """Every check that can run before the model loads (one EvaluateError line each), and the run's identity."""
    pipeline = flags.protocol == "olmocr-pipeline"
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
    if image_dim is not None and (isinstance(image_dim, bool) or not isinstance(image_dim, int) or image_dim < 28):
        raise EvaluateError(f"--target_longest_image_dim must be an integer of at least 28 pixels, got {image_dim!r}")
    dataset, selected = load_bench_pages(bench, jsonl_filter, keep, drop, image_dim)
    outputs = Path(outputs) if outputs is not None else default_outputs_dir(model, str(bench))
    keys = [page_key(dataset.samples[i]["pdf"], dataset.samples[i]["page"]) for i in selected]
    local = Path(model).expanduser()
    identity = {
        "model": str(local.resolve()) if local.is_dir() else model, "model_files": model_fingerprint(model),
        "test_set": _tests_digest(bench, [dataset.samples[i] for i in selected]), "pages": keys,
        "protocol": flags.protocol, "backend": flags.backend,
        "server_model": (flags.server_model or model) if flags.backend == "server" else None,
        "num_samples": sampling.num_samples, "temperature": sampling.temperature if not pipeline else None,
        "max_new_tokens": max_new_tokens, "max_attempts": (flags.max_attempts or DEFAULT_MAX_ATTEMPTS) if pipeline
        else None, "seed": seed, "batch_size": (flags.batch_size or 1) if flags.backend == "hf" else None,
        "scoring": scoring, "image_dim": dataset.target_longest_image_dim,
    }
    return Plan(model, str(bench), flags, sampling, max_new_tokens, seed, scoring, dataset, selected,
                EvaluationFolder(outputs, pipeline), identity)


def _tests_digest(bench, samples: Sequence[dict]) -> str:
    """A digest of the selected pages' test definitions as the JSONL files write them (ids and contents)."""
    ids = {test_id for sample in samples for test_id in sample["test_ids"]}
    chosen = []
    for path in sorted(Path(bench).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                test = json.loads(line)
            except ValueError:
                continue
            if isinstance(test, dict) and test.get("id") in ids:
                chosen.append(json.dumps(test, sort_keys=True))
    return hashlib.sha256("\n".join(sorted(chosen)).encode("utf-8")).hexdigest()[:16]


class Verdicts:
    """Each page's tests (its own, and the baseline test the scorer adds for its PDF) run on its transcriptions as
    the page finishes, for its record and the progress line; the final scores come from the scorer."""

    def __init__(self, bench: str, scoring: str):
        from olmocr_rl.bench.score import BASELINE_GROUP, load_bench_tests

        self.scoring, self.by_page, self.baseline = scoring, {}, BASELINE_GROUP
        for test, group in load_bench_tests(Path(bench)):
            self.by_page.setdefault(page_key(test.pdf, test.page), []).append((test, group))

    def __call__(self, sample: dict, texts: Sequence[str | None]) -> dict[str, list[bool]]:
        from olmocr_rl.bench.page import evaluate_page

        ids = set(sample["test_ids"])
        tests = [test for test, group in self.by_page.get(page_key(sample["pdf"], sample["page"]), [])
                 if test.id in ids or group == self.baseline]
        out: dict[str, list[bool]] = {test.id: [] for test in tests}
        for text in texts:
            if text is not None:  # a failed request: no file, no verdict
                for test, passed, _ in evaluate_page(tests, text, self.scoring):
                    out[test.id].append(passed)
        return out


def page_record(sample: dict, transcriptions: Sequence, verdicts: Verdicts, pipeline: bool) -> dict:
    scored = [None if t.outcome == "error" else t.text for t in transcriptions]
    record = {"page": page_key(sample["pdf"], sample["page"]), "pdf": sample["pdf"], "page_number": sample["page"],
              "repeats": [t.record() for t in transcriptions], "verdicts": verdicts(sample, scored),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if pipeline and any(t.model_text is not None for t in transcriptions):
        record["model_only_verdicts"] = verdicts(sample, [None if t.outcome == "error" else t.model_only_text
                                                          for t in transcriptions])
    return record


def page_note(record: dict, pipeline: bool) -> str:
    """The progress line's note for a finished page: what produced each repeat, and its tests passed."""
    repeats = record["repeats"]
    if pipeline:
        what = ", ".join(f"{r['outcome']} after {r['attempts']} attempt(s)" for r in repeats)
    else:
        capped = sum(r["finish"] == "length" for r in repeats)
        failed = sum(r["outcome"] == "error" for r in repeats)
        what = ("+".join(str(r["tokens"]) for r in repeats) + " tokens" + (f", {capped} hit the cap" if capped else "")
                + (f", {failed} failed" if failed else ""))
    verdicts = record["verdicts"].values()
    passed = sum(sum(v) > len(v) / 2 for v in verdicts if v)
    return f"{record['page']}: {what}; {passed}/{len(verdicts)} tests passed"


def transcribe(backend, run: Plan, records: dict[str, dict], progress: Progress) -> None:
    """The pages without a record, in fixed chunks of the whole selection (hf: --batch_size pages, re-run whole so
    that a resumed batch has the same seed and padding; vllm and server: 64 pages, the missing ones), each page
    written as it finishes."""
    verdicts = Verdicts(run.bench, run.scoring)
    size = (run.flags.batch_size or 1) if backend.name == "hf" else ENGINE_CHUNK_PAGES
    for start in range(0, len(run.selected), size):
        chunk = run.selected[start : start + size]
        undone = [i for i in chunk if run.key(i) not in records]
        if not undone:
            continue
        batch = chunk if backend.name == "hf" else undone
        for i in undone:
            run.folder.clear_page(run.sample(i)["pdf"], run.sample(i)["page"])
        items = [run.dataset[i] for i in batch]
        keys = [run.key(i) for i in batch]

        def page_done(j: int, transcriptions: list, batch=batch) -> None:
            key = run.key(batch[j])
            if key in records:  # done by an earlier session (its batch re-run): the same transcriptions, kept
                return
            record = page_record(run.sample(batch[j]), transcriptions, verdicts, run.pipeline)
            run.folder.write_page(record, transcriptions)
            records[key] = record
            progress.page_done(page_note(record, run.pipeline))

        if run.pipeline:
            run_pipeline(backend, items, keys, num_samples=run.sampling.num_samples, max_attempts=run.max_attempts,
                         max_tokens=run.max_new_tokens, seed=run.seed, page_done=page_done, progress=progress)
        else:
            run_single(backend, items, keys, num_samples=run.sampling.num_samples,
                       temperature=run.sampling.temperature, max_tokens=run.max_new_tokens, seed=run.seed,
                       page_done=page_done)


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
    overwrite: bool = False,
    resamples: int = DEFAULT_RESAMPLES,
    image_dim: int | None = None,
) -> dict:
    """Transcribe the selected pages of ``bench`` with ``model`` and score them (docs/evaluate.md).

    ``flags`` chooses the backend and protocol (default: Hugging Face ``generate``, one pass); ``backend`` (tests,
    benchmarks) is an already built one to use instead of building it. The evaluation folder gets each page's
    transcriptions and record as it finishes; an earlier session of the same run there is continued (another run's
    folder is refused unless ``overwrite``). Returns a JSON-ready dict: the scorer's result (``overall_pass_rate``,
    ``per_jsonl``, ``per_type``, ``missing_outputs``, ``tests``), ``model_only``, ``leaderboard`` and
    ``evaluation.json``'s keys. Raises EvaluateError for anything the user can fix, before the model loads; an
    exception that stops the run (KeyboardInterrupt, lifetime.Stopped) carries ``pages_done``, ``pages_total``
    and ``outputs``.
    """
    flags = flags or BackendFlags(device=device, batch_size=batch_size)
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 10:
        raise EvaluateError(f"--bootstrap must be an integer >= 10, got {resamples!r}")
    run = plan(model, bench, outputs=outputs, num_samples=num_samples, temperature=temperature,
               max_new_tokens=max_new_tokens, jsonl_filter=jsonl_filter, pages=pages, exclude_pages=exclude_pages,
               seed=seed, scoring=scoring, flags=flags, image_dim=image_dim)
    owned = backend is None
    if owned and flags.backend == "server":  # checked (reachable, serves the model) before the folder is touched
        backend = build_backend(run.model, flags, run.seed, note=note)
    records = run.folder.open(run.identity, overwrite=overwrite,
                              about={"bench": str(Path(bench).resolve()), "argv": sys.argv[1:]})
    records = {key: records[key] for key in map(run.key, run.selected) if key in records}
    note(f"[evaluate] {model} on {len(run.selected)}/{len(run.dataset)} pages of {bench} with --backend "
         f"{flags.backend} --protocol {flags.protocol}, "
         f"{run.sampling.describe() if not run.pipeline else 'olmOCR pipeline'}, max {run.max_new_tokens} new tokens "
         f"-> {run.folder.path}")
    if len(records) == len(run.selected):
        note(f"[evaluate] {run.folder.path}: all {len(records)} pages were done by an earlier run of this command "
             "(pages.jsonl); scoring them")
    elif records:
        note(f"[evaluate] continuing {run.folder.path}: {len(records)} of {len(run.selected)} pages done by an "
             f"earlier run (pages.jsonl); transcribing the other {len(run.selected) - len(records)}")
    resumed, seconds = len(records), 0.0
    if len(records) < len(run.selected):
        kv_bytes = _kv_cache(run) if backend is None and flags.backend == "vllm" else None
        try:
            seconds = _transcribe_missing(run, records, backend, kv_bytes, owned)
        except BaseException as exc:  # a stop (signal, Ctrl-C) or a failure: what is done stays on disk
            done = run.folder.records()  # from disk: a page written just before the stop counts
            exc.pages_done = sum(run.key(i) in done for i in run.selected)
            exc.pages_total, exc.outputs = len(run.selected), str(run.folder.path)
            raise
    return results(run, [records[run.key(i)] for i in run.selected], resumed=resumed, seconds=seconds,
                   resamples=resamples, score=score_outputs, model_only_folder=MODEL_ONLY)


def _kv_cache(run: Plan) -> int | None:
    from olmocr_rl.evaluation.engine_memory import kv_cache_bytes

    size, line = kv_cache_bytes(run.model, run.flags, pages=len(run.selected), repeats=run.sampling.num_samples,
                                max_new_tokens=run.max_new_tokens, image_dim=run.dataset.target_longest_image_dim,
                                chunk_pages=ENGINE_CHUNK_PAGES)
    if line:
        note(f"[evaluate] {line}")
    return size


def _transcribe_missing(run: Plan, records: dict, backend, kv_bytes: int | None, owned: bool) -> float:
    """Build the backend (unless given), transcribe the pages without a record, close it; the seconds transcribing
    took (the backend's start not counted)."""
    from olmocr_rl.evaluation.lifetime import ChildGuard

    # built here (owned): closed here (the vLLM engine's memory is freed, its processes stopped)
    guard = ChildGuard() if owned and run.flags.backend == "vllm" else contextlib.nullcontext()
    with guard:
        backend = backend or build_backend(run.model, run.flags, run.seed, kv_cache_bytes=kv_bytes, note=note)
        progress = Progress(len(run.selected), resumed=len(records), repeats=run.sampling.num_samples,
                            max_attempts=run.max_attempts)
        try:
            transcribe(backend, run, records, progress)
            return time.perf_counter() - progress.started
        finally:
            progress.close()
            if owned:
                backend.close()
