"""The bench folder synth writes: the page plan, shards, whole-page writes, the JSONL, the manifest, merge, and the
post-condition.

Layout (olmOCR-bench's): ``<out>/<subset>.jsonl``, ``<out>/pdfs/<subset>/<stem>.pdf``, references where
``data.references.reference_path`` looks (``<out>/claude_original/<subset>/<stem>_page1_pg1_repeat1.md``), and
``<out>/synth_manifest.json``. A subset is ``--name`` for the HTML files at the top of ``--html`` and
``<name>_<sub>_<folder>`` for those in sub-folders. A shard ``K/N`` writes ``<subset>.shard-K-of-N.jsonl`` and
``synth_manifest.shard-K-of-N.json`` instead, so N shards can share one folder; ``--merge`` joins them.
Every file is written to a temporary name (``.NAME.tmp-PID``) and renamed, so none is ever half-written; the
temporary file is removed however the write ends (a full disk, a signal), and a run holding the whole folder
removes any left by a killed run. A page's JSONL lines are written only after its PDF and reference are.
A run locks its folder (:func:`out_lock`): one run, or the shards of one run, at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from olmocr_rl.bench import evaluate_page, load_tests
from olmocr_rl.bench.prepared import SCORING_RULES
from olmocr_rl.data.references import REFERENCE_FOLDER, find_reference, reference_path
from olmocr_rl.data.front_matter import split_front_matter

from .pipeline import PageJob, PageResult

__all__ = ["plan_pages", "take_shard", "parse_shard", "check_out_dir", "write_page", "write_outputs", "merge_shards",
           "verify_folder", "out_lock", "remove_temp_files", "MANIFEST", "SETTINGS", "OutputError"]

MANIFEST = "synth_manifest.json"
LOCK = ".synth.lock"
SETTINGS = {"seed": "--seed", "name": "--name", "caps": "--cap", "types": "--types", "max_html_mb": "--max_html_mb"}
_SHARD_FILE = re.compile(r"^(?P<subset>.+)\.shard-(?P<k>\d+)-of-(?P<n>\d+)\.jsonl$")
_TEMP_FILE = re.compile(r"^\..+\.tmp-\d+$")


class OutputError(ValueError):
    """An output folder or plan that cannot be used (one line, with the fix)."""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "page"


def plan_pages(html_dir: str | os.PathLike, name: str) -> list[PageJob]:
    """Every ``*.html`` (and ``*.htm``) under ``html_dir``, sorted by path, as page jobs."""
    root = Path(html_dir)
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in (".html", ".htm") and p.is_file())
    jobs, seen = [], {}
    for path in files:
        rel = path.relative_to(root)
        subset = "_".join([_safe(name)] + [_safe(part) for part in rel.parts[:-1]])
        stem = _safe(path.stem)
        pdf = f"{subset}/{stem}.pdf"
        if pdf in seen:
            raise OutputError(f"{rel} and {seen[pdf]} both become {pdf}; rename one of them")
        seen[pdf] = rel
        jobs.append(PageJob(str(path), str(rel), subset, pdf, f"{subset}_{stem}"))
    return jobs


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` → (K, N) with 1 ≤ K ≤ N; OutputError otherwise."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise OutputError(f"--shard {text!r}: give K/N with 1 <= K <= N, e.g. --shard 2/8")
    return int(match.group(1)), int(match.group(2))


def take_shard(jobs: list[PageJob], shard: tuple[int, int] | None) -> list[PageJob]:
    """Shard K of N: every N-th page from the (K-1)-th, in the sorted order (the same on every machine)."""
    if shard is None:
        return jobs
    k, n = shard
    return jobs[k - 1::n]


def check_out_dir(out: Path) -> None:
    """The folder is new, empty, or one synth wrote (a rerun or another shard); not another bench; not under a
    file."""
    for above in out.parents:
        if above.exists() and not above.is_dir():
            raise OutputError(f"--out {out}: {above} is a file, not a folder; give a path under a folder")
        if above.exists():
            break
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(f"--out {out} is a file; give a folder")
    jsonls = list(out.glob("*.jsonl"))
    manifests = list(out.glob("synth_manifest*.json"))
    if jsonls and not manifests:
        raise OutputError(f"--out {out} already holds another bench ({jsonls[0].name}, no {MANIFEST}); "
                          "give a new or empty folder")


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk, a signal: no temporary file is left behind
        tmp.unlink(missing_ok=True)
        raise


def remove_temp_files(out: Path) -> int:
    """Remove the ``.NAME.tmp-PID`` files a killed run left in ``out`` (only while holding the whole folder)."""
    removed = 0
    for path in out.rglob(".*.tmp-*"):
        if _TEMP_FILE.match(path.name) and path.is_file():
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _flock(path: Path, shared: bool):
    """An open file locked (shared or exclusive, without waiting), or None when another process holds it."""
    import fcntl

    handle = open(path, "a+")
    try:
        fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "a run that left no record"
    except OSError:
        return "a run that left no record"


def _shard_lock(out: Path, shard: tuple[int, int]) -> Path:
    return out / f".synth.shard-{shard[0]}-of-{shard[1]}.lock"


def _who(out: Path) -> str:
    """Who holds the whole folder: a run (its record), or shard runs (theirs)."""
    probe = _flock(out / LOCK, shared=True)
    if probe is None:
        return _holder(out / LOCK)
    probe.close()
    running = []
    for path in sorted(out.glob(".synth.shard-*.lock")):
        free = _flock(path, shared=False)
        if free is None:
            running.append(_holder(path))
        else:
            free.close()
    return "shard run(s): " + ("; ".join(running) or "ending")


@contextlib.contextmanager
def out_lock(out: Path, shard: tuple[int, int] | None) -> Iterator[None]:
    """Hold ``out`` for this run: the whole folder (a run, ``--merge``), or, for shard K of N, the folder shared
    with the other shards and shard K alone. OutputError, naming the holder, when another live run has it; the
    kernel drops the lock however the process ends. Creates ``out`` (OutputError when it cannot)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        main = _flock(out / LOCK, shared=shard is not None)
        part = _flock(_shard_lock(out, shard), shared=False) if shard and main else None
    except OSError as error:
        from olmocr_rl.storage.files import describe_write_failure

        reason = describe_write_failure(error, out, None) or f"{error.strerror or error}"
        raise OutputError(f"--out {out}: cannot write there ({reason}); give a folder this run can write in") from None
    if main is None or (shard and part is None):
        who = _who(out) if main is None else _holder(_shard_lock(out, shard))
        if main is not None:
            main.close()
        raise OutputError(f"--out {out} is in use by another synth run ({who}); wait for it to end or give "
                          "another folder")
    mine = part or main
    mine.seek(0)
    mine.truncate()
    mine.write(f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: "
               f"{' '.join(sys.argv)}\n")
    mine.flush()
    try:
        yield
    finally:
        for handle in (part, main):
            if handle is not None:
                handle.close()


def write_page(out: Path, result: PageResult) -> None:
    """The page's PDF and reference, each whole (the PDF removed again if the reference cannot be written)."""
    pdf_path = out / "pdfs" / result.job.pdf
    _atomic_write(pdf_path, result.pdf or b"")
    try:
        _atomic_write(reference_path(out, result.job.pdf, 1), result.reference.encode("utf-8"))
    except BaseException:  # a full disk, a signal: no PDF without its reference
        pdf_path.unlink(missing_ok=True)
        raise


def _suffix(shard: tuple[int, int] | None) -> str:
    return f".shard-{shard[0]}-of-{shard[1]}" if shard else ""


def counts_by_type(tests: list[dict]) -> dict[str, int]:
    return dict(sorted(Counter(t["type"] for t in tests).items()))


def write_outputs(out: Path, results: list[PageResult], manifest: dict, shard: tuple[int, int] | None) -> list[Path]:
    """The JSONL file of each subset (its pages in plan order) and the manifest; the JSONL paths."""
    by_subset: dict[str, list[str]] = {}
    for result in results:
        lines = by_subset.setdefault(result.job.subset, [])
        lines += [json.dumps(t, ensure_ascii=False) for t in result.tests]
    written = []
    for subset, lines in sorted(by_subset.items()):
        path = out / f"{subset}{_suffix(shard)}.jsonl"
        _atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))
        written.append(path)
    _atomic_write(out / f"synth_manifest{_suffix(shard)}.json",
                  (json.dumps(manifest, indent=1, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    return written


def merge_shards(out: Path) -> list[Path]:
    """Join ``*.shard-K-of-N.jsonl`` into ``<subset>.jsonl`` and the shard manifests into one; the JSONL paths.

    Every shard 1..N must be present (OutputError naming the missing ones otherwise)."""
    parts: dict[str, dict[int, Path]] = {}
    totals = set()
    for path in sorted(out.glob("*.jsonl")):
        match = _SHARD_FILE.match(path.name)
        if match:
            parts.setdefault(match.group("subset"), {})[int(match.group("k"))] = path
            totals.add(int(match.group("n")))
    manifests = sorted(out.glob("synth_manifest.shard-*-of-*.json"))
    if not parts and not manifests:
        raise OutputError(f"--merge: no shard files (*.shard-K-of-N.jsonl) in {out}")
    if len(totals) > 1:
        raise OutputError(f"--merge: shards of different counts N in {out} ({sorted(totals)}); keep one run's")
    n = totals.pop() if totals else len(manifests)
    have = {int(re.search(r"shard-(\d+)-of", p.name).group(1)) for p in manifests}
    missing = sorted(set(range(1, n + 1)) - have)
    if missing:
        raise OutputError(f"--merge: shard(s) {missing} of {n} missing in {out} (their manifests); run them first")
    manifests.sort(key=lambda p: int(re.search(r"shard-(\d+)-of", p.name).group(1)))
    _same_settings([json.loads(p.read_text(encoding="utf-8")) for p in manifests], out)
    written = []
    for subset, files in sorted(parts.items()):
        lines = [line for k in sorted(files) for line in files[k].read_text(encoding="utf-8").splitlines() if line]
        lines.sort(key=lambda line: json.loads(line)["pdf"])  # stable: each page keeps its tests' order
        path = out / f"{subset}.jsonl"
        _atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))
        written.append(path)
    merged = _merge_manifests([json.loads(p.read_text(encoding="utf-8")) for p in manifests])
    _atomic_write(out / MANIFEST, (json.dumps(merged, indent=1, ensure_ascii=False, sort_keys=True) + "\n").encode())
    for files in parts.values():
        for path in files.values():
            path.unlink()
    for path in manifests:
        path.unlink()
    return written


def _same_settings(parts: list[dict], out: Path) -> None:
    """OutputError naming each setting (``--seed``, ``--cap``, ...) on which the shards' manifests differ."""
    differ = []
    for key, flag in SETTINGS.items():
        values = [p.get(key) for p in parts]
        if any(v != values[0] for v in values):
            if isinstance(values[0], dict):  # caps: only the entries that differ
                keys = sorted({k for v in values for k in (v or {}) if len({json.dumps((w or {}).get(k)) for w in values}) > 1})
                values = [",".join(f"{k}={(v or {}).get(k)}" for k in keys) for v in values]
            shown = "; ".join(f"shard {p.get('shard', '?')}: {v}" for p, v in zip(parts, values))
            differ.append(f"{flag} ({shown})")
    if differ:
        raise OutputError(f"--merge: the shards in {out} were made with different settings: {', '.join(differ)}; "
                          "make every shard with the same flags (rerun the odd ones)")


def _merge_manifests(parts: list[dict]) -> dict:
    merged = dict(parts[0]) if parts else {}
    merged.pop("shard", None)
    for key in ("pages", "skipped_pages", "dropped_tests"):
        merged[key] = sorted((x for p in parts for x in p.get(key, [])), key=lambda x: json.dumps(x, sort_keys=True))
    for key in ("tests_by_type", "dropped_by_reason"):
        total: Counter = Counter()
        for p in parts:
            total.update(p.get(key, {}))
        merged[key] = dict(sorted(total.items()))
    merged["tests"] = sum(p.get("tests", 0) for p in parts)
    return merged


def verify_folder(out: Path, jsonls: list[Path]) -> list[str]:
    """The post-condition: ``validate_bench`` passes on these JSONL files and every test passes on its own
    reference under both scoring rules. The problems found (empty when all holds)."""
    from olmocr_rl.data.validation import validate_bench_folder

    if not jsonls:
        return [f"no JSONL file was written in {out}"]
    pattern = "^(" + "|".join(re.escape(p.name) for p in jsonls) + ")$"
    report = validate_bench_folder(str(out), pattern, None)
    problems = [str(p) for p in report.problems]
    for path in jsonls:
        for test in load_tests(path):
            reference = find_reference(out, test.pdf, test.page)
            if reference is None:
                problems.append(f"{test.id}: no reference in {REFERENCE_FOLDER}/")
                continue
            body = split_front_matter(reference)[1]
            for rule in SCORING_RULES:
                (_, passed, why), = evaluate_page([test], body, rule)
                if not passed:
                    problems.append(f"{test.id}: fails on its own reference under --scoring {rule}: {why}")
    return problems
