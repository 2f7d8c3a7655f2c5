"""The TRL GRPOConfig knobs the CLI exposes (config.flags.TRL_KNOB_FLAGS): help, defaults, pass-through, checks."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from olmocr_rl.config import ConfigError, Environment, build_grpo_config, build_parser, parse_args, validate
from olmocr_rl.config.flags import TRL_KNOB_FLAGS
from olmocr_rl.config.grpo import grpo_config_kwargs

CPU = Environment(cuda=False, vllm=False, num_processes=1)
CPU_VLLM = Environment(cuda=False, vllm=True, num_processes=1)

#: A value other than TRL's default for every knob, with the GRPOConfig fields it may change besides its own.
NON_DEFAULT = {
    "epsilon": ("0.1", ()), "epsilon_high": ("0.28", ()), "delta": ("1.5", ()),
    "mask_truncated_completions": ("true", ()), "top_entropy_quantile": ("0.2", ()),
    "off_policy_mask_threshold": ("0.5", ()), "entropy_coef": ("0.01", ()),
    "multi_objective_aggregation": ("normalize_then_sum", ()),
    "steps_per_generation": ("8", ("generation_batch_size",)),
    "generation_batch_size": ("8", ("steps_per_generation",)),
    "num_generations_eval": ("2", ()), "disable_dropout": ("true", ()), "top_k": ("50", ()), "min_p": ("0.05", ()),
    "repetition_penalty": ("1.1", ()), "vllm_importance_sampling_clip_min": ("0.5", ()),
    "vllm_model_impl": ("transformers", ()),
}


@pytest.fixture
def bench(tmp_path):
    folder = tmp_path / "bench"
    (folder / "pdfs").mkdir(parents=True)
    (folder / "t.jsonl").write_text("")
    return folder


def _argv(bench, tmp_path, *extra) -> list[str]:
    return ["--train_bench_data_folder", str(bench), "--reward_bench", "--num_generations", "4",
            "--gradient_accumulation_steps", "4", "--report_to", "none", "--output_dir", str(tmp_path / "out"),
            *extra]


def _config(bench, tmp_path, *extra, env=CPU, drop_knobs=False):
    from trl import GRPOConfig

    kwargs = grpo_config_kwargs(validate(parse_args(_argv(bench, tmp_path, *extra)), env), [1.0])
    if drop_knobs:  # what the CLI passed before these flags existed: no knob, then --olmorl's fixed values
        from olmocr_rl.olmorl.settings import olmorl_config_overrides

        kwargs = {k: v for k, v in kwargs.items() if k not in TRL_KNOB_FLAGS}
        if "--olmorl" in extra:
            kwargs.update(olmorl_config_overrides())
    return dataclasses.asdict(GRPOConfig(**kwargs))


def test_every_knob_is_in_the_table_of_this_test():
    assert set(NON_DEFAULT) == set(TRL_KNOB_FLAGS)


def test_help_lists_each_knob_with_its_trl_name_and_default():
    text = " ".join(build_parser().format_help().split())  # argparse wraps lines
    text = text[text.index("GRPO knobs (TRL GRPOConfig fields"):]  # the group, past the usage line
    for name in TRL_KNOB_FLAGS:
        match = re.search(rf"--{name} (?:\{{[^}}]*\}}|[A-Z_]+ )?(.*?)\(default: ([^)]*)\)", text)
        assert match, name
        assert f"TRL {name}:" in match.group(1), (name, match.group(1))
        assert match.group(2) == str(build_parser().get_default(name)), name
    assert "TRL: vllm_importance_sampling_clip_max" in " ".join(build_parser().format_help().split())


def test_knob_defaults_are_trls():
    from trl import GRPOConfig

    trl_defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    parser = build_parser()
    for name in TRL_KNOB_FLAGS:
        assert parser.get_default(name) == trl_defaults[name], name
    assert parser.get_default("vllm_importance_sampling_cap") == trl_defaults["vllm_importance_sampling_clip_max"]


@pytest.mark.parametrize("extra, env", [((), CPU), (("--olmorl",), CPU),
                                        (("--vllm_mode", "colocate"), CPU_VLLM),
                                        (("--vllm_mode", "server", "--olmorl"), CPU_VLLM)])
def test_no_knob_flag_builds_the_grpo_config_of_before_field_by_field(bench, tmp_path, extra, env):
    now = _config(bench, tmp_path, *extra, env=env)
    before = _config(bench, tmp_path, *extra, env=env, drop_knobs=True)
    assert now.keys() == before.keys()
    assert [k for k in now if now[k] != before[k]] == []


@pytest.mark.parametrize("name", TRL_KNOB_FLAGS)
def test_each_knob_changes_the_field_it_names(bench, tmp_path, name):
    value, derived = NON_DEFAULT[name]
    default = _config(bench, tmp_path)
    changed = _config(bench, tmp_path, f"--{name}", value)
    differs = {k for k in default if default[k] != changed[k]}
    assert name in differs and differs <= {name, *derived}, differs
    assert str(changed[name]).lower() == value


def test_the_cap_and_its_trl_alias_set_trls_clip_max(bench, tmp_path):
    for flag in ("--vllm_importance_sampling_cap", "--vllm_importance_sampling_clip_max"):
        config = _config(bench, tmp_path, flag, "20")
        assert config["vllm_importance_sampling_clip_max"] == 20.0
    assert _config(bench, tmp_path, "--vllm_importance_sampling_cap", "none",
                   "--vllm_importance_sampling_clip_min", "0.5")["vllm_importance_sampling_clip_max"] is None


def test_yaml_keys_and_none(bench, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("epsilon_high: 0.28\ndelta: null\nvllm_importance_sampling_clip_max: 12\ntop_k: 20\n")
    args = parse_args(_argv(bench, tmp_path, "--config", str(config)))
    assert (args.epsilon_high, args.delta, args.vllm_importance_sampling_cap, args.top_k) == (0.28, None, 12.0, 20)


def test_print_knows_the_knobs(capsys):
    from olmocr_rl.config.__main__ import main

    assert main(["--print", "epsilon_high"]) == 0 and capsys.readouterr().out.strip() == "null"
    assert main(["--print", "top_entropy_quantile", "--top_entropy_quantile", "0.2"]) == 0
    assert capsys.readouterr().out.strip() == "0.2"
    assert main(["--print", "vllm_importance_sampling_clip_max"]) == 0 and capsys.readouterr().out.strip() == "3.0"
    assert main(["--print-all"]) == 0
    values = json.loads(capsys.readouterr().out)
    assert set(TRL_KNOB_FLAGS) | {"console_detail_steps", "console_raw_metrics"} <= set(values)


@pytest.mark.parametrize("flag, value", [
    ("--epsilon", "0.28"), ("--epsilon_high", "0.28"), ("--delta", "2"), ("--top_entropy_quantile", "0.2"),
    ("--off_policy_mask_threshold", "0.5"), ("--entropy_coef", "0.01"),
    ("--multi_objective_aggregation", "normalize_then_sum"),
])
def test_olmorl_refuses_a_knob_it_fixes(bench, tmp_path, flag, value):
    with pytest.raises(ConfigError) as info:
        validate(parse_args(_argv(bench, tmp_path, "--olmorl", flag, value)), CPU)
    message = str(info.value)
    assert "--olmorl contradicts" in message and flag[2:] in message and "\n" not in message


def test_olmorl_accepts_a_knob_set_to_its_own_value(bench, tmp_path):
    validate(parse_args(_argv(bench, tmp_path, "--olmorl", "--epsilon", "0.2", "--epsilon_high", "0.272")), CPU)
    validate(parse_args(_argv(bench, tmp_path, "--olmorl", "--top_k", "20", "--mask_truncated_completions")), CPU)


@pytest.mark.parametrize("extra, expected", [
    (("--epsilon", "1.2"), "--epsilon must be in [0, 1)"),
    (("--epsilon_high", "-1"), "--epsilon_high must be >= 0"),
    (("--delta", "0.9"), "--delta caps the ratio and must be > 1"),
    (("--top_entropy_quantile", "1.5"), "--top_entropy_quantile must be in [0, 1]"),
    (("--off_policy_mask_threshold", "0"), "--off_policy_mask_threshold must be > 0"),
    (("--entropy_coef", "-0.1"), "--entropy_coef must be >= 0"),
    (("--steps_per_generation", "0"), "--steps_per_generation must be >= 1"),
    (("--num_generations_eval", "0"), "--num_generations_eval must be >= 1"),
    (("--top_k", "-1"), "--top_k must be >= 0"),
    (("--min_p", "2"), "--min_p must be in [0, 1]"),
    (("--repetition_penalty", "0"), "--repetition_penalty must be > 0"),
    (("--vllm_importance_sampling_clip_min", "3"), "must be below --vllm_importance_sampling_cap 3.0"),
    (("--vllm_importance_sampling_cap", "0"), "--vllm_importance_sampling_cap must be > 0"),
    (("--vllm_importance_sampling_mode", "token_truncate", "--vllm_importance_sampling_cap", "none"),
     "needs a bound"),
    (("--steps_per_generation", "2", "--generation_batch_size", "8"), "give at most one"),
    (("--generation_batch_size", "6", "--per_device_train_batch_size", "4"),
     "--generation_batch_size 6 must be a multiple of per_device_train_batch_size (4) x processes (1) = 4; use 8"),
    (("--steps_per_generation", "3"), "not a multiple of --num_generations 4; use a --steps_per_generation"),
    (("--olmorl", "--active_sampling", "--steps_per_generation", "8"),
     "--active_sampling needs steps_per_generation (8) equal to gradient_accumulation_steps (4)"),
    (("--eval_steps", "5", "--per_device_eval_batch_size", "2", "--num_generations_eval", "3"),
     "not a multiple of --num_generations_eval 3"),
    (("--console_detail_steps", "-1"), "--console_detail_steps must be >= 0"),
])
def test_bad_knob_values_get_one_line(bench, tmp_path, extra, expected):
    with pytest.raises(ConfigError) as info:
        validate(parse_args(_argv(bench, tmp_path, *extra)), CPU)
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_generation_batch_from_the_knobs_passes_geometry(bench, tmp_path):
    config = _config(bench, tmp_path, "--generation_batch_size", "12", "--num_generations", "4")
    assert (config["generation_batch_size"], config["steps_per_generation"]) == (12, 12)
    build_grpo_config(validate(parse_args(_argv(bench, tmp_path, "--eval_steps", "5", "--per_device_eval_batch_size",
                                                "2", "--num_generations_eval", "2")), CPU), [1.0])


@pytest.mark.parametrize("extra, env, warned", [
    (("--vllm_mode", "colocate", "--top_p", "0.9"), CPU_VLLM, "top_p=0.9"),
    (("--vllm_mode", "colocate", "--top_k", "50", "--min_p", "0.1"), CPU_VLLM, "top_k=50, min_p=0.1"),
    (("--vllm_mode", "server", "--generation_kwargs", '{"min_tokens": 256}'), CPU_VLLM, "min_tokens=256"),
    (("--vllm_mode", "colocate", "--repetition_penalty", "1.05"), CPU_VLLM, "repetition_penalty=1.05"),
    (("--vllm_mode", "colocate", "--top_p", "0.9", "--no-vllm_importance_sampling_correction"), CPU_VLLM, None),
    (("--vllm_mode", "none", "--top_p", "0.9"), CPU_VLLM, None),
    (("--vllm_mode", "colocate", "--generation_kwargs", '{"max_tokens": 10, "ignore_eos": true}'), CPU_VLLM, None),
    (("--vllm_mode", "colocate"), CPU_VLLM, None),
])
def test_truncated_or_penalised_sampling_with_is_correction_warns(bench, tmp_path, extra, env, warned):
    notices = [n for n in validate(parse_args(_argv(bench, tmp_path, *extra)), env).notices if "IS ratio" in n]
    if warned is None:
        assert notices == []
    else:
        assert len(notices) == 1 and notices[0].startswith(f"WARNING: {warned} with --vllm_importance_sampling")
