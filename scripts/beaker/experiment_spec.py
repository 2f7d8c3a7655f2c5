"""Build (and submit) the Beaker experiment of one olmocr_rl GRPO run.

Called by scripts/grpotrainer-beaker.sh, which holds every default; this file has none, so the
defaults live in one place. The spec follows Beaker's v2 experiment format (camelCase keys, as
`beaker experiment create spec.yaml` and beaker-py's `BeakerExperimentSpec.from_json` read it).

    python scripts/beaker/experiment_spec.py --dry-run --name my-run --image-tag olmocr-grpo-0.1.0-abc \
        --beaker-user me --gpus 8 --vllm-gpus 1 ... -- --model_name s3://bucket/model --reward_bench

--dry-run prints the spec as YAML, then the exact command each GPU group runs (obtained by running
scripts/beaker/task.sh with GRPO_DRY_RUN=1, i.e. the very code the job runs), and contacts nothing.
Without it the experiment is created with beaker-py (`pip install beaker-py`), which is imported
only then.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

# Where the Dockerfile puts the repository inside the image (its WORKDIR); the task command points
# there. A test checks the two agree.
IMAGE_REPO_DIR = "/opt/olmocr_rl"
TASK_SCRIPT = "scripts/beaker/task.sh"
REPO_ROOT = Path(__file__).resolve().parents[2]

SPEC_HEADER = "--- Beaker experiment spec (YAML) ---"
COMMANDS_HEADER = "--- commands per GPU group (run inside the image by scripts/beaker/task.sh) ---"


def task_arguments(opts: argparse.Namespace, trainer_args: list[str]) -> list[str]:
    """The argument list of scripts/beaker/task.sh for this run (trainer args after `--`, verbatim)."""
    output_dir = f"{opts.checkpoint_dir.rstrip('/')}/{opts.name}"
    s3_save_path = f"{opts.s3_checkpoint_root.rstrip('/')}/{opts.name}" if opts.s3_checkpoint_root else ""
    args = [
        "--train-gpus", str(opts.gpus - opts.vllm_gpus),
        "--vllm-gpus", str(opts.vllm_gpus),
        "--nodes", str(opts.nodes),
        "--accelerate-config", opts.accelerate_config,
        "--output-dir", output_dir,
        "--s3-save-path", s3_save_path,
        "--data-root", opts.data_root,
        "--run-name", opts.name,
        "--main-process-port", str(opts.main_process_port),
        "--vllm-port", str(opts.vllm_port),
        "--vllm-gpu-memory-utilization", str(opts.vllm_gpu_memory_utilization),
        "--vllm-max-model-len", str(opts.vllm_max_model_len),
        "--vllm-health-timeout", str(opts.vllm_health_timeout),
    ]
    if not opts.auto_resume:
        args.append("--no-auto-resume")
    return [*args, "--", *trainer_args]


def env_vars(opts: argparse.Namespace) -> list[dict[str, str]]:
    """Plain variables, then secrets by name; a secret whose name is empty is left out."""
    variables = [
        {"name": "OMP_NUM_THREADS", "value": "8"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "TOKENIZERS_PARALLELISM", "value": "false"},
    ]
    secrets = {
        "AWS_ACCESS_KEY_ID": opts.aws_access_key_secret,
        "AWS_SECRET_ACCESS_KEY": opts.aws_secret_key_secret,
        "WANDB_API_KEY": opts.wandb_secret,
        "HF_TOKEN": opts.hf_token_secret,
    }
    variables += [{"name": env, "secret": secret} for env, secret in secrets.items() if secret]
    return variables


def build_spec(opts: argparse.Namespace, trainer_args: list[str]) -> dict:
    """The Beaker v2 experiment spec as a JSON-compatible dict."""
    split = f"{opts.gpus - opts.vllm_gpus} train + {opts.vllm_gpus} vLLM" if opts.vllm_gpus else "colocated vLLM"
    task: dict = {
        "name": "grpo",
        "image": {"beaker": f"{opts.beaker_user}/{opts.image_tag}"},
        "command": ["bash", f"{IMAGE_REPO_DIR}/{TASK_SCRIPT}"],
        "arguments": task_arguments(opts, trainer_args),
        "envVars": env_vars(opts),
        "resources": {"gpuCount": opts.gpus, "sharedMemory": opts.shared_memory},
        "context": {"priority": opts.priority, "preemptible": opts.preemptible},
        "constraints": {"cluster": list(opts.cluster)},
        "result": {"path": "/noop-results"},
    }
    if opts.nodes > 1:
        # One replica per node; replica 0 is the leader whose hostname every replica gets as
        # BEAKER_LEADER_REPLICA_HOSTNAME (the rendezvous address), and a failure or preemption of
        # any replica stops them all, so the restarted job resumes as a whole.
        task.update(
            replicas=opts.nodes,
            leaderSelection=True,
            hostNetworking=True,
            propagateFailure=True,
            propagatePreemption=True,
        )
    spec: dict = {
        "version": "v2",
        "description": f"olmocr_rl GRPO {opts.name}: {opts.nodes} node(s) x {opts.gpus} GPUs ({split})",
        "budget": opts.budget,
        "tasks": [task],
    }
    if opts.retries > 0:
        spec["retry"] = {"allowedTaskRetries": opts.retries}
    return spec


def validate(opts: argparse.Namespace) -> None:
    """Reject impossible GPU geometry with a message that names the option to change."""
    if opts.gpus < 1:
        sys.exit(f"error: --gpus {opts.gpus}: need at least 1 GPU")
    if not 0 <= opts.vllm_gpus < opts.gpus:
        sys.exit(
            f"error: --vllm-gpus {opts.vllm_gpus} with --gpus {opts.gpus}: at least one GPU must train; "
            "use 0 (vLLM colocated in the trainer) up to --gpus minus 1"
        )
    if opts.nodes < 1:
        sys.exit(f"error: --nodes {opts.nodes}: need at least 1")
    if opts.nodes > 1 and opts.vllm_gpus:
        sys.exit(
            f"error: --nodes {opts.nodes} with --vllm-gpus {opts.vllm_gpus}: on Beaker every replica gets "
            "the same GPUs, so multi-node runs use colocated vLLM (--vllm-gpus 0); for a dedicated "
            "vLLM node use scripts/slurm/submit.sh --vllm-node"
        )


def run_task_dry(spec: dict, capture: bool) -> subprocess.CompletedProcess:
    """Run the job's own task script locally with GRPO_DRY_RUN=1: it prints the commands it would
    run and applies every check the job would (flag conflicts, --config readable), touching nothing."""
    task = spec["tasks"][0]
    env = {**os.environ, "GRPO_DRY_RUN": "1"}
    return subprocess.run(["bash", str(REPO_ROOT / TASK_SCRIPT), *task["arguments"]], cwd=REPO_ROOT, env=env,
                          capture_output=capture, text=True)


def check_task(spec: dict) -> int:
    """Fail before the image build when the job itself would refuse its arguments."""
    result = run_task_dry(spec, capture=True)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
    return result.returncode


def print_dry_run(opts: argparse.Namespace, spec: dict) -> int:
    """Print the spec and the per-GPU-group commands; run nothing remote."""
    print(f"# experiment {opts.name!r} in workspace {opts.workspace} (dry run: nothing built or submitted)")
    print(SPEC_HEADER)
    print(yaml.safe_dump(spec, sort_keys=False, width=1000), end="")
    print(COMMANDS_HEADER)
    sys.stdout.flush()
    return run_task_dry(spec, capture=False).returncode


def submit(opts: argparse.Namespace, spec: dict) -> int:
    """Create the experiment with beaker-py (v2 API, falling back to v1) and print its URL."""
    try:
        import beaker
    except ImportError:
        sys.exit("error: submitting needs beaker-py: `pip install beaker-py` (--dry-run works without it)")
    if hasattr(beaker, "BeakerExperimentSpec"):
        with beaker.Beaker.from_env(default_workspace=opts.workspace) as client:
            workload = client.experiment.create(spec=beaker.BeakerExperimentSpec.from_json(spec), name=opts.name)
            print(f"submitted: {client.workload.url(workload)}")
    else:
        client = beaker.Beaker.from_env(default_workspace=opts.workspace)
        experiment = client.experiment.create(opts.name, beaker.ExperimentSpec.from_json(spec))
        print(f"submitted: {client.experiment.url(experiment)}")
    return 0


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split argv at `--`: launcher options before, trainer arguments (verbatim) after."""
    if "--" in argv:
        cut = argv.index("--")
        argv, trainer_args = argv[:cut], argv[cut + 1 :]
    else:
        trainer_args = []
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--check", action="store_true", help="only validate the options (before building the image)")
    p.add_argument("--name", required=True)
    p.add_argument("--image-tag", required=True)
    p.add_argument("--beaker-user", required=True)
    p.add_argument("--workspace", required=True)
    p.add_argument("--budget", required=True)
    p.add_argument("--cluster", action="append", required=True)
    p.add_argument("--priority", required=True, choices=["low", "normal", "high", "urgent", "immediate"])
    p.add_argument("--preemptible", action="store_true")
    p.add_argument("--retries", type=int, required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--vllm-gpus", type=int, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--shared-memory", required=True)
    p.add_argument("--accelerate-config", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--s3-checkpoint-root", required=True)
    p.add_argument("--data-root", required=True)
    p.add_argument("--main-process-port", type=int, required=True)
    p.add_argument("--vllm-port", type=int, required=True)
    p.add_argument("--vllm-gpu-memory-utilization", type=float, required=True)
    p.add_argument("--vllm-max-model-len", type=int, required=True)
    p.add_argument("--vllm-health-timeout", type=int, required=True)
    p.add_argument("--aws-access-key-secret", required=True)
    p.add_argument("--aws-secret-key-secret", required=True)
    p.add_argument("--wandb-secret", required=True)
    p.add_argument("--hf-token-secret", required=True)
    p.add_argument("--no-auto-resume", dest="auto_resume", action="store_false")
    return p.parse_args(argv), trainer_args


def main(argv: list[str] | None = None) -> int:
    opts, trainer_args = parse_args(sys.argv[1:] if argv is None else argv)
    validate(opts)
    spec = build_spec(opts, trainer_args)
    if opts.check:
        if opts.nodes > 1:
            print(
                f"warning: --nodes {opts.nodes}: every replica saves its DeepSpeed/FSDP shards to its own "
                "local disk and only node 0 mirrors to S3; to resume after preemption put --output_dir on "
                "a file system all replicas share",
                file=sys.stderr,
            )
        return check_task(spec)
    return print_dry_run(opts, spec) if opts.dry_run else submit(opts, spec)


if __name__ == "__main__":
    sys.exit(main())
