"""olmocr_rl GRPO training on Slurm: submit a job, and what the job runs on its nodes.

    python -m olmocr_rl.launch.slurm submit [submit options] [job options] [--] TRAINER_ARGS...
    python -m olmocr_rl.launch.slurm job [job options] [--] TRAINER_ARGS...   (what grpo.sbatch execs)

scripts/slurm/submit.sh and scripts/slurm/grpo.sbatch are the user-facing wrappers.

Submit options (the allocation):
  --nodes N            nodes (default 1)
  --gpus-per-node G    GPUs per node (default 8)
  --partition P  --account A  --qos Q  --time T  --job-name NAME
  --sbatch-arg ARG     one extra raw sbatch argument, repeatable (e.g. --sbatch-arg=--constraint=h100)
  --dry-run            print the sbatch command, then every command the job would run on each
                       node (with placeholder hosts node-0, node-1, ...); submits nothing

Job options (dashes; everything else goes to `python -m olmocr_rl.grpo_train` unchanged):
  --gpus-per-node G         GPUs on each node (default: $SLURM_GPUS_ON_NODE, else 8)
  --vllm-gpus K             GPUs for a `trl vllm-serve` server (tensor parallel K). One node: the
                            node's last K GPUs; with --vllm-node: K GPUs of the dedicated node.
                            0 = vLLM colocated in every trainer process (or --vllm_mode none).
  --vllm-node               the allocation's last node runs only the vLLM server (needs >= 2 nodes)
  --accelerate-config C     zero2 | zero3 | fsdp | path to an accelerate YAML
  --output-root DIR         checkpoints go to DIR/<job name>-<job id> unless --output_dir is given
  --data-root DIR           s3:// model / bench inputs are synced to DIR/<bucket>/<key>
  --main-process-port P     rendezvous port on the first node (default: from the job id)
  --vllm-port P             the server's port (default 8000)
  --vllm-gpu-memory-utilization U   the server's share of its GPUs' memory, in (0, 1] (default 0.5; the
                            trainer's --vllm_gpu_memory_utilization is for colocated vLLM only)
  --vllm-max-model-len L    the server's context (default: the trainer's --vllm_max_model_length, else
                            derived from its --target_longest_image_dim and --max_completion_length)
  --vllm-health-timeout S   seconds to wait for the server's /health (default 900)
  --no-auto-resume          do not pass --resume_from_checkpoint
  --dry-run                 print every command (per node) instead of running it; works outside
                            Slurm when SLURM_JOB_ID, SLURM_JOB_NODELIST and SLURM_NNODES are set

Every option taking a value may also be written --option=VALUE. A real submit first plans the job
(as --dry-run does, printing nothing): a bad layout or trainer flag stops it before sbatch runs.
The server runs with the trainer's --vllm_dtype (as --dtype) unless that is auto.

Examples:
  scripts/slurm/submit.sh --nodes 1 --vllm-gpus 1 -- --config configs/x.yaml          # 7 + 1 GPUs
  scripts/slurm/submit.sh --nodes 5 --vllm-node --vllm-gpus 1 -- --config configs/x.yaml  # 4 x 8 train
  scripts/slurm/submit.sh --nodes 4 -- --config configs/x.yaml --vllm_mode colocate   # 32 GPUs, colocated

Preemption: the job is requeueable; 300 s before its time limit Slurm sends USR1 to this script, which
passes SIGTERM to the training step: the trainers finish their step, save a checkpoint (and upload it)
and exit; then the job requeues itself (at the latest 270 s after USR1, before the limit). A training step
that exits with status 75 (the trainer was stopped by a signal of its own: olmocr_rl.launch.status) is
requeued too. Either way the restarted job has the same job id, hence the same output dir, and the trainer
(always given --resume_from_checkpoint) resumes from the newest checkpoint there (or from --s3_save_path),
or starts fresh when there is none; a run that had finished says so and exits.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from olmocr_rl.launch import status as exit_status
from olmocr_rl.launch.plan import (RANK_PLACEHOLDER, LaunchError, Plan, ServerSettings, engine_config, flag_value,
                                   gpu_layout, plan, settings, show)
from olmocr_rl.launch.runtime import (SERVER_OPTIONS, env_dry_run, guarded, log, port, require_sync_tool, run_or_show,
                                      say, server_settings, split_options, start_server, sync_tool, wait_for_server,
                                      whole_number)

# srun starts the same argv on every node; this swaps the rank placeholder for that node's
# SLURM_NODEID, its machine rank (training nodes are the allocation's first ones).
NODE_WRAPPER = ('args=(); for a in "$@"; do [[ "$a" == __SLURM_NODEID__ ]] && a="$SLURM_NODEID"; args+=("$a"); '
                'done; exec "${args[@]}"')
JOB_VALUES = {"--gpus-per-node", "--vllm-gpus", "--accelerate-config", "--output-root", "--data-root",
              "--main-process-port", *SERVER_OPTIONS}
JOB_SWITCHES = {"--vllm-node", "--no-auto-resume", "--dry-run"}
SUBMIT_VALUES = {"--nodes", "--gpus-per-node", "--partition", "--account", "--qos", "--time", "--job-name",
                 "--sbatch-arg"}


def repo_root(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get("GRPO_REPO_ROOT") or Path(__file__).resolve().parents[2])


@dataclass
class JobOptions:
    """grpo.sbatch's options and their defaults (the vLLM server's are :class:`ServerSettings`')."""

    gpus_per_node: int = 8
    vllm_gpus: int = 0
    vllm_node: bool = False
    engine: str = "zero2"
    output_root: str = ""
    data_root: str = ""
    main_port: str = ""
    server: ServerSettings = field(default_factory=ServerSettings)
    auto_resume: bool = True
    dry_run: bool = False


def parse_job(argv: Sequence[str], env: Mapping[str, str]) -> tuple[JobOptions, list[str]]:
    """Job options and the trainer arguments (everything else, verbatim)."""
    options, trainer_args = split_options(argv, JOB_VALUES, JOB_SWITCHES)
    opts = JobOptions(gpus_per_node=whole_number("--gpus-per-node", env.get("SLURM_GPUS_ON_NODE") or "8"),
                      server=server_settings(options))
    names = {"--accelerate-config": "engine", "--output-root": "output_root", "--data-root": "data_root"}
    for flag, value in options:
        if flag in ("--gpus-per-node", "--vllm-gpus"):
            setattr(opts, flag[2:].replace("-", "_"), whole_number(flag, value, 1 if flag == "--gpus-per-node" else 0))
        elif flag in ("--vllm-node", "--dry-run"):
            setattr(opts, flag[2:].replace("-", "_"), True)
        elif flag == "--no-auto-resume":
            opts.auto_resume = False
        elif flag == "--main-process-port":
            opts.main_port = port(flag, value)
        elif flag in names:
            setattr(opts, names[flag], value)
    return opts, trainer_args


def expand_nodelist(nodelist: str, env: Mapping[str, str]) -> list[str]:
    """One host name per node: a plain comma list as is, a ranged one by ``scontrol show hostnames``."""
    if "[" not in nodelist:
        return nodelist.split(",")
    scontrol = shutil.which("scontrol", path=env.get("PATH"))
    if scontrol:
        out = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True, text=True).stdout
        return out.split()
    raise LaunchError(f"scontrol is needed to expand the node list '{nodelist}'")


def job_plan(opts: JobOptions, trainer_args: list[str], env: Mapping[str, str],
             announce: bool = True) -> tuple[Plan, str]:
    """Check the allocation and options, log the layout (``announce``), and plan the job: (plan, output_dir)."""
    job_id = env.get("SLURM_JOB_ID") or ""
    if not job_id:
        raise LaunchError("not inside a Slurm job (for a dry run outside Slurm set SLURM_JOB_ID, "
                          "SLURM_JOB_NODELIST, SLURM_NNODES)")
    if not env.get("SLURM_JOB_NODELIST"):
        raise LaunchError("SLURM_JOB_NODELIST is not set")
    job_name, root = env.get("SLURM_JOB_NAME") or "olmocr-grpo", repo_root(env)
    hosts = expand_nodelist(env["SLURM_JOB_NODELIST"], env)
    nnodes = int(env.get("SLURM_NNODES") or len(hosts))
    if nnodes != len(hosts):
        raise LaunchError(f"SLURM_NNODES={nnodes} but the node list has {len(hosts)} hosts")
    engine = engine_config(opts.engine)
    if not Path(engine).is_file():
        raise LaunchError(f"--accelerate-config {engine}: no such file (zero2, zero3, fsdp or a path)")
    config = flag_value(trainer_args, "--config")
    if config is not None and not Path(config).is_file():
        raise LaunchError(f"--config {config}: no such file (paths are relative to {root})")
    layout = gpu_layout(nnodes, opts.gpus_per_node, opts.vllm_gpus, opts.vllm_node, hosts)
    restart = int(env.get("SLURM_RESTART_COUNT") or 0) + 1
    where = f", vLLM server on {layout.server_host} GPUs {layout.server_gpus}" if layout.server_host else ""
    if announce:
        log(f"job {job_id} ({job_name}), start #{restart}: {len(layout.train_hosts)} training node(s) x "
            f"{layout.train_gpus} GPUs{where}")
    dry_run = opts.dry_run or env_dry_run(env)
    tool = sync_tool(dry_run)
    job_dir = f"{opts.output_root or f'{root}/checkpoints'}/{job_name}-{job_id}"
    the_plan = plan(nodes=nnodes, gpus_per_node=opts.gpus_per_node, vllm_gpus=opts.vllm_gpus, engine=opts.engine,
                    trainer_args=trainer_args, vllm_node=opts.vllm_node, hosts=hosts,
                    main_port=opts.main_port or 20000 + int(job_id) % 20000, server=opts.server,
                    data_root=opts.data_root or f"{root}/.s3-cache", sync_tool=tool or "s5cmd",
                    fill=[("output_dir", job_dir)], resume=opts.auto_resume)
    require_sync_tool(the_plan, tool)
    return the_plan, settings(the_plan.trainer_args).output_dir


def srun_train(the_plan: Plan) -> list[str]:
    """One srun step over the training nodes; each node's wrapper fills in its machine rank."""
    hosts = the_plan.layout.train_hosts
    return ["srun", "--overlap", f"--nodes={len(hosts)}", f"--ntasks={len(hosts)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(hosts)}", "--kill-on-bad-exit=1", "bash", "-c", NODE_WRAPPER, "grpo-node",
            *the_plan.train(RANK_PLACEHOLDER).words]


class Requeue:
    """USR1 (the time limit is near): stop the training step (SIGTERM: the trainers save a checkpoint of their step),
    then requeue the job once the step has ended, or ``deadline_s`` after USR1 at the latest."""

    def __init__(self, job_id: str, output_dir: str, deadline_s: float = exit_status.STOP_GRACE_S):
        self.job_id, self.output_dir, self.deadline_s = job_id, output_dir, deadline_s
        self.asked = False
        self.requeued = False
        self.train: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __call__(self, signum, frame) -> None:
        if self.asked:
            return
        self.asked = True
        log(f"USR1 (time limit near): stopping the training step (it saves a checkpoint), then requeueing; the "
            f"next start resumes from {self.output_dir}")
        self._timer = threading.Timer(self.deadline_s, self.requeue)
        self._timer.daemon = True
        self._timer.start()
        if self.train is not None:
            # srun passes SIGTERM on to the tasks; torchrun (in accelerate launch) passes it to the trainers.
            self.train.terminate()

    def requeue(self) -> None:
        """``scontrol requeue`` once (Slurm then ends whatever still runs and queues the job again)."""
        with self._lock:
            if self.requeued:
                return
            self.requeued = True
        if self._timer is not None:
            self._timer.cancel()
        try:
            ok = subprocess.call(["scontrol", "requeue", self.job_id]) == 0
        except OSError:
            ok = False
        if not ok:
            log("warning: scontrol requeue failed")


def run_job(the_plan: Plan, output_dir: str, job_id: str, dry_run: bool) -> int:
    """Syncs, then the vLLM server (stopped on exit), then one training step over all training nodes."""
    for sync in the_plan.syncs:
        status = run_or_show(sync, dry_run)
        if status:
            return status
    requeue = Requeue(job_id, output_dir)
    previous = signal.signal(signal.SIGUSR1, requeue)
    server, status = None, 1
    try:
        if the_plan.server is not None:
            host = the_plan.layout.server_host
            # --overlap: on a single node the server step shares the node's GPUs with the training step.
            server = start_server(the_plan.server, f"{output_dir}/vllm-server.log", dry_run,
                                  wrap=["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={host}"])
            wait_for_server(server, the_plan)
        if dry_run:
            say(show("srun", srun_train(the_plan)))
            for rank, host in enumerate(the_plan.layout.train_hosts):
                say(the_plan.train(rank, f"train node {rank} {host}").shown())
            status = 0
            return status
        if not requeue.asked:
            requeue.train = subprocess.Popen(srun_train(the_plan))
            status = requeue.train.wait()
        if requeue.asked or status == exit_status.PREEMPTED:
            if not requeue.asked:
                log(f"the training step was stopped by a signal (status {status}): requeueing")
            requeue.requeue()
            status = 0
        return status
    finally:
        signal.signal(signal.SIGUSR1, previous)
        if server is not None:
            server.stop()
        if not dry_run:
            log(f"job script exiting with status {status}")


def job(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> int:
    """What grpo.sbatch runs on the job's first node (from the repository root)."""
    opts, trainer_args = parse_job(argv, env)
    the_plan, output_dir = job_plan(opts, trainer_args, env)
    return run_job(the_plan, output_dir, env["SLURM_JOB_ID"], opts.dry_run or env_dry_run(env))


def submit(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> int:
    """sbatch grpo.sbatch with the allocation's options, once the job's plan (with placeholder hosts)
    holds; in a dry run, print the sbatch command and the job's commands instead."""
    options, job_args = split_options(argv, SUBMIT_VALUES, {"--dry-run", "-h", "--help"}, keep_separator=True)
    given = dict(options)
    if "-h" in given or "--help" in given:
        say(__doc__.strip())
        return 0
    nodes, gpus = given.get("--nodes", "1"), given.get("--gpus-per-node", "8")
    for flag, value in (("--nodes", nodes), ("--gpus-per-node", gpus)):
        whole_number(flag, value, 1)
    name, root = given.get("--job-name", "olmocr-grpo"), repo_root(env)
    sbatch_args = [(v if f == "--sbatch-arg" else f"{f}={v}") for f, v in options
                   if f in ("--partition", "--account", "--qos", "--time", "--sbatch-arg")]
    script = root / "scripts" / "slurm" / "grpo.sbatch"
    cmd = ["sbatch", f"--nodes={nodes}", f"--gpus-per-node={gpus}", f"--job-name={name}", f"--chdir={root}",
           f"--output={root}/logs/%x-%j.out", f"--export=ALL,GRPO_REPO_ROOT={root}", *sbatch_args, str(script),
           "--gpus-per-node", gpus, *job_args]
    hosts = ",".join(f"node-{i}" for i in range(int(nodes)))
    job_env = {**env, "SLURM_JOB_ID": "0", "SLURM_JOB_NAME": name, "SLURM_NNODES": nodes,
               "SLURM_JOB_NODELIST": hosts, "SLURM_SUBMIT_DIR": str(root), "GRPO_REPO_ROOT": str(root)}
    job_argv = ["--dry-run", "--gpus-per-node", gpus, *job_args]
    if "--dry-run" in given:
        say("# dry run: would submit")
        say(show("sbatch", cmd))
        say("# and the job would run (placeholder hosts, job id 0):")
        return job(job_argv, job_env)
    # The job's own checks (layout, engine, --config, trainer flags) before anything is queued.
    job_plan(*parse_job(job_argv, job_env), job_env, announce=False)
    if shutil.which("sbatch") is None:
        raise LaunchError("sbatch not found: run this on a Slurm login node (or use --dry-run)")
    (root / "logs").mkdir(exist_ok=True)
    return subprocess.call(cmd)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"job": job, "submit": submit}
    if not argv or argv[0] not in commands:
        print("error: expected `job` or `submit` first: python -m olmocr_rl.launch.slurm submit --help",
              file=sys.stderr)
        return 2
    return guarded(lambda: commands[argv[0]](argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
