"""Launch an olmocr_rl GRPO run on Beaker.

  scripts/grpotrainer-beaker.sh [launcher options] [--] TRAINER_ARGS...
  (= python -m olmocr_rl.launch.beaker, from the repository root)

Builds (or reuses) the image olmocr-grpo-<version>-<git hash> from ./Dockerfile, uploads it to
Beaker, and submits one experiment whose task (scripts/beaker/task.sh inside the image, i.e.
olmocr_rl.launch.beaker_task) syncs s3:// inputs to local disk, starts `trl vllm-serve` on the last
--vllm-gpus GPUs, and runs `accelerate launch -m olmocr_rl.grpo_train TRAINER_ARGS...` on the others.
Checkpoints mirror to <--s3-checkpoints>/<name>; a preempted job that Beaker restarts resumes from there.

Launcher options use dashes (a value may also follow `=`: --gpus=4); every other argument (the
trainer's flags use underscores) is forwarded to the trainer unchanged, spaces and all. `--` ends
the launcher options.

  --gpus N                GPUs per node                                   (default 8)
  --vllm-gpus K           of those, GPUs for the vLLM server; 0 = vLLM colocated in the trainer
                          (default: 1 when --gpus > 1, else 0)
  --nodes N               Beaker replicas, one node each (N > 1 needs --vllm-gpus 0)
  --accelerate-config C   zero2 | zero3 | fsdp | path to an accelerate YAML
  --name NAME             experiment and run name (default: olmocr-grpo-<hash>-<time>)
  --preemptible           allow Beaker to preempt (and restart) the job
  --cluster C             repeatable; --workspace W --budget B --priority P --retries N
  --s3-checkpoints URI    S3 prefix for checkpoint mirrors ("" = no mirror, no resume)
  --aws-access-key-secret NAME --aws-secret-key-secret NAME --wandb-secret NAME
  --hf-token-secret NAME  Beaker secret names ("" leaves one out)
  --beaker-user USER      owner of the image (default: `beaker account whoami`)
  --skip-docker-build     use the image tag as is (it must already be on Beaker)
  --no-auto-resume        do not pass --resume_from_checkpoint to the trainer
  --vllm-port P  --vllm-gpu-memory-utilization U  --vllm-max-model-len L  --vllm-health-timeout S
                          the vLLM server's port (8000), share of its GPU's memory (0.5; the trainer's
                          --vllm_gpu_memory_utilization is for colocated vLLM only), context (default: the
                          trainer's --vllm_max_model_length, else derived from its --target_longest_image_dim
                          and --max_completion_length) and /health wait in seconds (900); it runs with the
                          trainer's --vllm_dtype (as --dtype) unless that is auto
  --dry-run               print the image commands, the experiment spec and each GPU group's
                          command; touches neither Docker nor Beaker

Example (olmOCR 2's setup: 8 GPUs = 7 training + 1 vLLM):
  scripts/grpotrainer-beaker.sh --gpus 8 --vllm-gpus 1 --preemptible --name synthmix-seed1 -- \\
    --model_name s3://bucket/sft-checkpoint --train_bench_data_folder s3://bucket/synthmix/bench_data \\
    --reward_bench 1.0 --reward_front_matter 1.0 --reward_eos 1.0 --gradient_accumulation_steps 28
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml

import olmocr_rl
from olmocr_rl.launch import beaker_task
from olmocr_rl.launch.plan import ENGINES, LaunchError, Plan, ServerSettings, engine_config, gpu_layout, show
from olmocr_rl.launch.runtime import SERVER_OPTIONS, guarded, log, say, server_settings, split_options, whole_number

# Where the Dockerfile puts the repository inside the image (its WORKDIR); a test checks they agree.
IMAGE_REPO_DIR = "/opt/olmocr_rl"
TASK_SCRIPT = "scripts/beaker/task.sh"
REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_HEADER = "--- Beaker experiment spec (YAML) ---"
COMMANDS_HEADER = "--- commands per GPU group (run inside the image by scripts/beaker/task.sh) ---"
PRIORITIES = ("low", "normal", "high", "urgent", "immediate")


@dataclass
class Options:
    """The launcher's options and their defaults (the vLLM server's are :class:`ServerSettings`')."""

    gpus: int = 8
    vllm_gpus: int | None = None  # None = 1 when gpus > 1 on one node, else 0
    nodes: int = 1
    accelerate_config: str = "zero2"
    name: str = ""
    preemptible: bool = False
    cluster: list[str] = field(default_factory=lambda: ["ai2/jupiter", "ai2/augusta"])
    workspace: str = "ai2/olmocr"
    budget: str = "ai2/oe-base"
    priority: str = "high"
    retries: int = 0
    shared_memory: str = "10GiB"
    s3_checkpoints: str = "s3://ai2-oe-data/olmocr-grpo-checkpoints"
    checkpoint_dir: str = "/tmp/checkpoints"  # local disk inside the job; S3 holds the durable copy
    data_root: str = "/data"  # s3:// inputs are synced to DATA_ROOT/<bucket>/<key>
    aws_access_key_secret: str = "AWS_ACCESS_KEY_ID"
    aws_secret_key_secret: str = "AWS_SECRET_ACCESS_KEY"
    wandb_secret: str = "WANDB_API_KEY"
    hf_token_secret: str = ""
    beaker_user: str = ""
    main_process_port: int = 29500
    server: ServerSettings = field(default_factory=ServerSettings)
    skip_docker_build: bool = False
    auto_resume: bool = True
    dry_run: bool = False
    image_tag: str = ""


SWITCHES = {"--preemptible", "--skip-docker-build", "--no-auto-resume", "--dry-run", "-h", "--help"}
#: The whole-number options and their least values.
INTS = {"--gpus": 1, "--vllm-gpus": 0, "--nodes": 1, "--retries": 0}
VALUES = {"--gpus", "--vllm-gpus", "--nodes", "--accelerate-config", "--name", "--cluster", "--workspace", "--budget",
          "--priority", "--retries", "--s3-checkpoints", "--aws-access-key-secret", "--aws-secret-key-secret",
          "--wandb-secret", "--hf-token-secret", "--beaker-user", *SERVER_OPTIONS}


def parse(argv: Sequence[str]) -> tuple[Options, list[str]] | None:
    """Launcher options and the trainer arguments (verbatim); None when --help was asked."""
    pairs, trainer_args = split_options(argv, VALUES, SWITCHES)
    opts, clusters = Options(server=server_settings(pairs)), []
    for flag, value in pairs:
        attr = flag.removeprefix("--").replace("-", "_")
        if flag in ("-h", "--help"):
            return None
        if flag == "--no-auto-resume":
            opts.auto_resume = False
        elif value is None:
            setattr(opts, attr, True)
        elif flag == "--cluster":
            clusters.append(value)
        elif flag in INTS:
            setattr(opts, attr, whole_number(flag, value, INTS[flag]))
        elif flag not in SERVER_OPTIONS:
            setattr(opts, attr, value)
    opts.cluster = clusters or opts.cluster
    if opts.vllm_gpus is None:
        opts.vllm_gpus = 1 if opts.gpus > 1 and opts.nodes == 1 else 0
    opts.accelerate_config = engine_config(opts.accelerate_config)
    return opts, trainer_args


def validate(opts: Options) -> None:
    """Reject impossible options with a message that names the option to change (numbers were
    checked while parsing; the GPU split by :func:`~olmocr_rl.launch.plan.gpu_layout`)."""
    if opts.priority not in PRIORITIES:
        raise LaunchError(f"--priority {opts.priority}: choose one of {', '.join(PRIORITIES)}")
    if opts.nodes > 1 and opts.vllm_gpus:
        raise LaunchError(f"--nodes {opts.nodes} with --vllm-gpus {opts.vllm_gpus}: on Beaker every replica gets "
                          "the same GPUs, so multi-node runs use colocated vLLM (--vllm-gpus 0); for a dedicated "
                          "vLLM node use scripts/slurm/submit.sh --vllm-node")
    gpu_layout(opts.nodes, opts.gpus, opts.vllm_gpus)
    config = (REPO_ROOT / opts.accelerate_config).resolve()
    if not config.is_relative_to(REPO_ROOT.resolve()):
        raise LaunchError(f"--accelerate-config {opts.accelerate_config}: outside the repository, so not in the "
                          f"image; put it under {REPO_ROOT / 'configs' / 'accelerate'} and pass it relative to "
                          f"{REPO_ROOT}")
    if not config.is_file():
        raise LaunchError(f"--accelerate-config {opts.accelerate_config}: no such file in the repository (use "
                          f"{', '.join(ENGINES)} or a path relative to {REPO_ROOT})")
    # Inside the image the repository is elsewhere: pass the path relative to it.
    opts.accelerate_config = str(config.relative_to(REPO_ROOT.resolve()))


# ---------------------------------------------------------------------------------------------
# the experiment spec


def task_arguments(opts: Options, trainer_args: Sequence[str]) -> list[str]:
    """The argument list of scripts/beaker/task.sh for this run (trainer args after `--`, verbatim)."""
    s3 = f"{opts.s3_checkpoints.rstrip('/')}/{opts.name}" if opts.s3_checkpoints else ""
    args = ["--train-gpus", str(opts.gpus - opts.vllm_gpus), "--vllm-gpus", str(opts.vllm_gpus),
            "--nodes", str(opts.nodes), "--accelerate-config", opts.accelerate_config,
            "--output-dir", f"{opts.checkpoint_dir.rstrip('/')}/{opts.name}", "--s3-save-path", s3,
            "--data-root", opts.data_root, "--run-name", opts.name,
            "--main-process-port", str(opts.main_process_port), "--vllm-port", opts.server.port,
            "--vllm-gpu-memory-utilization", opts.server.gpu_memory_utilization,
            "--vllm-max-model-len", opts.server.max_model_len or "",  # "": derived from the trainer's settings
            "--vllm-health-timeout", opts.server.health_timeout]
    if not opts.auto_resume:
        args.append("--no-auto-resume")
    return [*args, "--", *trainer_args]


def env_vars(opts: Options) -> list[dict[str, str]]:
    """Plain variables, then secrets by name; a secret whose name is empty is left out."""
    variables = [{"name": "OMP_NUM_THREADS", "value": "8"}, {"name": "PYTHONUNBUFFERED", "value": "1"},
                 {"name": "TOKENIZERS_PARALLELISM", "value": "false"}]
    secrets = {"AWS_ACCESS_KEY_ID": opts.aws_access_key_secret, "AWS_SECRET_ACCESS_KEY": opts.aws_secret_key_secret,
               "WANDB_API_KEY": opts.wandb_secret, "HF_TOKEN": opts.hf_token_secret}
    return variables + [{"name": env, "secret": secret} for env, secret in secrets.items() if secret]


def build_spec(opts: Options, trainer_args: Sequence[str]) -> dict:
    """The Beaker v2 experiment spec (camelCase keys, as beaker-py's ``from_json`` reads it)."""
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
        # One replica per node; replica 0 leads (its hostname is every replica's rendezvous address),
        # and a failure or preemption of any replica stops them all, so the job resumes as a whole.
        task.update(replicas=opts.nodes, leaderSelection=True, hostNetworking=True, propagateFailure=True,
                    propagatePreemption=True)
    spec: dict = {"version": "v2",
                  "description": f"olmocr_rl GRPO {opts.name}: {opts.nodes} node(s) x {opts.gpus} GPUs ({split})",
                  "budget": opts.budget, "tasks": [task]}
    if opts.retries > 0:
        spec["retry"] = {"allowedTaskRetries": opts.retries}
    return spec


# ---------------------------------------------------------------------------------------------
# image and submission


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)


def image_tag() -> str:
    """olmocr-grpo-<version>-<git hash>; uncommitted changes get a one-off ``-dirty-<time>`` tag,
    since the image holds the working tree, not the commit."""
    head = _git("rev-parse", "--short=10", "HEAD")
    tag = f"olmocr-grpo-{olmocr_rl.__version__}-{head.stdout.strip() if head.returncode == 0 else 'nogit'}"
    status = _git("status", "--porcelain", "--untracked-files=no")
    if status.returncode == 0 and status.stdout.strip():
        tag += "-dirty-" + time.strftime("%Y%m%d%H%M%S")
        log(f"warning: uncommitted changes; building a one-off image {tag}")
    return tag


def default_name() -> str:
    head = _git("rev-parse", "--short=10", "HEAD")
    return f"olmocr-grpo-{head.stdout.strip() if head.returncode == 0 else 'nogit'}-{time.strftime('%Y%m%d-%H%M%S')}"


def beaker_user(dry_run: bool) -> str:
    if dry_run:
        return "<beaker-user>"
    try:
        out = subprocess.run(["beaker", "account", "whoami", "--format", "json"], capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out)[0]["name"]
    except (OSError, subprocess.CalledProcessError, ValueError, LookupError, TypeError):
        raise LaunchError("cannot ask Beaker who you are; install and log in to the beaker CLI, "
                          "or pass --beaker-user") from None


def image_commands(opts: Options) -> tuple[list[str], list[str]]:
    return (["docker", "build", "--platform", "linux/amd64", "-f", str(REPO_ROOT / "Dockerfile"), "-t",
             opts.image_tag, str(REPO_ROOT)],
            ["beaker", "image", "create", "--workspace", opts.workspace, "--name", opts.image_tag, opts.image_tag])


def ensure_image(opts: Options) -> None:
    """Build and upload the image unless it is on Beaker already (or --skip-docker-build)."""
    ref = f"{opts.beaker_user}/{opts.image_tag}"
    if opts.skip_docker_build:
        log(f"skipping the image build; using {ref}")
        return
    if subprocess.run(["beaker", "image", "get", ref], capture_output=True).returncode == 0:
        log(f"reusing image {ref} (already on Beaker)")
        return
    build, upload = image_commands(opts)
    if subprocess.call(build) != 0:
        raise LaunchError("docker build failed (see above)")
    result = subprocess.run(upload, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        if "already exists" not in result.stdout.lower():
            raise LaunchError("beaker image create failed (see above)")
        log(f"image {opts.image_tag} already on Beaker; reusing it")


def submit(opts: Options, spec: dict) -> int:
    """Create the experiment with beaker-py (v2 API, falling back to v1) and print its URL."""
    try:
        import beaker
    except ImportError:
        raise LaunchError("submitting needs beaker-py: `pip install beaker-py` (--dry-run works without it)") from None
    if hasattr(beaker, "BeakerExperimentSpec"):
        with beaker.Beaker.from_env(default_workspace=opts.workspace) as client:
            workload = client.experiment.create(spec=beaker.BeakerExperimentSpec.from_json(spec), name=opts.name)
            say(f"submitted: {client.workload.url(workload)}")
    else:
        client = beaker.Beaker.from_env(default_workspace=opts.workspace)
        experiment = client.experiment.create(opts.name, beaker.ExperimentSpec.from_json(spec))
        say(f"submitted: {client.experiment.url(experiment)}")
    return 0


def check_task(opts: Options, arguments: Sequence[str]) -> tuple[Plan, dict[str, str]]:
    """Fail before the image build when the job itself would refuse its arguments; the task's plan."""
    if opts.nodes > 1:
        print(f"warning: --nodes {opts.nodes}: every replica saves its DeepSpeed/FSDP shards to its own local disk "
              "and only node 0 mirrors to S3; to resume after preemption put --output_dir on a file system all "
              "replicas share", file=sys.stderr)
    return beaker_task.task_plan(arguments, dry_run=True)


def print_dry_run(opts: Options, spec: dict, task: tuple[Plan, dict[str, str]]) -> int:
    """The image commands, the spec, and the commands the task would run; nothing built or submitted."""
    say("# image (dry run: not built, not uploaded)")
    for label, cmd in zip(("docker", "beaker"), image_commands(opts)):
        say(show(label, cmd))
    say(f"# experiment {opts.name!r} in workspace {opts.workspace} (dry run: nothing built or submitted)")
    say(SPEC_HEADER)
    say(yaml.safe_dump(spec, sort_keys=False, width=1000).rstrip("\n"))
    say(COMMANDS_HEADER)
    the_plan, task_opts = task
    return beaker_task.execute(the_plan, task_opts["--output-dir"], os.environ, dry_run=True)


def launch(argv: Sequence[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        say(__doc__.strip())
        return 0
    opts, trainer_args = parsed
    validate(opts)
    opts.name = opts.name or default_name()
    task = check_task(opts, task_arguments(opts, trainer_args))  # before asking Beaker anything
    opts.image_tag = image_tag()
    opts.beaker_user = opts.beaker_user or beaker_user(opts.dry_run)
    spec = build_spec(opts, trainer_args)
    if opts.dry_run:
        return print_dry_run(opts, spec, task)
    ensure_image(opts)
    return submit(opts, spec)


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(lambda: launch(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
