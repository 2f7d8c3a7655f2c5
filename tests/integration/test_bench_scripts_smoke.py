"""Every script in scripts/bench/ runs to the end at its smallest size, so a benchmark cannot break unseen.

The test is parametrized over the files found in scripts/bench/: a new script without an entry in ``SMOKE`` (or, for
a module the scripts import, ``LIBRARIES``) fails here until it gets one. Each entry gives the smallest arguments
that still run every arm of the script, and a piece of text its report must print. Scripts run in this process
(``runpy``, as ``python script.py ...`` would, without paying the imports again) unless the entry asks for a process
of their own: a script that pins its process to a CPU, or one that needs another environment. Scripts that need
vLLM, the ``olmocr`` package or the real olmOCR-bench sample in ../shared skip, saying so, where those are absent.
The figures they print at this size mean nothing; only that they run and report.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import warm_python

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "scripts" / "bench"
SHARED_SAMPLE = REPO.parent / "shared" / "olmocr-bench-sample"


@dataclass(frozen=True)
class Smoke:
    args: tuple[str, ...]  # {tmp}: the test's folder, {shared}: ../shared's sample, {model}: the session's tiny model
    expect: str  # text the script's output must contain
    own_process: bool = False
    needs: str | None = None  # "vllm", "olmocr" (the reference package), "shared" or "browser" (synth's set-up)


SMOKE = {
    "bench_checkpoint_verify.py": Smoke(("--weights-mb", "1", "--optimizer-mb", "2", "--repeats", "1",
                                         "--dir", "{tmp}"), "x the save"),
    "bench_grad_checkpointing.py": Smoke(("--shape", "tiny", "--side", "224", "--rows", "1", "--tokens", "8",
                                     "--repeats", "1"), "vision"),
    "bench_cli_overhead.py": Smoke(("--model", "{model}", "--reps", "1", "--steps", "2", "--max_completion_length",
                                    "4", "--num_generations", "2", "--image_dim", "224", "--per_device_train_batch_size",
                                    "1", "--released_pixels", "--write-doc", "{tmp}/cli_overhead.md"),
                                   "2 completions of at most 4 tokens, 1 a micro-batch"),
    # The hf arm only here: the vLLM arms (engine and `vllm serve`) run where vLLM is installed.
    "bench_evaluate.py": Smoke(("--model", "{model}", "--backends", "hf", "--pages", "^counting.pdf:1$",
                                "--max_new_tokens", "4", "--work", "{tmp}"), "hf batch=1"),
    "bench_frozen_vision.py": Smoke(("--depth", "2", "--hidden", "32", "--heads", "1", "--side", "224",
                                     "--num_generations", "2", "--micro_batches", "1", "--completion", "2",
                                     "--steps", "2", "--rounds", "1"), "LoRA (tower frozen + cache)"),
    "bench_generation.py": Smoke(("--shape", "tiny", "--side", "224", "--copies", "2", "--tokens", "4",
                                  "--repeats", "1", "--skip_compiled"), "static cache, bucketed"),
    "bench_is_lengths.py": Smoke(("--work", "{tmp}", "--steps", "1", "--generations", "2", "--max_length", "16",
                                  "--sft_steps", "1"), "sequence_mask", needs="vllm"),
    "bench_padding_free.py": Smoke(("--shape", "tiny", "--side", "224", "--rows", "2", "--shortest", "4",
                                    "--longest", "8", "--repeats", "1"), "--padding_free"),
    "bench_page_processing.py": Smoke(("--side", "224", "--copies", "2", "--repeats", "1"), "--share_page_processing"),
    "bench_render.py": Smoke(("--folder", "bench_data_sample", "--target", "224", "--repeats", "1"), "ours total:"),
    "bench_rewards.py": Smoke(("--bench_folder", "bench_data_sample", "--generations", "2", "--workers", "1"),
                              "workers=1"),
    # It pins its process to one CPU: its own process, not pytest's.
    # The vLLM server on one core, the trainer on another: the vLLM lane runs it (test_vllm_server.py).
    "bench_server_phases.py": Smoke(("--model", "{model}", "--lengths", "4", "--steps", "2"), "generate",
                                    own_process=True, needs="vllm"),
    "bench_synth.py": Smoke(("--pages", "2", "--jobs", "1", "--work", "{tmp}"), "pages/s", needs="browser"),
    # It runs under olmOCR's own package (another environment) with olmocr_rl on the path.
    "compare_olmocr_synth.py": Smoke((), "total", own_process=True, needs="olmocr"),
    # The peak-memory runs (a process per arm, 8 s of imports each) are left out here.
    "bench_shared_prefix.py": Smoke(("--model_shape", "{model}", "--shapes", "demo", "--side", "224", "--generations", "2", "--completion", "4",
                                     "--per_device_train_batch_size", "1", "--repeats", "1", "--skip_memory",
                                     "--work", "{tmp}"), "1 a micro-batch (2 micro-steps)"),
    "bench_shared_prefill.py": Smoke(("--model_shape", "{model}", "--shapes", "demo", "--side", "224", "--generations",
                                      "2", "--completion", "4", "--repeats", "1", "--work", "{tmp}"),
                                     "ids equal to the stock arm's: True"),
    "bench_tests.py": Smoke(("--bench", "{shared}", "--copies", "1", "--passes", "1"), "whole-page evaluation",
                            own_process=True, needs="shared"),
    "bench_vision.py": Smoke(("--depth", "2", "--hidden", "32", "--heads", "1", "--side", "224", "--copies", "2",
                              "--repeats", "1"), "batched + page encoded once"),
    "fit_table.py": Smoke((), "Qwen2.5-VL-7B"),
    "gaming_probes.py": Smoke(("--bench", "bench_data_sample", "--max_chars", "2000"), "| runaway repetition |"),
    "launcher_dryruns.py": Smoke(("{tmp}/dryruns",), "rc=0"),
    "learning_signal_continuous.py": Smoke(("--sft_steps", "1", "--steps", "2", "--seeds", "0", "--arms", "binary",
                                            "--eval_samples", "0", "--work_dir", "{tmp}", "--out", "{tmp}/r.jsonl"),
                                           '"arm": "binary"'),
    "learning_signal_synth.py": Smoke(("--sft_steps", "1", "--steps", "2", "--arms", "plain", "--work_dir", "{tmp}"),
                                      "first 10", needs="browser"),
    "learning_signal_family.py": Smoke(("--sft_steps", "1", "--steps", "2", "--arms", "plain", "--work_dir", "{tmp}"),
                                       "first 10"),
    # It runs under olmOCR's own package (another environment).
    "time_olmocr_tests.py": Smoke(("--bench", "{shared}", "--copies", "1", "--skip-math", "--out", "{tmp}/t.json"),
                                  "µs/test", own_process=True, needs="olmocr"),
    "verdict_dump.py": Smoke(("--bench", "{shared}", "--copies", "1"), "katex\t", needs="shared"),
}

# Modules the scripts import (no command line of their own): each must import and do its one job.
LIBRARIES = {"perturb.py", "speed_common.py"}


def _missing(needs: str | None) -> str | None:
    if needs == "vllm" and importlib.util.find_spec("vllm") is None:
        return "needs vLLM (the vLLM lane's environment)"
    if needs == "olmocr" and importlib.util.find_spec("olmocr") is None:
        return "needs olmOCR's own package (`olmocr`), which olmocr_rl's environments do not install"
    if needs == "browser":
        from olmocr_rl.synth.render import BrowserMissingError, check_setup

        try:
            check_setup()
        except BrowserMissingError as error:
            return str(error)
    if needs == "shared" and not (SHARED_SAMPLE / "olmocr_pipeline").is_dir():
        return f"needs the real olmOCR-bench sample with its pipeline outputs: {SHARED_SAMPLE} is absent"
    return None


def _run_here(script: Path, argv: list[str], script_tmp: Path, monkeypatch) -> int:
    """``python script argv...`` in this process; the exit code."""
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    monkeypatch.setattr(sys, "path", [str(script.parent), *sys.path])
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(tempfile, "tempdir", str(script_tmp))  # the scripts' own temporary folders go there too
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return 0


def test_every_bench_script_has_a_smoke_entry():
    found = {path.name for path in BENCH_DIR.glob("*.py")}
    assert found - set(SMOKE) - LIBRARIES == set(), "add these scripts to SMOKE"
    assert set(SMOKE) | LIBRARIES <= found, "SMOKE names scripts that are gone"


def test_the_libraries_the_scripts_share_import_and_work(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    perturb = importlib.import_module("perturb")
    text = "A first line.\nA second line, longer.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    copies = perturb.perturbed_copies(text, 3, seed=0)
    assert len(copies) == 3 and copies == perturb.perturbed_copies(text, 3, seed=0)
    assert any(copy != text for copy in copies)
    speed_common = importlib.import_module("speed_common")
    calls = []
    times = speed_common.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2)
    assert calls == ["a", "b"] * 3 and {name: len(t) for name, t in times.items()} == {"a": 2, "b": 2}


@pytest.mark.parametrize("name", sorted(path.name for path in BENCH_DIR.glob("*.py") if path.name not in LIBRARIES))
def test_bench_script_runs_at_its_smallest_size(name, tmp_path, tiny_model_dir, monkeypatch, capfd):
    entry = SMOKE.get(name)
    assert entry is not None, f"scripts/bench/{name} has no smoke entry: add the smallest run of it to SMOKE"
    reason = _missing(entry.needs)
    if reason:
        pytest.skip(reason)
    argv = [arg.format(tmp=tmp_path, shared=SHARED_SAMPLE, model=tiny_model_dir) for arg in entry.args]
    script = BENCH_DIR / name
    if entry.own_process:
        done = warm_python.run([sys.executable, str(script), *argv], cwd=REPO, capture_output=True, text=True,
                              timeout=600, env={**os.environ, "TMPDIR": str(tmp_path)})
        code, output = done.returncode, done.stdout + done.stderr
    else:
        code = _run_here(script, argv, tmp_path, monkeypatch)
        captured = capfd.readouterr()
        output = captured.out + captured.err
    assert code == 0, f"{name} {' '.join(argv)} exited {code}:\n{output[-4000:]}"
    assert entry.expect in output, f"{name} ran but did not print {entry.expect!r}:\n{output[-4000:]}"


def test_the_shared_prefix_bench_with_the_tower_frozen(tmp_path, tiny_model_dir, monkeypatch, capfd):
    """bench_shared_prefix.py --frozen_tower (the LoRA / --freeze_vision_tower phase) at its smallest size: the page's
    features cached before the phase, both arms run, the shared one forwarding fewer tokens."""
    argv = ["--model_shape", str(tiny_model_dir), "--shapes", "demo", "--side", "224", "--generations", "2",
            "--completion", "4", "--repeats", "1", "--skip_memory", "--work", str(tmp_path), "--frozen_tower"]
    code = _run_here(BENCH_DIR / "bench_shared_prefix.py", argv, tmp_path, monkeypatch)
    output = "".join(capfd.readouterr())
    assert code == 0, output[-4000:]
    assert "vision tower frozen (features cached per step)" in output
    rows = {line.split()[0]: int(line.split()[3]) for line in output.splitlines()
            if line.strip().startswith("--padding_free") or line.strip().startswith("--shared_prefix")}
    assert rows["--shared_prefix"] < rows["--padding_free"], output
