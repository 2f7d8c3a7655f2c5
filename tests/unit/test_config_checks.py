"""The pure checks behind ``validate``, the frozen ResolvedConfig, the light import, and ``--print``."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from olmocr_rl.config import ConfigError, Environment, ResolvedConfig, build_parser, parse_args, validate
from olmocr_rl.config.flags import CHOSEN
from olmocr_rl.config import checks
from olmocr_rl.config.rewards import NO_REWARD, RewardValue, flag_value, parse_reward

REPO = Path(__file__).resolve().parents[2]
CPU = Environment(cuda=False, vllm=False, num_processes=1)
GPU = Environment(cuda=True, vllm=True, num_processes=1)


def flags(**given) -> Namespace:
    """The parsed defaults with ``given`` on top, chosen by the user (what a check sees)."""
    return Namespace(**{**vars(parse_args([])), **given, CHOSEN: frozenset(given)})


# --- one check at a time: a passing and a failing case, with the exact line --------------------------------

def test_check_folders(tmp_path):
    assert checks.check_folders(flags(train_bench_data_folder=str(tmp_path))) == []
    assert checks.check_folders(flags()) == [
        "--train_bench_data_folder is required: a folder with *.jsonl tests and pdfs/"]
    assert checks.check_folders(flags(train_bench_data_folder=str(tmp_path), eval_bench_data_folder="/no/dir")) == [
        "--eval_bench_data_folder /no/dir: folder not found"]


def test_resolve_loss():
    assert checks.resolve_loss(flags(loss_type=" DAPO ", scale_rewards="true")) == ("dapo", "group")
    assert checks.resolve_loss(flags(scale_rewards="0")) == ("bnpo", "none")
    with pytest.raises(ConfigError) as error:
        checks.resolve_loss(flags(scale_rewards="sometimes"))
    assert str(error.value) == "--scale_rewards 'sometimes': choose group, batch or none (true = group)"


def test_shared_prefix_notices_say_what_the_batch_geometry_lets_it_share():
    # the defaults (one completion a micro-batch, 8 a step) and any window of two completions or more: all shared
    assert checks.shared_prefix_notices(flags(), "none", 8) == []
    assert checks.shared_prefix_notices(flags(per_device_train_batch_size=4, gradient_accumulation_steps=2), "none",
                                        2) == []
    # one completion an optimizer step: the training forwards share nothing; what still does is named
    one = flags(gradient_accumulation_steps=1, num_generations=8)
    (notice,) = checks.shared_prefix_notices(one, "none", 8)
    assert notice.startswith("--shared_prefix: with --per_device_train_batch_size 1 and --gradient_accumulation_steps "
                             "1 each optimizer step trains one completion a process, so the training forwards "
                             "forward every page prompt (only the old-policy and reference log-probs of a "
                             "generation batch and generation's prefill share it)")
    (notice,) = checks.shared_prefix_notices(one, "colocate", 1)
    assert "(nothing shares it)" in notice
    assert checks.shared_prefix_notices(flags(shared_prefix=False, gradient_accumulation_steps=1), "none", 1) == []
    # validate() logs it with the run's other notices
    config = validate(parse_args(["--train_bench_data_folder", str(REPO / "bench_data_sample"), "--reward_bench",
                                  "--num_generations", "8", "--gradient_accumulation_steps", "1",
                                  "--steps_per_generation", "8"]),
                      CPU)
    assert any(n.startswith("--shared_prefix: with --per_device_train_batch_size 1") for n in config.notices)


def test_check_ranges():
    assert checks.check_ranges(flags()) == []
    assert checks.check_ranges(flags(learning_rate=0.0, top_p=1.5)) == [
        "--learning_rate must be > 0 (got 0.0)", "--top_p must be in (0, 1] (got 1.5)"]
    assert checks.check_ranges(flags(max_steps=-2)) == [
        "--max_steps must be a positive number of steps, or -1 for --num_train_epochs (got -2)"]


def test_schedule_notices():
    assert checks.schedule_notices(flags(num_iterations=2, save_steps=4)) == []
    (notice,) = checks.schedule_notices(flags(num_iterations=2, save_steps=3))
    assert notice.startswith("WARNING: --save_steps 3 is not a multiple of --num_iterations 2")
    assert notice.endswith("use --save_steps 4")


def test_check_filters():
    assert checks.check_filters(flags(pages=r"a\.pdf:1", bench_type_filter=["table"])) == []
    (line,) = checks.check_filters(flags(bench_type_filter=["tables"]))
    assert line.startswith("--bench_type_filter 'tables': unknown test type; choose from ")
    assert checks.check_filters(flags(exclude_pages="("))[0].startswith("--exclude_pages '(' is not a valid regex")


def test_resolve_rewards(tmp_path):
    (tmp_path / "t.jsonl").write_text("")
    rewards, notices = checks.resolve_rewards(flags(train_bench_data_folder=str(tmp_path), reward_bench="t.jsonl",
                                                    reward_eos=0.5))
    assert rewards == {"bench": RewardValue(1.0, str((tmp_path / "t.jsonl").resolve())), "eos": RewardValue(0.5)}
    assert list(rewards) == ["bench", "eos"] and notices == []  # the table's order, enabled ones only
    rewards, notices = checks.resolve_rewards(flags(train_bench_data_folder=str(tmp_path), macro_average=True))
    assert rewards == {"bench_macroavg": RewardValue(1.0)} and len(notices) == 1
    with pytest.raises(ConfigError) as error:
        checks.resolve_rewards(flags(train_bench_data_folder=str(tmp_path)))
    assert str(error.value) == NO_REWARD


def test_check_olmorl():
    assert checks.check_olmorl(flags(olmorl=True, active_sampling=True), {}) == []
    (line,) = checks.check_olmorl(flags(olmorl=True), {"beta": 0.01})
    assert line == ("--olmorl contradicts the command line / --config YAML: beta=0.01: --olmorl needs beta=0.0 "
                    "(no KL term to a reference model) Remove these settings (--olmorl sets them) or drop --olmorl "
                    "to train with plain TRL GRPO.")
    assert checks.check_olmorl(flags(active_sampling=True), {}) == [
        "--active_sampling refills the groups that --olmorl drops; add --olmorl or drop --active_sampling"]


def test_check_geometry():
    assert checks.check_geometry(flags(gradient_accumulation_steps=4), num_processes=7) == []
    (line,) = checks.check_geometry(flags(), num_processes=1)
    assert line.endswith("Use --gradient_accumulation_steps 28 (any multiple of 28) or a --num_generations that "
                         "divides 8")
    assert checks.check_geometry(flags(num_generations=2, gradient_accumulation_steps=2, eval_steps=5), 1) == [
        "eval geometry: per_device_eval_batch_size (1) x processes (1) = 1 is not a multiple of --num_generations 2; "
        "use --per_device_eval_batch_size 2 (or a multiple)"]


def test_resolve_vllm_mode_from_environment_facts():
    assert checks.resolve_vllm_mode(flags(), GPU)[0] == "colocate"
    mode, (notice,) = checks.resolve_vllm_mode(flags(), Environment(cuda=False, vllm=True))
    assert mode == "none" and notice.startswith("vllm_mode auto: no CUDA GPU is visible, generating with HF generate")
    with pytest.raises(ConfigError, match=r"^--vllm_mode server needs vLLM importable"):
        checks.resolve_vllm_mode(flags(vllm_mode="server"), CPU)


def test_check_vllm_engine():
    assert checks.check_vllm_engine(flags(vllm_tensor_parallel_size=2), "colocate",
                                    Environment(cuda=True, vllm=True, num_processes=4)) == []
    assert checks.check_vllm_engine(flags(vllm_enable_sleep_mode=True), "colocate", CPU) == [
        "--vllm_enable_sleep_mode needs a CUDA GPU (vLLM's CPU engine cannot sleep); drop the flag"]
    assert checks.check_vllm_engine(flags(vllm_enforce_eager=True), "colocate", CPU) == []
    assert checks.check_vllm_engine(flags(vllm_enforce_eager=True), "server", CPU) == []
    assert checks.check_vllm_engine(flags(vllm_enforce_eager=True), "none", CPU) == [
        "--vllm_enforce_eager applies to a vLLM engine, and this run generates with HF generate (--vllm_mode none): "
        "drop the flag, or pick --vllm_mode colocate or server"]


def test_resolve_vllm_max_model_length():
    assert checks.resolve_vllm_max_model_length(flags(), "colocate") == (46 * 46 + 512 + 8000, [])
    with pytest.raises(ConfigError) as error:
        checks.resolve_vllm_max_model_length(flags(vllm_max_model_length=100, max_completion_length=100), "none")
    assert str(error.value) == ("--vllm_max_model_length 100 leaves no room for the prompt: it must exceed "
                                "--max_completion_length 100 by the page prompt (up to 2628 tokens at 1288 px); "
                                "use 2728")


def test_batched_vision_attention_auto_follows_the_gpu():
    assert checks.resolve_batched_vision_attention(flags(), GPU) is True
    assert checks.resolve_batched_vision_attention(flags(), CPU) is False
    assert checks.resolve_batched_vision_attention(flags(batched_vision_attention=True), CPU) is True


def test_resolve_report_to_resume_and_s3(tmp_path):
    assert checks.resolve_report_to(flags(report_to="wandb, tensorboard")) == ("wandb", "tensorboard")
    assert checks.resolve_report_to(flags(report_to="none")) == ()
    with pytest.raises(ConfigError, match=r"^--report_to 'mlflow': choose wandb, tensorboard or none"):
        checks.resolve_report_to(flags(report_to="mlflow"))
    assert checks.resolve_resume(flags(resume_from_checkpoint="False")) is None
    assert checks.resolve_resume(flags(resume_from_checkpoint=str(tmp_path))) == str(tmp_path)
    assert checks.check_s3(flags(s3_save_path="s3://bucket/p")) == []
    assert checks.check_s3(flags(s3_save_path="b/p")) == ["--s3_save_path 'b/p': expected s3://bucket/prefix"]


def test_one_reward_value_parser_and_its_messages(tmp_path):
    assert parse_reward("eos", "-1") == RewardValue(-1.0)
    assert flag_value("bench", "x.jsonl") == "x.jsonl"  # argparse's view: the form, the file is not looked up
    assert flag_value("eos", True) == 1.0 and flag_value("eos", None) is None and parse_reward("eos", False) is None
    for key, value, line in [
        ("eos", "lots", "--reward_eos takes an optional weight (a number), got 'lots'"),
        ("eos", float("inf"), "--reward_eos inf: the weight must be a finite number"),
        ("bench", "x.txt", "--reward_bench takes an optional weight (a number) or the path of a bench .jsonl, "
                           "got 'x.txt'"),
    ]:
        with pytest.raises(ValueError) as error:
            parse_reward(key, value)
        assert str(error.value) == line
    (tmp_path / "t.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"^--reward_eos takes a weight, not a JSONL path"):
        parse_reward("eos", "t.jsonl", tmp_path)


# --- validate: composed, frozen, args untouched ---------------------------------------------------------------

def test_validate_returns_a_frozen_config_and_leaves_args_alone(tmp_path):
    (tmp_path / "pdfs").mkdir()
    args = parse_args(["--train_bench_data_folder", str(tmp_path), "--reward_bench", "--num_generations", "2",
                       "--gradient_accumulation_steps", "2", "--loss_type", "DAPO", "--scale_rewards", "true",
                       "--report_to", "tensorboard", "--bench_type_filter", "table",
                       "--generation_kwargs", '{"min_new_tokens": 4, "stop": ["a"]}'])
    before = copy.deepcopy(vars(args))
    cfg = validate(args, env=CPU)
    assert vars(args) == before
    assert isinstance(cfg, ResolvedConfig) and cfg.environment == CPU
    assert (cfg.loss_type, cfg.scale_rewards, cfg.report_to) == ("dapo", "group", ("tensorboard",))
    assert cfg.output_dir == args.output_dir and cfg.bench_type_filter == ("table",)  # flags read through
    assert cfg.vllm_mode == "none" and cfg.vllm_engine_dtype == "float32" and cfg.batched_vision_attention is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.loss_type = "grpo"
    with pytest.raises(TypeError):
        cfg.flags["output_dir"] = "elsewhere"
    with pytest.raises(TypeError):
        cfg.rewards["bench"] = RewardValue(2.0)
    with pytest.raises(AttributeError):
        cfg.no_such_flag  # declared fields only
    assert cfg.rewards == {"bench": RewardValue(1.0)} and cfg.reward_weights == [1.0]
    as_dict = cfg.as_dict()  # W&B's config: plain values, nested ones too
    assert json.loads(json.dumps(as_dict))["generation_kwargs"] == {"min_new_tokens": 4, "stop": ["a"]}
    assert as_dict["rewards"] == {"bench": {"weight": 1.0, "jsonl": None}} and as_dict["reward_bench"] == 1.0


def test_no_assignment_to_args_in_validation_or_the_trainer():
    for path in [*(REPO / "olmocr_rl" / "config").glob("*.py"), REPO / "olmocr_rl" / "grpo_train.py"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            assert not (" args." in code and "=" in code.split("args.", 1)[1].split("(")[0].replace("==", "")), \
                f"{path.name}:{number}: {line.strip()}"


def test_each_default_is_written_once():
    default_model = "Qwen/Qwen2.5-VL-7B-Instruct"
    assert build_parser().get_default("model_name") == default_model
    # a default, a constant or a flag's declaration, not a docstring example
    written = re.compile(r'(=\s*|flag\(\w+, )"' + re.escape(default_model) + '"')
    holders = [p for p in (REPO / "olmocr_rl").rglob("*.py") if written.search(p.read_text())]
    assert holders == [REPO / "olmocr_rl" / "config" / "options.py"]


# --- light import and --print ---------------------------------------------------------------------------------

def _python(*code_or_args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_importing_the_config_loads_no_torch():
    result = _python("-c", "import sys, olmocr_rl.config, olmocr_rl.config.rewards; "
                           "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_print_a_flag_value(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("learning_rate: 1.0e-4\nnum_generations: 4\n")
    run = lambda *a: _python("-m", "olmocr_rl.config", *a)  # noqa: E731
    assert run("--print", "model_name").stdout == "Qwen/Qwen2.5-VL-7B-Instruct\n"
    assert run("--print", "learning_rate", "--config", str(cfg)).stdout == "0.0001\n"
    assert run("--print", "learning_rate", "--config", str(cfg), "--learning_rate", "3e-5").stdout == "3e-05\n"
    assert run("--print", "num_completions", "--config", str(cfg)).stdout == "4\n"  # the alias
    assert run("--print", "eval_steps").stdout == "null\n"
    everything = json.loads(run("--print-all", "--olmorl").stdout)
    assert everything["olmorl"] is True and everything["seed"] == 42
    unknown = run("--print", "learning_rat")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith("error: --print learning_rat: unknown key") and unknown.stderr.count("\n") == 1
    bad = run("--print", "seed", "--config", str(tmp_path / "missing.yaml"))
    assert bad.returncode == 2 and bad.stderr == f"error: --config {tmp_path / 'missing.yaml'}: file not found\n"


def test_explicit_flags_are_the_ones_the_user_wrote(tmp_path):
    """Command line and --config keys count, whatever their value (a default value too); aliases and
    dash spellings map to the flag's name; nothing else counts."""
    from olmocr_rl.config import explicit_flags, parse_args

    default_lr = parse_args([]).learning_rate
    config = tmp_path / "c.yaml"
    config.write_text(f"learning_rate: {default_lr}\nnum_completions: 4\nmax-completion-length: 64\n")
    chosen = explicit_flags(["--config", str(config), "--seed", "3", "--no-gradient_checkpointing", "--reward_bench",
                             "--bench_type_filter", "math"])
    assert chosen == {"learning_rate", "num_generations", "max_completion_length", "seed", "gradient_checkpointing",
                      "reward_bench", "bench_type_filter"}
    assert explicit_flags([]) == set()
