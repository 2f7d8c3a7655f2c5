"""Flag parsing, YAML merge and the one-line errors for bad flag combinations (no model loads)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from olmocr_rl.config import ConfigError, build_parser, parse_args, validate
from olmocr_rl.config.rewards import RewardValue


@pytest.fixture
def bench(tmp_path):
    folder = tmp_path / "bench"
    (folder / "pdfs").mkdir(parents=True)
    (folder / "test1.jsonl").write_text("")
    return folder


def _args(bench, *extra, env_world=None, monkeypatch=None):
    argv = ["--train_bench_data_folder", str(bench), "--reward_bench", "--num_generations", "4",
            "--gradient_accumulation_steps", "4", *extra]
    return parse_args(argv)


def _error(bench, *extra) -> str:
    args = _args(bench, *extra)
    with pytest.raises(ConfigError) as info:
        validate(args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_olmocr_defaults_are_kept(bench):
    args = parse_args(["--train_bench_data_folder", str(bench), "--reward_bench"])
    assert args.model_name == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert args.learning_rate == 2e-6 and args.warmup_steps == 100 and args.seed == 42
    assert args.num_generations == 28 and args.gradient_accumulation_steps == 8
    assert args.loss_type == "bnpo" and args.scale_rewards == "group" and args.beta == 0.0
    assert args.temperature == 0.8 and args.top_p == 1.0 and args.max_eval_samples == 10
    assert args.vllm_importance_sampling_correction is True
    assert args.vllm_importance_sampling_mode == "sequence_mask" and args.vllm_importance_sampling_cap == 3.0


def test_every_flag_has_help():
    parser = build_parser()
    for action in parser._actions:
        if action.dest != "help":
            assert action.help and len(action.help) > 10, action.dest


def test_reward_flags_bare_weight_and_path(bench):
    args = parse_args(["--train_bench_data_folder", str(bench), "--reward_bench", "--reward_eos", "0.5",
                       "--reward_bench_macroavg", str(bench / "test1.jsonl"), "--num_generations", "2",
                       "--gradient_accumulation_steps", "2"])
    resolved = validate(args)
    assert resolved.rewards["bench"] == RewardValue(1.0)
    assert resolved.rewards["eos"] == RewardValue(0.5)
    assert resolved.rewards["bench_macroavg"] == RewardValue(1.0, str((bench / "test1.jsonl").resolve()))
    assert "medoid" not in resolved.rewards
    assert list(resolved.rewards) == ["bench", "bench_macroavg", "eos"]  # olmOCR's order, whatever the flags' order


def test_continuous_bench_reward_flags(bench):
    args = parse_args(["--train_bench_data_folder", str(bench), "--reward_bench_continuous",
                       "--reward_bench_continuous_macroavg", str(bench / "test1.jsonl"), "--num_generations", "2",
                       "--gradient_accumulation_steps", "2"])
    resolved = validate(args)
    assert resolved.rewards == {"bench_continuous": RewardValue(1.0), "bench_continuous_macroavg":
                                RewardValue(1.0, str((bench / "test1.jsonl").resolve()))}
    assert "JSONL file not found" in _error(bench, "--reward_bench_continuous", "nope.jsonl")


def test_the_resolved_config_declares_one_field_per_flag():
    """Flags are added in parallel: a flag without its typed field (or a field without its flag) fails here,
    saying exactly what to write."""
    from olmocr_rl.config.resolved import flags_without_field

    missing, extra = flags_without_field()
    assert not missing, ("declare a field in ResolvedConfig (olmocr_rl/config/resolved.py, in the flag's group) "
                         "for each new flag: " + "; ".join(f"{name}: <its type after parsing>" for name in missing))
    assert not extra, f"ResolvedConfig declares {extra}, which no flag of config/flags.py has: remove the field(s)"


def test_a_new_flag_is_one_declaration(bench, tmp_path, monkeypatch, capsys):
    """One field in the declaration (options.ResolvedConfig) gives the flag everything: --help in its group, the
    parsed default, the command line, an alias, --no-X for a boolean, a --config YAML key, --print, the chosen-flags
    record, the resolved config's attribute and the GRPOConfig field it feeds."""
    from olmocr_rl.config import explicit_flags, options
    from olmocr_rl.config.__main__ import main as print_main
    from olmocr_rl.config.grpo import grpo_config_kwargs
    from olmocr_rl.config.resolved import flags_without_field

    @dataclasses.dataclass(frozen=True)
    class WithNewFlags(options.ResolvedConfig):
        brand_new_flag: int = options.flag(options.DATA, 3, "a flag someone just added",
                                           aliases=("--brand_new_alias",), grpo="brand_new_field")
        brand_new_switch: bool = options.flag(options.SPEED, True, "a switch someone just added")

    monkeypatch.setattr(options, "ResolvedConfig", WithNewFlags)
    helptext = build_parser().format_help()
    data_group = helptext.split("\ndata:\n")[1].split("\n\n")[0]
    assert "--brand_new_flag BRAND_NEW_FLAG, --brand_new_alias BRAND_NEW_FLAG" in data_group
    assert "a flag someone just added (default: 3)" in " ".join(data_group.split())
    assert "--brand_new_switch [BRAND_NEW_SWITCH], --no-brand_new_switch [BRAND_NEW_SWITCH]" in helptext
    assert flags_without_field() == ([], [])
    base = ["--train_bench_data_folder", str(bench), "--reward_bench", "--num_generations", "4",
            "--gradient_accumulation_steps", "4"]
    assert (parse_args(base).brand_new_flag, parse_args(base).brand_new_switch) == (3, True)
    assert "brand_new_flag" not in explicit_flags(base)
    assert parse_args([*base, "--brand_new_alias", "5", "--no-brand_new_switch"]).brand_new_flag == 5
    config = tmp_path / "new.yaml"
    config.write_text("brand_new_alias: 7\nbrand_new_switch: false\n")
    args = parse_args([*base, "--config", str(config)])
    assert (args.brand_new_flag, args.brand_new_switch) == (7, False)
    assert {"brand_new_flag", "brand_new_switch"} <= explicit_flags([*base, "--config", str(config)])
    assert print_main(["--print", "brand_new_alias", *base, "--config", str(config)]) == 0
    assert capsys.readouterr().out == "7\n"
    with pytest.raises(SystemExit):
        parse_args([*base, "--brand_new_flag", "x"])
    assert "error: argument --brand_new_flag/--brand_new_alias: invalid int value: 'x'" in capsys.readouterr().err
    cfg = validate(args)
    assert isinstance(cfg, WithNewFlags) and (cfg.brand_new_flag, cfg.brand_new_switch) == (7, False)
    assert grpo_config_kwargs(cfg, [1.0])["brand_new_field"] == 7


def _matches(value, hint) -> bool:
    """``value`` is of the declared type (the unions, tuples and mappings ResolvedConfig uses)."""
    import collections.abc
    import types
    import typing

    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is typing.Any:
        return True
    if origin is tuple:
        return isinstance(value, tuple) and all(_matches(v, typing.get_args(hint)[0]) for v in value)
    if origin in (collections.abc.Mapping, typing.Mapping) or hint is typing.Mapping:
        return isinstance(value, collections.abc.Mapping)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


@pytest.mark.parametrize("extra", [(), ("--bench_type_filter", "table", "--max_train_samples", "3", "--eval_steps", "2",
                                        "--per_device_eval_batch_size", "4", "--generation_kwargs", '{"a": [1]}',
                                        "--resume_from_checkpoint", "--report_to", "tensorboard", "--olmorl")])
def test_each_field_holds_a_value_of_its_declared_type(bench, extra):
    import typing

    from olmocr_rl.config.resolved import ResolvedConfig

    cfg = validate(_args(bench, *extra))
    hints = typing.get_type_hints(ResolvedConfig)
    wrong = {name: (getattr(cfg, name), hint) for name, hint in hints.items() if not _matches(getattr(cfg, name), hint)}
    assert not wrong, wrong


def test_booleans_can_be_switched_off(bench):
    args = _args(bench, "--vllm_importance_sampling_correction", "False")
    assert args.vllm_importance_sampling_correction is False
    args = _args(bench, "--no-vllm_importance_sampling_correction")
    assert args.vllm_importance_sampling_correction is False
    args = _args(bench, "--olmorl")
    assert args.olmorl is True


def test_yaml_config_and_command_line_override(bench, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"train_bench_data_folder: {bench}\nreward_bench: 1.0\nnum_generations: 4\n"
                   "gradient_accumulation_steps: 4\nlearning_rate: 1.0e-4\nolmorl: true\n"
                   "bench_type_filter: [present, table]\n")
    args = parse_args(["--config", str(cfg), "--learning_rate", "3e-5"])
    assert args.learning_rate == 3e-5 and args.olmorl is True and args.num_generations == 4
    assert args.bench_type_filter == ["present", "table"]
    validate(args)


@pytest.mark.parametrize("body, expected", [
    ("learning_rat: 1\n", "unknown key 'learning_rat'"),
    ("num_generations: many\n", "key 'num_generations'"),
    ("- a\n- b\n", "expected a mapping"),
    ("a: [\n", "not valid YAML"),
    ("vllm_mode: sometimes\n", "key 'vllm_mode'"),
    ("learning_rate: [1]\n", "key 'learning_rate': expected a single value, got a list"),
    ("temperature: {a: 1}\n", "key 'temperature': expected a single value, got a mapping"),
    ("max_steps: 1.5\n", "key 'max_steps'"),
    ("generation_kwargs: [1]\n", "key 'generation_kwargs': expected a single value, got a list"),
])
def test_bad_yaml_config(tmp_path, capsys, body, expected):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(body)
    with pytest.raises(SystemExit) as info:
        parse_args(["--config", str(cfg)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and str(cfg) in err


@pytest.mark.parametrize("extra, expected", [
    (["--loss_type", "policy"], "'policy' is not a loss type"),
    (["--loss_type", "exo"], "'exo' is not a loss type"),
    (["--scale_rewards", "sometimes"], "choose group, batch or none"),
    (["--num_generations", "3"], "--gradient_accumulation_steps 3"),
    (["--num_generations", "1"], "--num_generations must be >= 2"),
    (["--learning_rate", "0"], "--learning_rate must be > 0"),
    (["--max_steps", "0"], "--max_steps must be a positive number"),
    (["--temperature", "0"], "--temperature must be > 0"),
    (["--top_p", "1.5"], "--top_p must be in (0, 1]"),
    (["--jsonl_filter", "("], "not a valid regex"),
    (["--bench_type_filter", "tables"], "unknown test type"),
    (["--eval_steps", "10"], "eval geometry"),
    (["--eval_steps", "0"], "--eval_steps must be > 0"),
    (["--olmorl", "--beta", "0.01"], "--olmorl needs beta=0.0"),
    (["--olmorl", "--loss_type", "grpo"], "--olmorl needs loss_type='dapo'"),
    (["--olmorl", "--importance_sampling_level", "sequence"], "--olmorl needs importance_sampling_level='token'"),
    (["--olmorl", "--loss_type", "bnpo"], "--olmorl needs loss_type='dapo'"),  # the default value, but chosen
    (["--olmorl", "--scale_rewards", "group"], "--olmorl needs scale_rewards"),
    (["--max_train_samples", "0"], "--max_train_samples must be > 0"),
    (["--eval_steps", "5", "--max_eval_samples", "0"], "--max_eval_samples must be > 0"),
    (["--active_sampling"], "--active_sampling refills the groups that --olmorl drops; add --olmorl"),
    (["--olmorl", "--active_sampling", "--active_sampling_max_rounds", "0"], "--active_sampling_max_rounds must be >= 1"),
    (["--reward_bench", "x.jsonl"], "JSONL file not found"),
    (["--reward_eos", "nan"], "must be a finite number"),
    (["--report_to", "mlflow"], "choose wandb, tensorboard or none"),
    (["--s3_save_path", "bucket/x"], "expected s3://"),
    (["--resume_from_checkpoint", "/no/such/ckpt"], "no such checkpoint folder"),
    (["--eval_bench_data_folder", "/no/such/dir"], "folder not found"),
])
def test_bad_combinations_get_one_line_errors(bench, extra, expected):
    assert expected in _error(bench, *extra)


def test_no_reward_lists_every_reward_flag(bench):
    args = parse_args(["--train_bench_data_folder", str(bench), "--num_generations", "2"])
    with pytest.raises(ConfigError) as info:
        validate(args)
    for flag in ("--reward_bench", "--reward_bench_macroavg", "--reward_front_matter", "--reward_eos",
                 "--reward_medoid", "--reward_bench_edit_distance", "--reward_element_count", "--reward_rect_tables"):
        assert flag in str(info.value)


def test_missing_train_folder(tmp_path):
    args = parse_args(["--reward_bench"])
    with pytest.raises(ConfigError, match="--train_bench_data_folder is required"):
        validate(args)
    args = parse_args(["--reward_bench", "--train_bench_data_folder", str(tmp_path / "nope")])
    with pytest.raises(ConfigError, match="folder not found"):
        validate(args)


def test_geometry_counts_processes(bench, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "7")
    # 1 x 7 x 4 = 28 completions: divisible by 28, fine; by 8 not.
    validate(parse_args(["--train_bench_data_folder", str(bench), "--reward_bench",
                         "--gradient_accumulation_steps", "4", "--num_generations", "28"]))
    with pytest.raises(ConfigError, match=r"processes \(7\)"):
        validate(parse_args(["--train_bench_data_folder", str(bench), "--reward_bench",
                             "--gradient_accumulation_steps", "4", "--num_generations", "8"]))


def test_guide_command_lines(bench):
    """Command lines from published guides: run with their evident meaning or stop with a fix."""
    args = parse_args(["--train_bench_data_folder", str(bench), "--output_dir", "./grpo_checkpoints",
                       "--model_name", "Qwen/Qwen2.5-VL-7B-Instruct", "--per_device_train_batch_size", "2",
                       "--learning_rate", "5e-5", "--num_iterations", "5000", "--logging_steps", "100",
                       "--save_steps", "500", "--macro_average", "--num_generations", "2"])
    resolved = validate(args)
    assert resolved.rewards == {"bench_macroavg": RewardValue(1.0)}
    assert any("--max_steps 5000" in n for n in resolved.notices)

    args = parse_args(["--train_bench_data_folder", str(bench), "--output_dir", "./output", "--reward_bench",
                       str(bench / "test1.jsonl"), "--beta", "0.1", "--num_iterations", "5", "--num_completions", "8",
                       "--loss_type", "grpo", "--scale_rewards", "true", "--reward_bench_macroavg",
                       str(bench / "test1.jsonl"), "--vllm_mode", "colocate"])
    assert args.num_generations == 8
    if importlib.util.find_spec("vllm") is None:  # an explicit colocate that cannot run is an error, not HF
        with pytest.raises(ConfigError, match=r"--vllm_mode colocate needs vLLM importable"):
            validate(args)
        args.vllm_mode = "none"
    resolved = validate(args)
    assert resolved.scale_rewards == "group" and args.scale_rewards == "true"  # resolved, args as given
    assert resolved.vllm_mode == ("none" if importlib.util.find_spec("vllm") is None else "colocate")
    # The same line with the guide's `--loss_type "policy"` stops with the list of loss types.
    args.loss_type = "policy"
    with pytest.raises(ConfigError, match="choose one of grpo, bnpo"):
        validate(args)


def test_default_batch_geometry_on_one_process_names_the_fix(bench):
    """olmOCR's defaults (batch 1 x accumulation 8, 28 generations) fit 7 processes, not one."""
    with pytest.raises(ConfigError, match=r"Use --gradient_accumulation_steps 28 \(any multiple of 28\)"):
        validate(parse_args(["--train_bench_data_folder", str(bench), "--reward_bench"]))


def test_log_multimodal_is_off_unless_asked(bench, tmp_path):
    """TRL's own default gathers and logs page images every generation; ours does only with the flag."""
    from olmocr_rl.config import build_grpo_config

    for extra, expected in (((), False), (("--log_multimodal",), True)):
        args = _args(bench, "--output_dir", str(tmp_path / "out"), "--report_to", "none", *extra)
        config = build_grpo_config(validate(args), [1.0])
        assert config.log_multimodal is expected and config.log_completions is True


def test_router_aux_loss_coef_defaults_to_the_models_and_reaches_grpo_config(bench, tmp_path):
    """None (the default) lets TRL take the MoE config's own weight; a value overrides it; negative is refused."""
    from olmocr_rl.config import build_grpo_config

    for extra, expected in (((), None), (("--router_aux_loss_coef", "0.05"), 0.05), (("--router_aux_loss_coef", "0"), 0.0)):
        args = _args(bench, "--output_dir", str(tmp_path / "out"), "--report_to", "none", *extra)
        assert build_grpo_config(validate(args), [1.0]).router_aux_loss_coef == expected
    assert _error(bench, "--router_aux_loss_coef", "-0.1").startswith("--router_aux_loss_coef must be >= 0 (got -0.1)")


def test_active_sampling_flags(bench):
    args = _args(bench, "--olmorl", "--active_sampling")
    validate(args)
    assert (args.active_sampling, args.active_sampling_max_rounds) == (True, 4)
    assert _args(bench).active_sampling is False


def test_active_sampling_needs_whole_groups_per_process(bench, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    validate(_args(bench, "--olmorl", "--gradient_accumulation_steps", "2"))  # 2 x 2 = 4 rows: groups may span processes
    message = _error(bench, "--olmorl", "--active_sampling", "--gradient_accumulation_steps", "2")
    assert "--active_sampling" in message and "each process must hold whole groups" in message


def test_a_warning_notice_is_logged_once(tmp_path, capsys):
    """Validation collects notices; the entrypoint logs each once (the num_iterations one used to appear twice)."""
    from conftest import BENCH_DATA_SAMPLE
    from olmocr_rl import grpo_train

    code = grpo_train.main([
        "--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--model_name", str(tmp_path / "no-model"),
        "--output_dir", str(tmp_path / "out"), "--reward_bench", "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--report_to", "none",
        "--num_iterations", "5000",
    ])
    err = capsys.readouterr().err
    assert code == 1 and "no-model" in err  # stopped at the model, after the notices
    assert err.count("is GRPO's mu") == 1 and "WARNING" in err


@pytest.mark.parametrize("value, expected", [
    ("[1]", "expected a JSON object"),
    ("5", "expected a JSON object"),
    ("{bad", "not valid JSON"),
])
def test_generation_kwargs_must_be_a_json_object(capsys, value, expected):
    with pytest.raises(SystemExit) as info:
        parse_args(["--generation_kwargs", value])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: argument --generation_kwargs:") and expected in err and len(err.splitlines()) == 1
    assert parse_args(["--generation_kwargs", '{"min_new_tokens": 4}']).generation_kwargs == {"min_new_tokens": 4}


def test_a_jsonl_for_a_reward_that_is_not_per_file_is_refused_by_the_parser(capsys):
    """Whether or not the file exists: the fix is a weight, not another path."""
    with pytest.raises(SystemExit) as info:
        parse_args(["--reward_eos", "x.jsonl"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: argument --reward_eos: --reward_eos takes a weight, not a JSONL path "
                   "(only bench rewards are per-file)")


def test_a_checkpoint_between_the_updates_of_one_generation_batch_is_flagged():
    """With --num_iterations 2 a resume from an odd step samples the batch again (measured: rewards of the
    following steps differ by ~0.03); the trainer says so at start and names the --save_steps to use."""
    sample = Path(__file__).resolve().parents[2] / "bench_data_sample"
    base = ["--train_bench_data_folder", str(sample), "--reward_bench", "--vllm_mode", "none",
            "--num_generations", "2", "--gradient_accumulation_steps", "2", "--num_iterations", "2"]
    flagged = [n for n in validate(parse_args([*base, "--save_steps", "3"])).notices if "--save_steps" in n]
    assert len(flagged) == 1 and flagged[0].endswith("use --save_steps 4"), flagged
    assert not [n for n in validate(parse_args([*base, "--save_steps", "4"])).notices if "--save_steps" in n]


def test_speed_flags_their_defaults_spellings_and_errors(bench, tmp_path, capsys):
    args = parse_args(["--train_bench_data_folder", str(bench), "--reward_bench"])
    assert (args.share_page_processing, args.padding_free, args.compiled_generation, args.profile_step) == \
        (True, True, None, None)
    assert args.gradient_checkpointing == "auto"
    for given, value in (([], "true"), (["false"], "false"), (["0"], "false"), (["vision"], "vision"),
                         (["AUTO"], "auto")):
        assert _args(bench, "--gradient_checkpointing", *given).gradient_checkpointing == value
    assert _args(bench, "--no-gradient_checkpointing").gradient_checkpointing == "false"
    config = tmp_path / "c.yaml"
    config.write_text("gradient_checkpointing: true\npadding_free: false\n")
    from_yaml = parse_args(["--config", str(config)])
    assert (from_yaml.gradient_checkpointing, from_yaml.padding_free) == ("true", False)
    with pytest.raises(SystemExit):
        parse_args(["--gradient_checkpointing", "sometimes"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected auto, true, false or vision, got 'sometimes'" in err
    assert "--profile_step must be > 0 (got 0)" in _error(bench, "--profile_step", "0")


def test_trls_own_config_checks_run_before_the_model_loads(tmp_path, monkeypatch, capsys):
    """GRPOConfig is built in the preflight: whatever TRL's __post_init__ refuses stops the run in one line,
    before any model loads (it used to be built after the model, minutes in)."""
    from trl import GRPOConfig

    from conftest import BENCH_DATA_SAMPLE
    from olmocr_rl import grpo_train

    def refuse(self):
        raise ValueError("generation_batch_size (3) must be divisible by num_generations (2).")

    def no_loading(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(GRPOConfig, "__post_init__", refuse)
    monkeypatch.setattr("olmocr_rl.model.loading.load_model_and_processor", no_loading)
    code = grpo_train.main([
        "--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--model_name", str(tmp_path / "no-model"),
        "--output_dir", str(tmp_path / "out"), "--reward_bench", "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--report_to", "none",
    ])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and err == ["error: TRL's GRPOConfig refuses these settings: generation_batch_size (3) must be "
                                 "divisible by num_generations (2)."]


def test_the_grpo_config_built_before_loading_gets_the_pad_tokens_once_the_tokenizer_is_there(bench):
    """The one value that needs the tokenizer (vLLM's banned vision pad tokens) is added after loading."""
    from types import SimpleNamespace

    from olmocr_rl.config import build_grpo_config
    from olmocr_rl.config.grpo import ban_vision_pad_tokens

    cfg = validate(_args(bench, "--report_to", "none", "--generation_kwargs", '{"min_tokens": 2}'))
    config = build_grpo_config(cfg)
    assert config.reward_weights == [1.0] and config.generation_kwargs == {"min_tokens": 2}
    tokenizer = SimpleNamespace(unk_token_id=0, convert_tokens_to_ids={"<|image_pad|>": 5, "<|video_pad|>": 6}.get)
    ban_vision_pad_tokens(config, cfg, tokenizer)  # HF generation (CPU): nothing to ban
    assert config.generation_kwargs == {"min_tokens": 2}
    vllm_cfg = dataclasses.replace(cfg, vllm_mode="server")
    ban_vision_pad_tokens(config, vllm_cfg, tokenizer)
    assert config.generation_kwargs == {"min_tokens": 2, "bad_words": ["<|image_pad|>", "<|video_pad|>"]}
