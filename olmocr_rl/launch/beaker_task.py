"""What one Beaker replica runs inside the olmocr-grpo image (the experiment spec's command is
scripts/beaker/task.sh, which execs this; nobody needs to call it by hand):

  1. sync s3:// inputs (--model_name, --train/eval_bench_data_folder) to --data-root;
  2. fill in what the trainer needs on Beaker, unless the user set it (command line or --config):
     --output_dir, --s3_save_path, --wandb_run_name, --resume_from_checkpoint (the trainer resumes
     from the newest checkpoint in the output dir or on S3, and starts fresh when there is none,
     so passing it on every start is what makes a preempted and restarted job resume);
  3. on GPUs TRAIN..TRAIN+VLLM-1 start `trl vllm-serve`, wait until /health answers (bounded,
     failing clearly), and stop it on exit;
  4. on GPUs 0..TRAIN-1 run `accelerate launch ... -m olmocr_rl.grpo_train <trainer args>`.

Usage: task.sh --train-gpus M --vllm-gpus K --nodes N --accelerate-config FILE --output-dir DIR
         --s3-save-path URI|"" --data-root DIR --run-name NAME --main-process-port P
         --vllm-port P --vllm-gpu-memory-utilization U --vllm-max-model-len L
         --vllm-health-timeout S [--no-auto-resume] -- TRAINER_ARGS...
With GRPO_DRY_RUN=1 it prints each command (`[label] command`) instead of running it; for N > 1
it then prints the training command of every replica rank.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from olmocr_rl.launch.plan import Hints, LaunchError, Plan, ServerSettings, flag_value, plan
from olmocr_rl.launch.runtime import (env_dry_run, guarded, log, require_sync_tool, run_or_show, say, start_server,
                                      sync_tool, wait_for_server)

#: task.sh's options, all required, in the order the spec writes them.
OPTIONS = ("--train-gpus", "--vllm-gpus", "--nodes", "--accelerate-config", "--output-dir", "--s3-save-path",
           "--data-root", "--run-name", "--main-process-port", "--vllm-port", "--vllm-gpu-memory-utilization",
           "--vllm-max-model-len", "--vllm-health-timeout")
HINTS = Hints(
    conflict="--vllm-gpus {vllm_gpus} reserves GPUs for a vLLM server, but the trainer is set to --vllm_mode {mode}; "
             "use --vllm-gpus 0 for {mode}",
    no_server="add --vllm-gpus K to the launcher, or pass --vllm_mode colocate",
)
LEADER = "BEAKER_LEADER_REPLICA_HOSTNAME"


def parse(argv: Sequence[str]) -> tuple[dict[str, str], bool, list[str]]:
    """(options by flag, auto resume, trainer args after ``--``); every option is required."""
    opts: dict[str, str] = {}
    auto_resume, i = True, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg == "--no-auto-resume":
            auto_resume, i = False, i + 1
        elif arg in OPTIONS and i + 1 < len(argv):
            opts[arg], i = argv[i + 1], i + 2
        else:
            raise LaunchError(f"task.sh: unknown option '{arg}' (trainer arguments go after --)")
    for flag in OPTIONS:
        if flag not in opts or (opts[flag] == "" and flag != "--s3-save-path"):
            extra = ' ("" for none)' if flag == "--s3-save-path" else ""
            raise LaunchError(f"task.sh: {flag} is required{extra}")
    return opts, auto_resume, list(argv[i:])


def task_plan(argv: Sequence[str], env: Mapping[str, str] = os.environ, dry_run: bool = True) -> Plan:
    """Check the task's arguments as the job would and plan its commands. Raises LaunchError."""
    opts, auto_resume, trainer_args = parse(argv)
    config = flag_value(trainer_args, "--config")
    if config is not None and not Path(config).is_file():
        raise LaunchError(f"--config {config}: no such file in the image (paths are relative to {Path.cwd()})")
    nodes, train, vllm = (int(opts[f]) for f in ("--nodes", "--train-gpus", "--vllm-gpus"))
    leader = env.get(LEADER) or (f"${LEADER}" if dry_run and nodes > 1 else "127.0.0.1")
    server = ServerSettings(port=opts["--vllm-port"], gpu_memory_utilization=opts["--vllm-gpu-memory-utilization"],
                            max_model_len=opts["--vllm-max-model-len"], health_timeout=opts["--vllm-health-timeout"])
    fill = [("output_dir", opts["--output-dir"]), ("s3_save_path", opts["--s3-save-path"]),
            ("wandb_run_name", opts["--run-name"])]
    tool = sync_tool(dry_run)
    the_plan = plan(nodes=nodes, gpus_per_node=train + vllm, vllm_gpus=vllm, engine=opts["--accelerate-config"],
                    trainer_args=trainer_args, main_ip=leader, main_port=opts["--main-process-port"],
                    server=server, data_root=opts["--data-root"], sync_tool=tool or "s5cmd", fill=fill,
                    resume=auto_resume, hints=HINTS)
    require_sync_tool(the_plan, tool)
    return the_plan


def run(argv: Sequence[str], env: Mapping[str, str] = os.environ, dry_run: bool | None = None) -> int:
    """Plan, then sync, serve, and train (or, in a dry run, print every command)."""
    dry_run = env_dry_run(env) if dry_run is None else dry_run
    the_plan, opts = task_plan(argv, env, dry_run), parse(argv)[0]
    for sync in the_plan.syncs:
        status = run_or_show(sync, dry_run)
        if status:
            return status
    server, status = None, 1
    try:
        if the_plan.server is not None:
            server = start_server(the_plan.server, f"{opts['--output-dir']}/vllm-server.log", dry_run)
            wait_for_server(server, the_plan.server_url, opts["--vllm-health-timeout"])
        if dry_run and len(the_plan.trains) > 1:
            # Every replica's command; BEAKER_* values are only known inside the running job.
            for cmd in the_plan.trains:
                say(cmd.shown())
            status = 0
            return status
        status = run_or_show(the_plan.train(env.get("BEAKER_REPLICA_RANK") or "0"), dry_run)
        return status
    finally:
        if server is not None:
            server.stop()
        if not dry_run:
            log(f"task exiting with status {status}")


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(lambda: run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
