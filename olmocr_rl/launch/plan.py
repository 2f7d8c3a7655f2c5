"""Who runs what on which GPUs: the launch plan the Slurm and Beaker front-ends share.

:func:`plan` is pure: from the node count, GPUs per node, the vLLM server's GPUs, the engine
(``zero2``/``zero3``/``fsdp`` or an accelerate YAML), the rendezvous address and the trainer's
arguments it returns every command (s3 syncs, the ``trl vllm-serve`` server, one ``accelerate
launch`` per machine rank) with its ``CUDA_VISIBLE_DEVICES``, and the trainer arguments rewritten
so trainer and server agree (same model, ``--vllm_mode server``, the server's host and port).

The trainer's settings (which model the server must serve, ``--vllm_mode``, ``--output_dir``, ...)
are read with the trainer's own parser, so ``--config FILE.yaml``, aliases and defaults mean here
exactly what they mean to ``python -m olmocr_rl.grpo_train``.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from typing import Sequence

from olmocr_rl.config import default_vllm_max_model_length, explicit_flags, parse_args
from olmocr_rl.launch.status import STOP_GRACE_S

#: ``--accelerate-config`` short names and the files they stand for (paths relative to the repository).
ENGINES = {name: f"configs/accelerate/{name}.yaml" for name in ("zero2", "zero3", "fsdp")}
#: The trainer inputs that may be s3:// prefixes, synced to local disk before anything starts.
S3_INPUTS = ("model_name", "train_bench_data_folder", "eval_bench_data_folder")
#: What srun's per-node wrapper replaces with the node's SLURM_NODEID (its machine rank).
RANK_PLACEHOLDER = "__SLURM_NODEID__"


class LaunchError(ValueError):
    """A launcher option or trainer flag the user must change; the message says how."""


# ---------------------------------------------------------------------------------------------
# commands


def show(label: str, argv: Sequence[str]) -> str:
    """``[label] argv``, shell-quoted: ``shlex.split`` of the text after ``] `` gives back argv."""
    return f"[{label}] " + shlex.join(argv)


@dataclass(frozen=True)
class Command:
    """One process to start: a label for logs and dry runs, its argv, and its extra environment."""

    label: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def words(self) -> list[str]:
        """The argv with the environment as an ``env K=V ...`` prefix (what a dry run prints)."""
        prefix = ["env", *(f"{k}={v}" for k, v in self.env)] if self.env else []
        return [*prefix, *self.argv]

    def shown(self) -> str:
        return show(self.label, self.words)


def gpu_list(first: int, count: int) -> str:
    """``first,first+1,...``: the CUDA_VISIBLE_DEVICES of ``count`` GPUs."""
    return ",".join(str(i) for i in range(first, first + count))


def engine_config(engine: str) -> str:
    """The accelerate YAML of ``--accelerate-config``: a short name's file, else the path as given."""
    return ENGINES.get(engine, engine)


# ---------------------------------------------------------------------------------------------
# trainer arguments


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` / ``flag=VALUE`` on the command line, else None."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def set_flag(args: Sequence[str], flag: str, value: str) -> list[str]:
    """``args`` without any ``flag VALUE`` / ``flag=VALUE``, then ``flag value``: the flag exactly once."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            kept.append(arg)
    return [*kept, flag, value]


def settings(args: Sequence[str]) -> argparse.Namespace:
    """The trainer's flags as it will see them: ``--config`` file under the command line, defaults."""
    return parse_args(list(args))


def is_set(args: Sequence[str], dest: str) -> bool:
    """Whether the user chose flag ``dest``: on the command line or as a key of the --config file."""
    return dest in explicit_flags(list(args))


def s3_local_path(uri: str, root: str) -> str:
    """Where an s3:// prefix is mirrored: ``root/bucket/key`` (two inputs never collide)."""
    return f"{root.removesuffix('/')}/{uri.removesuffix('/').removeprefix('s3://')}"


def sync_command(uri: str, local: str, tool: str) -> Command:
    """Copy every object under the s3:// prefix into ``local`` with s5cmd (else ``aws s3 sync``)."""
    uri, local = uri.removesuffix("/"), local.removesuffix("/")
    if tool == "s5cmd":
        return Command("sync", ("s5cmd", "sync", f"{uri}/*", f"{local}/"))
    return Command("sync", ("aws", "s3", "sync", "--only-show-errors", f"{uri}/", f"{local}/"))


def localize(args: Sequence[str], root: str, tool: str = "s5cmd") -> tuple[list[str], list[Command]]:
    """Point every s3:// input (command line or --config) at its local copy under ``root``; return
    the new arguments and the sync commands that make the copies."""
    parsed, out, syncs = settings(args), list(args), []
    for key in S3_INPUTS:
        value = getattr(parsed, key)
        if isinstance(value, str) and value.startswith("s3://"):
            local = s3_local_path(value, root)
            syncs.append(sync_command(value, local, tool))
            out = set_flag(out, f"--{key}", local)
    return out, syncs


# ---------------------------------------------------------------------------------------------
# GPU layout


@dataclass(frozen=True)
class Layout:
    """Training nodes and their GPUs per node, and where the vLLM server runs (if anywhere)."""

    train_hosts: tuple[str, ...]
    train_gpus: int
    server_host: str | None = None
    server_gpus: str = ""  # the server's CUDA_VISIBLE_DEVICES on its host

    @property
    def train_visible(self) -> str:
        return gpu_list(0, self.train_gpus)

    @property
    def vllm_gpus(self) -> int:
        return len(self.server_gpus.split(",")) if self.server_gpus else 0


def gpu_layout(nodes: int, gpus_per_node: int, vllm_gpus: int, vllm_node: bool = False,
               hosts: Sequence[str] | None = None) -> Layout:
    """Split the allocation: a dedicated last node for vLLM (``vllm_node``), the last ``vllm_gpus``
    GPUs of a single node, or vLLM colocated in every trainer (``vllm_gpus`` 0). ``hosts`` None:
    one machine per rank reached as 127.0.0.1 (Beaker replicas)."""
    names = tuple(hosts) if hosts is not None else tuple(f"rank-{r}" for r in range(nodes))
    local = hosts is None
    if vllm_node:
        if nodes < 2:
            raise LaunchError(f"--vllm-node needs at least 2 nodes (one trains, one serves); got {nodes}")
        vllm_gpus = vllm_gpus if vllm_gpus > 0 else 1
        if vllm_gpus > gpus_per_node:
            raise LaunchError(f"--vllm-gpus {vllm_gpus} > --gpus-per-node {gpus_per_node}")
        # The server takes the LAST node, so training nodes keep ranks 0..n-2.
        return Layout(names[:-1], gpus_per_node, "127.0.0.1" if local else names[-1], gpu_list(0, vllm_gpus))
    if vllm_gpus > 0:
        if nodes != 1:
            raise LaunchError(
                f"--vllm-gpus {vllm_gpus} on {nodes} nodes: a server on some GPUs of every node is not supported; "
                "add --vllm-node (dedicated server node) or use --vllm-gpus 0 (colocate)")
        if vllm_gpus >= gpus_per_node:
            raise LaunchError(f"--vllm-gpus {vllm_gpus} leaves no training GPU of {gpus_per_node}; lower it")
        train = gpus_per_node - vllm_gpus
        return Layout(names[:1], train, "127.0.0.1" if local else names[0], gpu_list(train, vllm_gpus))
    return Layout(names, gpus_per_node)


# ---------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class ServerSettings:
    """The ``trl vllm-serve`` knobs both front-ends expose as ``--vllm-*`` options (strings, printed as
    given; :func:`olmocr_rl.launch.runtime.server_settings` checks them). These defaults are the only ones.

    ``gpu_memory_utilization`` is the server's share of its own GPUs; the trainer's
    ``--vllm_gpu_memory_utilization`` sizes the colocated engine only and does not reach the server.
    ``max_model_len`` None: derived from the trainer's settings (:func:`server_max_model_len`).
    """

    port: str = "8000"
    gpu_memory_utilization: str = "0.5"  # olmOCR's production value; leaves room for NCCL weight sync
    max_model_len: str | None = None
    health_timeout: str = "900"  # seconds; model download + load + CUDA graphs


@dataclass(frozen=True)
class Hints:
    """The front-end's words for a trainer set against the layout ({mode}, {vllm_gpus} filled in)."""

    conflict: str = "a vLLM server is configured (--vllm-gpus/--vllm-node) but the trainer is set to --vllm_mode {mode}"
    no_server: str = "add --vllm-gpus K (one node) or --vllm-node, or pass --vllm_mode colocate"
    async_no_server: str = "add a server with --vllm-gpus K (one node) or --vllm-node, or drop --async_generation"


@dataclass(frozen=True)
class Plan:
    """Every command of one launch, in start order, with the GPU assignment they follow."""

    layout: Layout
    trainer_args: tuple[str, ...]
    syncs: tuple[Command, ...]
    server: Command | None
    accelerate: tuple[str, ...]  # `accelerate launch ... --machine_rank {rank} ...` up to the trainer args
    server_settings: ServerSettings = field(default_factory=ServerSettings)

    @property
    def trains(self) -> tuple[Command, ...]:
        """Every machine rank's training command, rank 0 first."""
        return tuple(self.train(r) for r in range(len(self.layout.train_hosts)))

    @property
    def server_url(self) -> str | None:
        port = flag_value(self.trainer_args, "--vllm_server_port")
        return f"http://{self.layout.server_host}:{port}" if self.server else None

    def train(self, rank: int | str, label: str | None = None) -> Command:
        """The training command of machine ``rank`` (any string, e.g. :data:`RANK_PLACEHOLDER`). torchrun (inside
        accelerate launch) gets :data:`~olmocr_rl.launch.status.STOP_GRACE_S` seconds between passing a stop
        signal to the trainers and killing them: they save a checkpoint meanwhile."""
        argv = tuple(str(rank) if w == "{rank}" else w for w in self.accelerate) + self.trainer_args
        return Command(label or f"train rank {rank}", argv, (("CUDA_VISIBLE_DEVICES", self.layout.train_visible),
                                                            ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(STOP_GRACE_S))))


def settle_trainer_args(args: Sequence[str], layout: Layout, server: ServerSettings,
                        fill: Sequence[tuple[str, str]] = (), resume: bool = True, hints: Hints = Hints()) -> list[str]:
    """Add what the launch decides: unset ``fill`` flags, ``--resume_from_checkpoint``, and for a
    server the model both sides load plus ``--vllm_mode server`` and its host and port. Without one, refuses
    ``--vllm_mode server`` and ``--async_generation`` unless the trainer names a server run elsewhere."""
    out = list(args)
    for dest, value in fill:
        if value and not is_set(out, dest):
            out = set_flag(out, f"--{dest}", value)
    if resume and not has_flag(out, "--resume_from_checkpoint"):
        out.append("--resume_from_checkpoint")
    parsed = settings(out)
    if layout.server_host is not None:
        if parsed.vllm_mode not in ("server", "auto"):
            raise LaunchError(hints.conflict.format(mode=parsed.vllm_mode, vllm_gpus=layout.vllm_gpus))
        for flag, value in (("--model_name", parsed.model_name), ("--vllm_mode", "server"),
                            ("--vllm_server_host", layout.server_host), ("--vllm_server_port", server.port)):
            out = set_flag(out, flag, value)
    else:
        external = parsed.vllm_mode == "server" and is_set(out, "vllm_server_host")  # a server run elsewhere
        if parsed.async_generation and not external:
            # The trainer refuses it too (check_async_generation), but only once the job has started.
            where = "" if has_flag(out, "--async_generation") else f" (in --config {flag_value(out, '--config')})"
            raise LaunchError(f"the trainer is set to --async_generation{where}, which needs a vLLM server, but this "
                              "launch starts none: " + hints.async_no_server)
        if parsed.vllm_mode == "server" and not external:
            raise LaunchError("the trainer is set to --vllm_mode server but no GPU runs a server: " + hints.no_server)
    return out


def accelerate_prefix(engine: str, layout: Layout, main_ip: str, main_port: int | str) -> tuple[str, ...]:
    """``accelerate launch`` for one node (rank left as ``{rank}``); --num_processes is the total
    over all machines, --main_process_ip only when there is more than one."""
    machines = len(layout.train_hosts)
    argv = ["accelerate", "launch", "--config_file", engine_config(engine), "--num_processes",
            str(machines * layout.train_gpus), "--num_machines", str(machines), "--machine_rank", "{rank}"]
    if machines > 1:
        argv += ["--main_process_ip", main_ip]
    return (*argv, "--main_process_port", str(main_port), "-m", "olmocr_rl.grpo_train")


def server_max_model_len(parsed: argparse.Namespace, server: ServerSettings) -> str:
    """The server's context: the launcher's explicit ``--vllm-max-model-len``, else the trainer's
    ``--vllm_max_model_length``, else what a page rollout can need at the trainer's
    ``--target_longest_image_dim`` and ``--max_completion_length`` (the trainer's own default)."""
    trainer = parsed.vllm_max_model_length
    if server.max_model_len is None:
        if trainer is not None:
            return str(trainer)
        return str(default_vllm_max_model_length(parsed.target_longest_image_dim, parsed.max_completion_length))
    if trainer is not None and int(server.max_model_len) != trainer:
        raise LaunchError(f"--vllm-max-model-len {server.max_model_len} disagrees with the trainer's "
                          f"--vllm_max_model_length {trainer}; give only one of them")
    if int(server.max_model_len) <= parsed.max_completion_length:
        raise LaunchError(f"--vllm-max-model-len {server.max_model_len} leaves no room for the prompt: it must exceed "
                          f"--max_completion_length {parsed.max_completion_length}; drop it to derive the length")
    return server.max_model_len


def server_command(parsed: argparse.Namespace, layout: Layout, server: ServerSettings) -> Command:
    """``trl vllm-serve`` on the server's GPUs for the trainer's ``parsed`` settings (its model, context,
    ``--vllm_dtype`` unless auto); tensor parallel (TRL refuses data parallel for dense models)."""
    argv = ["trl", "vllm-serve", "--model", parsed.model_name, "--host", "0.0.0.0", "--port", server.port,
            "--tensor_parallel_size", str(layout.vllm_gpus), "--gpu_memory_utilization", server.gpu_memory_utilization,
            "--max_model_len", server_max_model_len(parsed, server)]
    if parsed.vllm_dtype != "auto":
        argv += ["--dtype", parsed.vllm_dtype]
    if parsed.vllm_enforce_eager:
        argv += ["--enforce_eager"]
    return Command("vllm", tuple(argv), (("CUDA_VISIBLE_DEVICES", layout.server_gpus),))


def plan(*, nodes: int, gpus_per_node: int, vllm_gpus: int, engine: str, trainer_args: Sequence[str],
         vllm_node: bool = False, hosts: Sequence[str] | None = None, main_ip: str = "127.0.0.1",
         main_port: int | str = 29500, server: ServerSettings = ServerSettings(), data_root: str | None = None,
         sync_tool: str = "s5cmd", fill: Sequence[tuple[str, str]] = (), resume: bool = True,
         hints: Hints = Hints()) -> Plan:
    """The whole launch: GPU layout, s3 syncs, the vLLM server, and every machine rank's trainer.

    ``hosts`` names the nodes (Slurm; the first training node is the rendezvous address) or is None
    (Beaker: every rank is its own machine; the server, if any, is local). ``fill`` lists trainer
    flags set to a value unless the user set them (``output_dir``, ...). Raises :class:`LaunchError`.
    """
    layout = gpu_layout(nodes, gpus_per_node, vllm_gpus, vllm_node, hosts)
    args, syncs = localize(trainer_args, data_root, sync_tool) if data_root else (list(trainer_args), [])
    args = settle_trainer_args(args, layout, server, fill, resume, hints)
    if hosts is not None:
        main_ip = layout.train_hosts[0]
    server_cmd = None
    if layout.server_host is not None:
        server_cmd = server_command(settings(args), layout, server)
    return Plan(layout, tuple(args), tuple(syncs), server_cmd, accelerate_prefix(engine, layout, main_ip, main_port),
                server)
