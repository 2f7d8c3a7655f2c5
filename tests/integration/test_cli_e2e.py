"""The training CLI end to end, as a user runs it: ``python -m olmocr_rl.grpo_train`` in a subprocess.

The tiny local model trains on ``bench_data_sample/`` on CPU with W&B in offline mode: 2 steps, a
checkpoint with model and processor together, ``bench_reward/...`` keys in metrics.jsonl and in the
offline W&B run; then ``--resume_from_checkpoint`` continues from step 2 to 4. A run with every flag at
its default but the batch geometry (and a short completion length) trains an epoch and logs the W&B
completions table; ``--log_multimodal`` adds the page images. Plus the paths that must stop before any
model loads: bad flags (one ``error:`` line, exit 2), a bad bench folder (its problems listed, exit 1),
W&B without an API key (one line, exit 1), and ``--help``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_python

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench_data_sample"

# Every reward flag of olmOCR's trainer (docs/design.md), written out here so a flag that disappears
# from the CLI fails the --help test.
OLMOCR_REWARD_FLAGS = (
    "--reward_bench", "--reward_bench_macroavg", "--reward_medoid", "--reward_bench_edit_distance",
    "--reward_front_matter", "--reward_element_count", "--reward_rect_tables", "--reward_eos",
)


def cli_env(tmp_path: Path) -> dict[str, str]:
    """No hub, W&B offline with its config/cache kept inside the test's folder, one BLAS thread."""
    wandb_home = tmp_path / "wandb_home"
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "offline", "WANDB_CONFIG_DIR": str(wandb_home), "WANDB_CACHE_DIR": str(wandb_home),
        "WANDB_DATA_DIR": str(wandb_home), "WANDB_SILENT": "true",
        "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
    }


def run_cli(args: list, tmp_path: Path, timeout: int = 600, env: dict[str, str] | None = None,
            cwd: Path = REPO, fresh: bool = False) -> subprocess.CompletedProcess:
    """The training CLI as a subprocess, forked from the preloaded interpreter (tests/warm_python.py); ``fresh``: a
    process of its own, for a reference run that another process's run must equal bit for bit."""
    return warm_python.run(
        [sys.executable, "-m", "olmocr_rl.grpo_train", *map(str, args)], fresh=fresh,
        cwd=cwd, env=env if env is not None else cli_env(tmp_path), capture_output=True, text=True, timeout=timeout,
    )


def tiny_run_flags(model_dir: Path | str, output_dir: Path, max_steps: int) -> list:
    """The CPU demo config, shrunk: one page x 2 completions of 8 tokens per step, 256 px pages."""
    return [
        "--config", REPO / "configs" / "tiny-cpu.yaml",
        "--model_name", model_dir, "--output_dir", output_dir, "--train_bench_data_folder", BENCH,
        "--max_steps", max_steps, "--save_steps", 2, "--logging_steps", 1,
        "--num_generations", 2, "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 1,
        "--max_completion_length", 8, "--target_longest_image_dim", 256,
        "--no-log_completions", "--dataloader_num_workers", 0, "--vllm_mode", "none", "--seed", 0,
    ]


def read_metrics(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def training_steps(records: list[dict]) -> list[int]:
    """Steps of the per-step training records (the end-of-train summary record has no reward)."""
    return [r["step"] for r in records if "reward" in r]


def offline_runs(output_dir: Path) -> list[Path]:
    return sorted((output_dir / "wandb").glob("offline-run-*"))


def failure(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-8000:]}"


# ---------------------------------------------------------------------------------------------
# 2 steps, checkpoint, telemetry, W&B offline; then resume to step 4


@pytest.mark.slow
def test_two_steps_with_wandb_offline_then_resume_to_four(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    out.mkdir()  # empty: the bare --resume_from_checkpoint (as launchers always pass it) starts fresh

    first = run_cli([*tiny_run_flags(tiny_model_dir, out, 2), "--report_to", "wandb", "--resume_from_checkpoint"],
                    tmp_path)
    assert first.returncode == 0, failure(first)
    log = first.stdout + first.stderr
    assert "Traceback" not in log
    assert f"--resume_from_checkpoint: no checkpoint in {out}, starting fresh" in log
    assert "resuming from" not in log

    # checkpoint-2: model and processor side by side, loadable as one model folder.
    ckpt = out / "checkpoint-2"
    for name in ("model.safetensors", "config.json", "trainer_state.json", "optimizer.pt", "scheduler.pt",
                 "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (ckpt / name).is_file(), f"{name} missing from {sorted(p.name for p in ckpt.iterdir())}"
    assert (ckpt / "processor_config.json").is_file() or (ckpt / "preprocessor_config.json").is_file()
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == 2
    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(str(ckpt))
    assert processor.image_processor is not None and model.config.model_type == "qwen2_5_vl"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()  # the final model
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 2

    # metrics.jsonl: one record per step with TRL's reward, our bench telemetry and step timing.
    records = read_metrics(out)
    assert training_steps(records) == [1, 2]
    for record in (r for r in records if "reward" in r):
        assert 0.0 <= record["bench_reward/overall_pass_rate"] <= 1.0
        assert record["bench_reward/total_completions"] == 2  # G completions of one page per step
        per_type = [k for k in record if k.startswith("bench_reward/") and k.endswith("/pass_rate")
                    and not k.startswith("bench_reward/jsonl_")]
        assert per_type, sorted(record)
        assert record["timing/step_s"] > 0 and record["timing/generated_tokens"] > 0
        # --shared_prefix (default on): the micro-batch holds the page's 2 completions, so its prompt (most of a
        # row's ~180 tokens) went through the language model once, not twice: a little over half the real tokens
        assert 0.5 < record["timing/shared_prefix_tokens"] < 0.7, record["timing/shared_prefix_tokens"]

    # The console table on stdout: its header once, then one row per step (step, reward, ...).
    assert len(re.findall(r"^\s+step\s+reward\s.*s/step$", first.stdout, re.M)) == 1, first.stdout
    assert [int(m) for m in re.findall(r"^\s+(\d+)\s+\d\.\d{3}\s", first.stdout, re.M)] == [1, 2], first.stdout
    # The per-type table with the checkpoint (--save_steps 2), over the steps since the last; no raw dict.
    assert re.findall(r"^\s*bench reward over steps? [\d-]+", first.stdout, re.M) == ["bench reward over steps 1-2"]
    assert "{'loss'" not in log and "The tokenizer has new PAD/BOS/EOS" not in log

    # W&B offline: one run folder with its .wandb record file, holding the bench and timing keys and
    # the full flag set as config (keys are stored as plain strings in the protobuf records).
    runs = offline_runs(out)
    assert len(runs) == 1, runs
    wandb_files = list(runs[0].glob("*.wandb"))
    assert len(wandb_files) == 1 and wandb_files[0].stat().st_size > 0
    data = wandb_files[0].read_bytes()
    for key in (b"bench_reward/overall_pass_rate", b"bench_reward/frac_zero_signal_groups", b"train/timing/step_s",
                b"train/reward", b"train_bench_data_folder", b"resolved_vllm_mode"):
        assert key in data, f"{key!r} not in {wandb_files[0]}"
    # olmOCR's names: bench_reward/* at top level in W&B (its dashboards carry over), TRL's keys under train/
    assert b"train/bench_reward/" not in data

    # A step the first run logged but never checkpointed (as when a job is killed between saves): the
    # resumed run trains step 3 again, and its record must replace this one, not sit beside it.
    with (out / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": 3, "reward": -1.0, "note": "lost with the killed job"}) + "\n")

    # Second invocation: the bare flag picks checkpoint-2 from the output dir and runs steps 3-4 only.
    second = run_cli([*tiny_run_flags(tiny_model_dir, out, 4), "--report_to", "wandb", "--resume_from_checkpoint"],
                     tmp_path)
    assert second.returncode == 0, failure(second)
    log = second.stdout + second.stderr
    assert f"resuming from {ckpt}" in log
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and state["max_steps"] == 4
    # The history carried over from checkpoint-2 plus the new steps, each once.
    assert [h["step"] for h in state["log_history"] if "reward" in h] == [1, 2, 3, 4]
    records = read_metrics(out)
    assert training_steps(records) == [1, 2, 3, 4]  # appended: steps 1-2 were not trained again
    assert not any(r.get("note") for r in records)  # the stale step-3 record was dropped at resume
    assert all("bench_reward/overall_pass_rate" in r for r in records if "reward" in r)
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 4
    runs = offline_runs(out)
    assert len(runs) == 2  # one folder per start, both of the same W&B run (its id is stored in checkpoint-2)
    assert len({run.name.rsplit("-", 1)[1] for run in runs}) == 1, runs


# ---------------------------------------------------------------------------------------------
# the defaults: only the required flags and a batch geometry the tiny model runs on CPU

# --max_completion_length 16 instead of 8000: the tiny model's samples rarely end, and 8000 tokens per
# sample would take the test from seconds to hours on CPU. Every other flag keeps its default.
DEFAULT_RUN_FLAGS = ["--reward_bench", "--num_generations", 4, "--per_device_train_batch_size", 4,
                     "--gradient_accumulation_steps", 1, "--max_completion_length", 16]
PROMPT_START = "Attached is one page of a document that you must process."


def wandb_tables(run: Path) -> list[dict]:
    """The completions tables an offline W&B run holds (files/media/table/completions_*.table.json)."""
    return [json.loads(path.read_text()) for path in sorted((run / "files" / "media" / "table").glob("completions_*.table.json"))]


def console_tables(stdout: str) -> dict[int, str]:
    """TRL's console completions tables (rich panels titled "Step N") by step; the last one printed wins."""
    panels = re.findall(r"^╭─+ Step (\d+) ─+╮$(.*?)^╰─+╯$", stdout, re.M | re.S)
    return {int(step): body for step, body in panels}


@pytest.mark.slow
def test_default_flags_train_an_epoch_with_wandb_and_its_completions_table(tmp_path, tiny_model_dir):
    """As a new user runs it: --report_to wandb, --log_completions, --logging_steps 5, --warmup_steps 100,
    --vllm_mode auto, 1288 px pages, gradient checkpointing, one epoch (no --max_steps) ... all defaults."""
    from olmocr_rl.config import cuda_available, vllm_available

    out = tmp_path / "out"
    env = {**cli_env(tmp_path), "COLUMNS": "200"}  # rich's console width: page names printed whole
    result = run_cli(["--train_bench_data_folder", BENCH, "--model_name", tiny_model_dir, "--output_dir", out,
                      *DEFAULT_RUN_FLAGS], tmp_path, env=env)
    assert result.returncode == 0, failure(result)
    log = result.stdout + result.stderr
    assert "Traceback" not in log
    if not (vllm_available() and cuda_available()):
        assert "vllm_mode auto:" in log and "generating with HF generate" in log, log[-3000:]

    # One epoch of the 10 sample pages (one page x 4 samples per step), logged every 5 steps, with the
    # learning rate still in its 100-step linear warmup to 2e-6 (the rate of step s is set after s-1 steps).
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 10
    records = [r for r in read_metrics(out) if "reward" in r]
    assert [r["step"] for r in records] == [5, 10]
    for record in records:
        assert record["learning_rate"] == pytest.approx(2e-6 * (record["step"] - 1) / 100)
        assert 0.0 <= record["bench_reward/overall_pass_rate"] <= 1.0

    # The defaults reached TRL's config (and so the run above).
    import torch

    config = torch.load(out / "training_args.bin", weights_only=False)
    assert config.report_to == ["wandb"] and config.log_completions is True and config.log_multimodal is False
    assert config.num_completions_to_print == 2 and config.logging_steps == 5
    # --gradient_checkpointing auto: the tiny model's activations fit this machine, so nothing recomputes
    assert config.gradient_checkpointing is False and config.lr_scheduler_type == "linear"
    assert config.warmup_steps == 100 and config.learning_rate == 2e-6 and config.seed == 42
    assert config.loss_type == "bnpo" and config.scale_rewards == "group" and config.beta == 0.0
    assert config.temperature == 0.8 and config.top_p == 1.0 and config.num_iterations == 1
    assert config.save_steps == 25 and config.save_total_limit == 30 and config.dataloader_num_workers == 0
    assert config.max_steps == -1 and config.num_train_epochs == 1

    # The console by default: a compact row per log step, the per-type table with each checkpoint (--save_steps
    # 25: none in 10 steps) and at the end, neither the Trainer's raw metrics dict nor start-up noise.
    assert [int(m) for m in re.findall(r"^\s+(\d+)\s+\d\.\d{3}\s", result.stdout, re.M)] == [5, 10]
    assert re.findall(r"^\s*bench reward over steps? [\d-]+", result.stdout, re.M) == ["bench reward over steps 1-10"]
    assert "{'loss'" not in log and "The tokenizer has new PAD/BOS/EOS" not in log

    # The console table at each log step: --num_completions_to_print 2 rows, the prompt as its text.
    tables = console_tables(result.stdout)
    assert sorted(tables) == [5, 10], result.stdout[-4000:]
    for body in tables.values():
        assert re.search(r"┃ Prompt\s+┃ Completion\s+┃ olmocr_bench_reward ┃ Advantage ┃ page\s+┃", body), body
        assert len(re.findall(r"│ \S+\.pdf:\d+ +│ │$", body, re.M)) == 2, body
        assert PROMPT_START in body and "{'type'" not in body

    # The offline W&B run holds the completions table of each log step: 4 rows (the step's samples),
    # prompt and completion as text, the page's name, no image column (--log_multimodal is off).
    runs = offline_runs(out)
    assert len(runs) == 1, runs
    data = next(runs[0].glob("*.wandb")).read_bytes()
    assert b"media/table/completions_" in data and b"completions.table.json" in data
    assert b"olmocr-grpo-v5" in data  # the default --wandb_project
    tables = wandb_tables(runs[0])
    assert len(tables) >= 2, sorted(runs[0].rglob("*"))
    for table in tables:
        assert table["columns"] == ["step", "prompt", "completion", "olmocr_bench_reward", "page", "advantage"]
        assert len(table["data"]) == 4
        for step, prompt, completion, reward, page, advantage in table["data"]:
            assert step in (5, 10) and isinstance(completion, str) and 0.0 <= reward <= 1.0
            assert prompt.startswith(PROMPT_START) and prompt.endswith("\n<image>")
            assert re.fullmatch(r".+\.pdf:\d+", page), page
    # TRL's parquet copy of the same table.
    assert (out / "completions" / "completions_00005.parquet").is_file()


@pytest.mark.slow
def test_olmorl_completions_table_with_page_images_in_wandb(tmp_path, tiny_model_dir):
    """--log_multimodal: each W&B row carries its page image (OlmoRL's trainer logs the table too)."""
    out = tmp_path / "out"
    result = run_cli([*tiny_run_flags(tiny_model_dir, out, 2), "--report_to", "wandb", "--olmorl",
                      "--log_completions", "--log_multimodal", "--num_completions_to_print", 1], tmp_path)
    assert result.returncode == 0, failure(result)
    assert sorted(console_tables(result.stdout)) == [1, 2]
    runs = offline_runs(out)
    tables = wandb_tables(runs[0])
    assert tables and all(t["columns"][-1] == "image" and len(t["data"]) == 2 for t in tables), tables
    # A table with media is logged as a run artifact: its JSON (staged in W&B's data folder until
    # `wandb sync`) refers to each row's page as an image file, and the run holds those PNG files.
    staged = [json.loads(p.read_text()) for p in (tmp_path / "wandb_home").rglob("staging/*")
              if p.is_file() and p.read_bytes().startswith(b'{"_type": "table"')]
    assert staged and all(table["columns"][-1] == "image" for table in staged), staged
    images = [row[-1] for table in staged for row in table["data"]]
    assert len(images) >= 4, staged
    for cell in images:  # TRL logs each row's images as a list: here the one page
        assert len(cell) == 1 and cell[0]["_type"] == "image-file" and cell[0]["path"].endswith(".png")
        assert max(cell[0]["width"], cell[0]["height"]) == 256  # --target_longest_image_dim
    assert b"media/images/" in next(runs[0].glob("*.wandb")).read_bytes()


# ---------------------------------------------------------------------------------------------
# W&B without credentials: one line, before the model loads


def isolated_wandb_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No W&B variable from the caller, and a HOME (netrc, W&B settings) of the test's own."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in cli_env(tmp_path).items() if not k.startswith("WANDB_") and k != "NETRC"}
    env.update(HOME=str(home), WANDB_CONFIG_DIR=str(home / ".config" / "wandb"),
               WANDB_DATA_DIR=str(tmp_path / "wandb_data"), WANDB_CACHE_DIR=str(tmp_path / "wandb_cache"))
    env.update(extra)
    return env


NO_KEY_COMMAND = ["--train_bench_data_folder", BENCH, "--reward_bench", "--num_generations", 4,
                  "--per_device_train_batch_size", 4, "--gradient_accumulation_steps", 1,
                  "--max_completion_length", 16, "--max_steps", 6, "--vllm_mode", "none"]


def test_no_wandb_key_is_one_error_line_before_the_model_loads(tmp_path):
    out = tmp_path / "out"
    started = time.monotonic()
    result = run_cli([*NO_KEY_COMMAND, "--model_name", tmp_path / "no-model", "--output_dir", out], tmp_path,
                     env=isolated_wandb_env(tmp_path), cwd=tmp_path)  # cwd: no wandb/settings of the repo's
    elapsed = time.monotonic() - started
    assert result.returncode == 1, failure(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --report_to wandb: no W&B API key found"), failure(result)
    for way_out in ("`wandb login`", "WANDB_API_KEY", "WANDB_MODE=offline", "--report_to none"):
        assert way_out in lines[0]
    assert result.stdout == ""
    assert not out.exists() and "no-model" not in result.stderr  # stopped before data, output folder, model
    assert elapsed < 30, f"{elapsed:.1f} s: the check should not wait for anything"


HOST = "wandb.example.test"
KEY = "k" * 40


@pytest.mark.parametrize("setup", ["api_key", "netrc", "disabled", "bad_key"])
def test_wandb_credentials_check_accepts_every_source_wandb_reads(tmp_path, setup):
    """A key in the environment or in the netrc entry of the W&B host (WANDB_BASE_URL), or W&B off: the run
    goes on (and here stops at the missing model); a malformed key is one line that says so."""
    extra = {"WANDB_BASE_URL": f"https://{HOST}"}
    if setup == "api_key":
        extra["WANDB_API_KEY"] = KEY
    elif setup == "netrc":
        netrc = tmp_path / "home" / ".netrc"
        netrc.parent.mkdir(parents=True)
        netrc.write_text(f"machine {HOST}\n  login user\n  password {KEY}\n")
        netrc.chmod(0o600)
    elif setup == "disabled":
        extra["WANDB_MODE"] = "disabled"
    else:
        extra["WANDB_API_KEY"] = "too-short"
    model = tmp_path / "no-model"
    result = run_cli([*NO_KEY_COMMAND, "--model_name", model, "--output_dir", tmp_path / "out"], tmp_path,
                     env=isolated_wandb_env(tmp_path, **extra), cwd=tmp_path)
    assert result.returncode == 1, failure(result)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, failure(result)
    if setup == "bad_key":
        assert errors[0].startswith("error: --report_to wandb: WANDB_API_KEY invalid"), errors
        assert "WANDB_MODE=offline" in errors[0] and str(model) not in result.stderr
    else:
        assert "W&B" not in errors[0] and str(model) in errors[0], errors  # got as far as loading the model


def test_default_model_name_offline_is_one_error_line(tmp_path):
    """--model_name's default (Qwen2.5-VL-7B from the hub) with no hub and an empty cache, and
    --output_dir's default (outputs/grpo_test, below the working directory)."""
    env = {k: v for k, v in cli_env(tmp_path).items() if k not in ("HF_HUB_CACHE", "TRANSFORMERS_CACHE")}
    env["HF_HOME"] = str(tmp_path / "hf_home")
    result = run_cli(["--train_bench_data_folder", BENCH, *DEFAULT_RUN_FLAGS], tmp_path, env=env, cwd=tmp_path)
    assert result.returncode == 1, failure(result)
    assert (tmp_path / "outputs" / "grpo_test").is_dir()  # made before the model loads
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'Qwen/Qwen2.5-VL-7B-Instruct'" in errors[0], failure(result)
    assert result.stderr.rstrip().splitlines()[-1] == errors[0]  # the hub client's advice joined into it


# ---------------------------------------------------------------------------------------------
# stops before any model loads


def guide_command(folder: str) -> list[str]:
    """A command line from published guides to olmOCR's trainer (issue 6), bench paths substituted."""
    return [
        "--train_bench_data_folder", folder, "--output_dir", "./output",
        "--reward_bench", f"{folder}/basic.jsonl", "--beta", "0.1", "--num_iterations", "5",
        "--num_completions", "8", "--loss_type", "policy", "--scale_rewards", "true",
        "--reward_bench_macroavg", f"{folder}/basic.jsonl", "--vllm_mode", "colocate",
    ]


GOOD_GEOMETRY = ["--reward_bench", "--num_generations", "2", "--per_device_train_batch_size", "2",
                 "--gradient_accumulation_steps", "1"]


@pytest.mark.parametrize(
    "flags, expected",
    [
        # argparse's own errors: its message, without the 40-line usage block
        ([*GOOD_GEOMETRY, "--max_steps", "abc"], "error: argument --max_steps: invalid int value: 'abc'"),
        ([*GOOD_GEOMETRY, "--num_generation_s", "4"], "error: unrecognized arguments: --num_generation_s 4"),
        ([*GOOD_GEOMETRY, "--vllm_mode", "fast"], "error: argument --vllm_mode: invalid choice: 'fast'"),
        # validation: what to write instead
        (["--reward_bench", "--num_generations", "3", "--per_device_train_batch_size", "2",
          "--gradient_accumulation_steps", "1"], "Use --gradient_accumulation_steps 3"),
        (["--num_generations", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"],
         "error: no reward enabled: add at least one of --reward_bench"),
        ([*GOOD_GEOMETRY, "--report_to", "mlflow"], "error: --report_to 'mlflow': choose wandb, tensorboard or none"),
        ([*GOOD_GEOMETRY, "--reward_eos", "basic.jsonl"], "error: argument --reward_eos: --reward_eos takes a weight, not a JSONL path"),
        (guide_command(str(BENCH)), "error: --loss_type 'policy' is not a loss type"),
        (guide_command("/path/to/bench_data"), "error: --train_bench_data_folder /path/to/bench_data: folder not found"),
    ],
    ids=["type", "unknown-flag", "choice", "geometry", "no-reward", "report-to", "jsonl-for-weight",
         "guide-policy-loss", "guide-missing-folder"],
)
def test_bad_flags_print_one_error_line_and_exit_2(tmp_path, flags, expected):
    args = flags if "--train_bench_data_folder" in flags else ["--train_bench_data_folder", BENCH, *flags]
    result = run_cli([*args, "--output_dir", tmp_path / "out", "--model_name", tmp_path / "no-model"], tmp_path)
    assert result.returncode == 2, failure(result)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), failure(result)
    assert expected in lines[0]
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()  # stopped before anything was created


def test_config_file_with_an_unknown_key_is_one_error_line(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"train_bench_data_folder: {BENCH}\nreward_bench: 1.0\nnum_generatons: 4\n")
    result = run_cli(["--config", config], tmp_path)
    assert result.returncode == 2, failure(result)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --config {config}: unknown key 'num_generatons'")


def test_bad_bench_folder_lists_every_problem_and_exits_1(tmp_path):
    folder = tmp_path / "bench"
    (folder / "pdfs").mkdir(parents=True)
    (folder / "tests.jsonl").write_text(
        '{"pdf": "missing.pdf", "page": 1, "id": "t1", "type": "present", "text": "x"}\n'
        "not json\n"
    )
    out = tmp_path / "out"
    result = run_cli(["--train_bench_data_folder", folder, "--output_dir", out, "--model_name", tmp_path / "no-model",
                      *GOOD_GEOMETRY[1:], "--reward_bench"], tmp_path)
    assert result.returncode == 1, failure(result)
    assert "Traceback" not in result.stderr
    jsonl = folder / "tests.jsonl"
    assert f"{jsonl}:1: field 'pdf': PDF not found" in result.stderr
    assert f"{jsonl}:2: not valid JSON" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith(f"error: bench folder {folder} has problems")
    assert not out.exists()  # nothing made, no model loaded


def test_page_filter_that_leaves_no_page_is_one_error_before_the_model_loads(tmp_path):
    out = tmp_path / "out"
    result = run_cli(["--train_bench_data_folder", BENCH, "--output_dir", out, "--model_name", tmp_path / "no-model",
                      *GOOD_GEOMETRY[1:], "--reward_bench", "--pages", "no_such_page"], tmp_path)
    assert result.returncode == 1, failure(result)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--pages 'no_such_page' (on the command line) leaves no page" in errors[0], result.stderr
    assert "no-model" not in result.stderr  # stopped before trying to load the (missing) model


def test_help_lists_every_reward_flag(tmp_path):
    result = run_cli(["--help"], tmp_path)
    assert result.returncode == 0, failure(result)
    for flag in (*OLMOCR_REWARD_FLAGS, "--config", "--resume_from_checkpoint", "--s3_save_path", "--report_to",
                 "--num_completions", "--macro_average", "--olmorl", "--bench_raw_completion", "--log_multimodal"):
        assert flag in result.stdout, flag
    assert result.stderr == ""
