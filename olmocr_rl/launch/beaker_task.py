"""What one Beaker replica runs inside the olmocr-grpo image (the experiment spec's command is
scripts/beaker/task.sh, which execs this; nobody needs to call it by hand):

  1. sync s3:// inputs (--model_name, --train/eval_bench_data_folder) to --data-root;
  2. fill in what the trainer needs on Beaker, unless the user set it (command line or --config):
     --output_dir, --s3_save_path, --wandb_run_name, --resume_from_checkpoint (the trainer resumes
     from the newest checkpoint in the output dir or on S3, and starts fresh when there is none,
     so passing it on every start is what makes a preempted and restarted job resume);
  3. on GPUs TRAIN..TRAIN+VLLM-1 start `trl vllm-serve`, wait until /health answers (bounded,
     failing clearly), and stop it on exit;
  4. on GPUs 0..TRAIN-1 run `accelerate launch ... -m olmocr_rl.grpo_train <trainer args>`; a SIGTERM
     (Beaker stopping or preempting the job) is passed on to it, it saves a checkpoint of its step
     (uploaded to --s3_save_path), and the task exits with status 75 (olmocr_rl.launch.status.PREEMPTED;
     Beaker restarts a preempted preemptible job itself, and the restart resumes).

Usage: task.sh --train-gpus M --vllm-gpus K --nodes N --accelerate-config FILE --output-dir DIR
         --s3-save-path URI|"" --data-root DIR --run-name NAME --main-process-port P
         --vllm-port P --vllm-gpu-memory-utilization U --vllm-max-model-len L|""
         --vllm-health-timeout S [--no-auto-resume] -- TRAINER_ARGS...
(--vllm-max-model-len "": derived from the trainer's settings, as olmocr_rl.launch.plan.ServerSettings says.)
With GRPO_DRY_RUN=1 it prints each command (`[label] command`) instead of running it; for N > 1
it then prints the training command of every replica rank.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from olmocr_rl.launch import status as exit_status
from olmocr_rl.launch.plan import Hints, LaunchError, Plan, flag_value, plan
from olmocr_rl.launch.runtime import (SERVER_OPTIONS, StopForwarder, env_dry_run, guarded, log, port,
                                      require_sync_tool, run_or_show, say, server_settings, start_server, sync_tool,
                                      wait_for_server, whole_number)

#: task.sh's options, all required, in the order the spec writes them.
OPTIONS = ("--train-gpus", "--vllm-gpus", "--nodes", "--accelerate-config", "--output-dir", "--s3-save-path",
           "--data-root", "--run-name", "--main-process-port", *SERVER_OPTIONS)
EMPTY_OK = ("--s3-save-path", "--vllm-max-model-len")
HINTS = Hints(
    conflict="--vllm-gpus {vllm_gpus} reserves GPUs for a vLLM server, but the trainer is set to --vllm_mode {mode}; "
             "use --vllm-gpus 0 for {mode}",
    no_server="add --vllm-gpus K to the launcher, or pass --vllm_mode colocate",
    async_no_server="add a server with --vllm-gpus K on the launcher, or drop --async_generation",
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
        if flag not in opts or (opts[flag] == "" and flag not in EMPTY_OK):
            extra = ' ("" for none)' if flag in EMPTY_OK else ""
            raise LaunchError(f"task.sh: {flag} is required{extra}")
    return opts, auto_resume, list(argv[i:])


def task_plan(argv: Sequence[str], env: Mapping[str, str] = os.environ,
              dry_run: bool = True) -> tuple[Plan, dict[str, str]]:
    """Check the task's arguments as the job would and plan its commands: (plan, task.sh's options).
    Raises LaunchError."""
    opts, auto_resume, trainer_args = parse(argv)
    config = flag_value(trainer_args, "--config")
    if config is not None and not Path(config).is_file():
        raise LaunchError(f"--config {config}: no such file in the image (paths are relative to {Path.cwd()})")
    nodes, train, vllm = (whole_number(f, opts[f], 1 if f == "--nodes" else 0)
                          for f in ("--nodes", "--train-gpus", "--vllm-gpus"))
    leader = env.get(LEADER)
    if not leader and nodes > 1 and not dry_run:
        raise LaunchError(f"{LEADER} is not set: a multi-node task needs Beaker's leader selection "
                          "(the launcher's spec asks for it; start replicas with scripts/grpotrainer-beaker.sh)")
    leader = leader or (f"${LEADER}" if nodes > 1 else "127.0.0.1")
    server = server_settings([(f, opts[f]) for f in SERVER_OPTIONS], empty_max_len=True)
    fill = [("output_dir", opts["--output-dir"]), ("s3_save_path", opts["--s3-save-path"]),
            ("wandb_run_name", opts["--run-name"])]
    tool = sync_tool(dry_run)
    the_plan = plan(nodes=nodes, gpus_per_node=train + vllm, vllm_gpus=vllm, engine=opts["--accelerate-config"],
                    trainer_args=trainer_args, main_ip=leader, main_port=port("--main-process-port",
                                                                             opts["--main-process-port"]),
                    server=server, data_root=opts["--data-root"], sync_tool=tool or "s5cmd", fill=fill,
                    resume=auto_resume, hints=HINTS)
    require_sync_tool(the_plan, tool)
    return the_plan, opts


def run(argv: Sequence[str], env: Mapping[str, str] = os.environ, dry_run: bool | None = None) -> int:
    """Plan, then sync, serve, and train (or, in a dry run, print every command)."""
    dry_run = env_dry_run(env) if dry_run is None else dry_run
    the_plan, opts = task_plan(argv, env, dry_run)
    return execute(the_plan, opts["--output-dir"], env, dry_run)


def execute(the_plan: Plan, output_dir: str, env: Mapping[str, str], dry_run: bool) -> int:
    """Sync, serve (log in ``output_dir``), and train this replica's rank (a dry run prints every rank)."""
    for sync in the_plan.syncs:
        status = run_or_show(sync, dry_run)
        if status:
            return status
    server, status = None, 1
    try:
        if the_plan.server is not None:
            server = start_server(the_plan.server, f"{output_dir}/vllm-server.log", dry_run)
            wait_for_server(server, the_plan)
        if dry_run and len(the_plan.trains) > 1:
            # Every replica's command; BEAKER_* values are only known inside the running job.
            for cmd in the_plan.trains:
                say(cmd.shown())
            status = 0
            return status
        trainer = StopForwarder(exit_status.STOP_GRACE_S)
        status = trainer.run(the_plan.train(env.get("BEAKER_REPLICA_RANK") or "0"), dry_run)
        if trainer.forwarded:
            status = exit_status.PREEMPTED  # accelerate/torchrun report their own status for a signalled trainer
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
