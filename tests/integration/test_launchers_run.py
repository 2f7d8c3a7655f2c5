"""The launchers run: each user-facing script in --dry-run (its printed commands parse back with shlex), the
Slurm job requeued on USR1 (after its training step saved) and on a step that exits 75, a Beaker submission and
task against fake cluster tools (vLLM health check, the server stopped after training, SIGTERM passed on to
training and status 75), and a real 2-process CPU run of the CLI through accelerate launch.

The pure plan and the front-ends in-process: tests/unit/test_launchers.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import warm_python
import yaml

from olmocr_rl.launch import beaker

from launcher_helpers import (  # noqa: F401  (fake_bin: a pytest fixture)
    ACCELERATE_CONFIGS,
    BEAKER,
    REPO,
    SBATCH,
    SUBMIT,
    TASK,
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


def test_slurm_submit_dry_run_script():
    """The one Slurm dry run through the user-facing script: sbatch command, then each node's."""
    out = run(["bash", str(SUBMIT), "--dry-run", "--nodes", "3", "--gpus-per-node", "8", "--partition", "gpu",
               "--time", "2-00:00:00", "--sbatch-arg=--constraint=h100", "--vllm-node", "--",
               "--reward_bench", "--wandb_run_name", "x y"], env={"PATH": f"/nonexistent:{os.environ['PATH']}"}).stdout
    cmds = commands(out)
    (sbatch,) = only(cmds, "sbatch")
    assert sbatch[:4] == ["sbatch", "--nodes=3", "--gpus-per-node=8", "--job-name=olmocr-grpo"]
    assert "--partition=gpu" in sbatch and "--time=2-00:00:00" in sbatch and "--constraint=h100" in sbatch
    script = sbatch.index(str(SBATCH))
    assert sbatch[script + 1 :] == ["--gpus-per-node", "8", "--vllm-node", "--", "--reward_bench",
                                    "--wandb_run_name", "x y"]
    (vllm,) = only(cmds, "vllm")
    assert "--nodelist=node-2" in vllm
    nodes = only(cmds, "train node")
    assert [flag(a, "--machine_rank") for a in nodes] == ["0", "1"]
    assert flag(trainer_args(nodes[0]), "--wandb_run_name") == "x y"


@pytest.mark.parametrize("args, message", [
    (["--nodes", "1", "--vllm-gpus", "8"], "--vllm-gpus 8 leaves no training GPU of 8"),
    (["--nodes=2", "--vllm-gpus=1"], "add --vllm-node"),
    (["--accelerate-config", "zero9"], "--accelerate-config zero9: no such file"),
    (["--vllm-health-timeout", "soon"], "--vllm-health-timeout 'soon'"),
    (["--", "--bogus"], "unrecognized arguments: --bogus"),
    (["--", "--config", "configs/x.yaml"], "--config configs/x.yaml: no such file"),
])
def test_slurm_submit_plans_the_job_before_sbatch(tmp_path, fake_bin, args, message):
    """A real submit builds the job's plan first: what the job would refuse is never queued."""
    fake_tool(fake_bin, "sbatch", 'echo "sbatch $*" >> "$FAKE_LOG"\n')
    log = tmp_path / "fake.log"
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log)}
    result = run(["bash", str(SUBMIT), *args, "--reward_bench"] if "--" in args else
                 ["bash", str(SUBMIT), *args, "--", "--reward_bench"], env=env, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not log.exists()  # sbatch never called
    assert result.stdout == ""  # the check prints nothing


def test_slurm_submit_calls_sbatch_when_the_plan_holds(tmp_path, fake_bin):
    fake_tool(fake_bin, "sbatch", 'printf "%s\\n" "$@" > "$FAKE_LOG"\n')
    log = tmp_path / "fake.log"
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log)}
    result = run(["bash", str(SUBMIT), "--nodes=2", "--partition=gpu", "--", "--reward_bench"], env=env)
    assert result.stdout == "" and result.stderr == ""
    argv = log.read_text().splitlines()
    assert argv[:2] == ["--nodes=2", "--gpus-per-node=8"] and "--partition=gpu" in argv
    assert argv[-4:] == ["--gpus-per-node", "8", "--", "--reward_bench"]


def test_slurm_requeues_on_usr1_and_resumes_in_same_dir(tmp_path, fake_bin):
    """Real (not dry) run with fake srun: USR1 makes the job requeue itself; a restart gets the same
    output dir and --resume_from_checkpoint, so the trainer resumes."""
    fake_tool(fake_bin, "srun", 'printf "%s\\n" "$@" > "$FAKE_DIR/srun.$SLURM_RESTART_COUNT"; exec sleep 20\n')
    env = {**slurm_env("gpu01", 1), "PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "fake.log"),
           "FAKE_DIR": str(tmp_path), "SLURM_RESTART_COUNT": "0"}
    fake_tool(fake_bin, "scontrol", 'echo "scontrol $*" >> "$FAKE_LOG"; [[ "$1" != show ]] || echo "$3"\n')
    proc = subprocess.Popen(["bash", str(SBATCH), "--gpus-per-node", "2", "--", "--reward_bench"], cwd=REPO,
                            env={**os.environ, "PYTHON": sys.executable, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
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
    assert "job script exiting with status 0" in err
    first = (tmp_path / "srun.0").read_text().splitlines()

    # The requeued start (same job id, restart count 1) trains into the same folder, resuming.
    fake_tool(fake_bin, "srun", 'printf "%s\\n" "$@" > "$FAKE_DIR/srun.$SLURM_RESTART_COUNT"\n')
    run(["bash", str(SBATCH), "--gpus-per-node", "2", "--", "--reward_bench"], env={**env, "SLURM_RESTART_COUNT": "1"})
    second = (tmp_path / "srun.1").read_text().splitlines()
    assert flag(first, "--output_dir") == flag(second, "--output_dir") == str(REPO / "checkpoints" / "grpo-test-4242")
    assert "--resume_from_checkpoint" in first and "--resume_from_checkpoint" in second


def start_sbatch(tmp_path: Path, fake_bin: Path, srun_body: str) -> tuple[subprocess.Popen, dict]:
    """The job script (real, not dry) with a fake srun and scontrol that log what they are asked."""
    fake_tool(fake_bin, "srun", srun_body)
    fake_tool(fake_bin, "scontrol", 'echo "scontrol $*" >> "$FAKE_LOG"; [[ "$1" != show ]] || echo "$3"\n')
    env = {**slurm_env("gpu01", 1), "PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "fake.log"),
           "FAKE_DIR": str(tmp_path), "SLURM_RESTART_COUNT": "0"}
    proc = subprocess.Popen(["bash", str(SBATCH), "--gpus-per-node", "2", "--", "--reward_bench"], cwd=REPO,
                            env={**os.environ, "PYTHON": sys.executable, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, env


def test_slurm_usr1_lets_the_training_step_save_before_the_job_requeues(tmp_path, fake_bin):
    """USR1: the step gets SIGTERM and takes 1 s to save; the requeue comes after it ended, not before (a requeue
    would make Slurm kill the step within KillWait)."""
    proc, _env = start_sbatch(tmp_path, fake_bin, textwrap.dedent("""\
        trap 'echo "step got TERM" >> "$FAKE_LOG"; sleep 1; echo "step saved" >> "$FAKE_LOG"; kill $! 2>/dev/null; exit 1' TERM
        touch "$FAKE_DIR/srun.started"; sleep 30 >/dev/null 2>&1 & wait
    """))
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "srun.started").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert (tmp_path / "fake.log").read_text().splitlines() == ["step got TERM", "step saved", "scontrol requeue 4242"]
    assert "job script exiting with status 0" in err


def test_slurm_requeues_a_training_step_that_exits_preempted(tmp_path, fake_bin):
    proc, _env = start_sbatch(tmp_path, fake_bin, "exit 75\n")  # the trainers were stopped by a signal of their own
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert (tmp_path / "fake.log").read_text().splitlines() == ["scontrol requeue 4242"]
    assert "the training step was stopped by a signal (status 75): requeueing" in err


def test_the_beaker_task_passes_sigterm_to_training_and_exits_75(tmp_path, fake_bin):
    fake_tool(fake_bin, "accelerate", textwrap.dedent("""\
        trap 'sleep 1; echo "saved after TERM" > "$FAKE_DIR/train"; exit 1' TERM
        touch "$FAKE_DIR/train.started"; sleep 30 & wait
    """))
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path)}
    proc = subprocess.Popen(task_cmd(tmp_path / "out", vllm_gpus=0), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHON": sys.executable, **env})
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "train.started").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # Beaker stopping or preempting the job
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 75, err
    assert (tmp_path / "train").read_text().strip() == "saved after TERM"
    assert "SIGTERM: passed on to the trainer" in err and "task exiting with status 75" in err


def beaker_dry_run(*args: str, env: dict | None = None) -> tuple[dict, list[tuple[str, list[str]]], str]:
    """The one Beaker dry run through the user-facing script; returns (spec, commands, stdout)."""
    out = run(["bash", str(BEAKER), "--dry-run", "--beaker-user", "tester", *args], env=env).stdout
    spec_text = out.split(beaker.SPEC_HEADER, 1)[1].split(beaker.COMMANDS_HEADER, 1)[0]
    return yaml.safe_load(spec_text), commands(out.split(beaker.COMMANDS_HEADER, 1)[1]), out


def test_beaker_dry_run_script(tmp_path, fake_bin):
    import olmocr_rl

    for tool in ("docker", "beaker"):
        fake_tool(fake_bin, tool, f'echo "{tool} $*" >> "$FAKE_LOG"; exit 1\n')
    log = tmp_path / "fake.log"
    user_args = ["--model_name", "s3://bucket/models/sft 7b", "--train_bench_data_folder", "s3://bucket/mix/bench_data",
                 "--reward_bench", "1.0", "--wandb_run_name", "seed 1 run", "--jsonl_filter", "arxiv math|tables"]
    spec, cmds, out = beaker_dry_run("--name", "run-a", "--preemptible", "--", *user_args,
                                     env={"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log)})
    assert not log.exists()  # neither docker nor beaker touched
    task = spec["tasks"][0]
    assert task["resources"]["gpuCount"] == 8 and task["context"] == {"priority": "high", "preemptible": True}
    assert task["arguments"][task["arguments"].index("--") + 1 :] == user_args
    assert task["command"] == ["bash", f"{beaker.IMAGE_REPO_DIR}/scripts/beaker/task.sh"]
    m = re.fullmatch(r"tester/olmocr-grpo-(.+?)-([0-9a-f]{10}|nogit)(-dirty-\d{14})?", task["image"]["beaker"])
    assert m and m.group(1) == olmocr_rl.__version__
    (docker,) = only(commands(out), "docker")
    assert docker[docker.index("-t") + 1] == task["image"]["beaker"].split("/", 1)[1]
    assert only(cmds, "sync") == [["s5cmd", "sync", "s3://bucket/models/sft 7b/*", "/data/bucket/models/sft 7b/"],
                                  ["s5cmd", "sync", "s3://bucket/mix/bench_data/*", "/data/bucket/mix/bench_data/"]]
    (vllm,) = only(cmds, "vllm")
    (train,) = only(cmds, "train")
    assert visible_devices(vllm) == "7" and visible_devices(train) == "0,1,2,3,4,5,6"
    t = trainer_args(train)
    assert flag(vllm, "--model") == flag(t, "--model_name") == "/data/bucket/models/sft 7b"
    assert flag(t, "--output_dir") == "/tmp/checkpoints/run-a" and flag(t, "--wandb_run_name") == "seed 1 run"
    assert flag(t, "--s3_save_path") == "s3://ai2-oe-data/olmocr-grpo-checkpoints/run-a"
    assert flag(t, "--jsonl_filter") == "arxiv math|tables" and flag(t, "--vllm_server_host") == "127.0.0.1"


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
    assert f"beaker image create --workspace ai2/mine --name {tag} {tag}" in calls
    submitted = json.loads(spec_file.read_text())
    task = submitted["spec"]["tasks"][0]
    assert submitted["name"] == "real-run" and task["image"]["beaker"] == f"alice/{tag}"
    assert task["constraints"]["cluster"] == ["ai2/x"]
    assert task["arguments"][-3:] == ["--reward_bench", "--wandb_project", "p q"]


def task_cmd(output_dir: Path, vllm_gpus: int = 1, timeout: int = 30) -> list[str]:
    return ["bash", str(TASK), "--train-gpus", "3", "--vllm-gpus", str(vllm_gpus), "--nodes", "1",
            "--accelerate-config", "configs/accelerate/zero2.yaml", "--output-dir", str(output_dir),
            "--s3-save-path", "", "--data-root", str(output_dir / "data"), "--run-name", "rt",
            "--main-process-port", "29501", "--vllm-port", "8011", "--vllm-gpu-memory-utilization", "0.5",
            "--vllm-max-model-len", "4096", "--vllm-health-timeout", str(timeout), "--",
            # (4096 must exceed the completion length: the prompt needs room)
            "--reward_bench", "--max_completion_length", "2000", "--wandb_project", "my project"]


def _gone(pid: str) -> bool:
    time.sleep(0.2)
    return not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_task_waits_for_health_runs_training_and_stops_server(tmp_path, fake_bin):
    fake_tool(fake_bin, "trl", 'echo "$$ $CUDA_VISIBLE_DEVICES $*" > "$FAKE_DIR/server"; exec sleep 60\n')
    # Healthy only once the server has started (its pid file exists).
    fake_tool(fake_bin, "curl", '[[ -f "$FAKE_DIR/server" ]]\n')
    fake_tool(fake_bin, "accelerate", 'printf "%s\\n" "$CUDA_VISIBLE_DEVICES" "$@" > "$FAKE_DIR/train"\n')
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path), "GRPO_HEALTH_POLL_S": "0.1"}
    run(task_cmd(tmp_path / "out"), env=env)
    server_pid, server_gpus, *server_args = (tmp_path / "server").read_text().split()
    assert server_gpus == "3" and server_args[:1] == ["vllm-serve"]
    assert flag(server_args, "--max_model_len") == "4096" and flag(server_args, "--port") == "8011"
    train = (tmp_path / "train").read_text().splitlines()
    assert train[0] == "0,1,2"
    assert train[train.index("--wandb_project") + 1] == "my project"
    assert train[train.index("--vllm_server_port") + 1] == "8011"
    assert _gone(server_pid)  # stopped with its process group when the task ended


def test_task_fails_clearly_when_server_never_healthy(tmp_path, fake_bin):
    fake_tool(fake_bin, "trl", 'echo "$$" > "$FAKE_DIR/server"; echo "loading weights..."; exec sleep 60\n')
    fake_tool(fake_bin, "curl", "exit 7\n")
    fake_tool(fake_bin, "accelerate", 'touch "$FAKE_DIR/train"\n')
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path), "GRPO_HEALTH_POLL_S": "0.2"}
    started = time.monotonic()
    result = run(task_cmd(tmp_path / "out", timeout=2), env=env, check=False)
    assert result.returncode != 0 and time.monotonic() - started < 20
    assert "was not healthy after 2s" in result.stderr
    assert "loading weights..." in result.stderr  # the server log's tail is shown
    assert not (tmp_path / "train").exists()
    assert _gone((tmp_path / "server").read_text().strip())


def test_task_fails_fast_when_server_exits(tmp_path, fake_bin):
    fake_tool(fake_bin, "trl", 'echo "CUDA out of memory"; exit 1\n')
    fake_tool(fake_bin, "curl", "exit 7\n")
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "GRPO_HEALTH_POLL_S": "0.1"}
    result = run(task_cmd(tmp_path / "out", timeout=300), env=env, check=False, timeout=30)
    assert result.returncode != 0
    assert "exited before becoming healthy" in result.stderr and "CUDA out of memory" in result.stderr


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
        "--main_process_port", str(free_port()),
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
    result = warm_python.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)  # workers forked
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    assert "no checkpoint in" in result.stderr + result.stdout  # resume asked, nothing there: fresh start
    state = json.loads((out_dir / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["max_steps"] == 2
