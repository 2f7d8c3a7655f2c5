"""Checkpoints and resume: which ``checkpoint-<N>`` folders are whole, node manifests, pulls from S3.

* ``find_latest_checkpoint(output_dir)`` -> the newest complete local checkpoint;
* ``pull_latest_checkpoint_from_s3(s3_uri, output_dir)`` -> the newest complete one on S3, downloaded;
* ``resolve_resume_checkpoint(output_dir, s3_save_path)`` -> local, else pulled from S3, else None;
* ``resume_checkpoint(flag, output_dir, s3_save_path)`` -> what ``--resume_from_checkpoint`` resumes from,
  with the run's metrics.jsonl history restored to end at that checkpoint.

A checkpoint's per-node manifests (``checkpoint-N/olmocr_rl_manifest/node-R.json``) are written and
uploaded by node R's local main process after every file of its ranks reached S3 (storage.callback). A
checkpoint that has manifests counts as complete on S3 only when all of its nodes' manifests are there and
every file they list is there with its size.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from olmocr_rl.ranks import global_rank, is_main_process
from olmocr_rl.storage import s3
from olmocr_rl.storage.files import folder_lock
from olmocr_rl.storage.s3 import (
    PARTIAL_SUFFIX,
    RemoteObject,
    StorageError,
    explain,
    folder_prefix,
    human_bytes,
    list_objects,
    parse_s3_uri,
    safe_relative,
    storage_errors,
)

logger = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
MANIFEST_DIR = "olmocr_rl_manifest"
HISTORY_FILE = "metrics.jsonl"  # the run's log records (telemetry.history.MetricsFileCallback)

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_SINGLE_WEIGHTS = frozenset(
    {"model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin"}
)
_SHARD_RE = re.compile(r"^(model|pytorch_model)-(\d+)-of-(\d+)\.(safetensors|bin)$")


def checkpoint_step(name: str) -> int | None:
    """``"checkpoint-500"`` -> 500; None for any other name."""
    match = _CHECKPOINT_RE.match(name)
    return int(match.group(1)) if match else None


def has_model_weights(files: Iterable[str]) -> bool:
    """Whether a checkpoint's relative file paths include whole model weights.

    Accepted: a single ``model.safetensors`` / ``pytorch_model.bin`` / ``adapter_model.*``; a full set of
    shards ``model-0000i-of-0000N.safetensors`` (all N present); a DeepSpeed ``latest`` + ``global_step*/``
    pair; an FSDP ``pytorch_model_fsdp_*`` entry.
    """
    names = set(files)
    if names & _SINGLE_WEIGHTS:
        return True
    shard_sets: dict[tuple[str, int, str], set[int]] = {}
    for name in names:
        match = _SHARD_RE.match(name)
        if match:
            stem, index, total, ext = match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
            shard_sets.setdefault((stem, total, ext), set()).add(index)
    if any(indices == set(range(1, total + 1)) for (_, total, _), indices in shard_sets.items()):
        return True
    if "latest" in names and any(name.startswith("global_step") and "/" in name for name in names):
        return True
    return any(name.startswith("pytorch_model_fsdp_") for name in names)


def is_complete_checkpoint(files: Iterable[str]) -> bool:
    """A checkpoint counts only with ``trainer_state.json`` (written last by the Trainer) and weights."""
    names = set(files)
    return TRAINER_STATE in names and has_model_weights(names)


def local_checkpoint_files(folder: Path) -> set[str]:
    return {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.endswith(PARTIAL_SUFFIX)
    }


def marks_whole(rel: str) -> bool:
    """Whether a file marks its checkpoint whole (trainer_state.json, a node manifest): sent last, deleted first."""
    path = PurePosixPath(rel)
    return path.name == TRAINER_STATE or MANIFEST_DIR in path.parts


def state_last(rel: str) -> tuple[bool, str]:
    """Upload order: a checkpoint's trainer_state.json (and manifests) last, so a remote checkpoint that has
    them is whole."""
    return (marks_whole(rel), rel)


def find_latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The complete ``checkpoint-<N>`` folder with the largest N in ``output_dir``, or None.

    Incomplete folders (no trainer_state.json or no weights, e.g. a save killed half-way) are skipped
    with a log line, so a resume never loads a half-written checkpoint.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return None
    candidates = sorted(
        ((step, path) for path in root.iterdir() if path.is_dir() and (step := checkpoint_step(path.name)) is not None),
        reverse=True,
    )
    for _step, path in candidates:
        if is_complete_checkpoint(local_checkpoint_files(path)):
            return path
        logger.warning("skipping incomplete checkpoint %s (needs %s and model weights)", path, TRAINER_STATE)
    return None


class CheckpointMismatchError(StorageError):
    """The checkpoint to resume from was saved by another world size or engine, or for another architecture."""


@dataclass(frozen=True)
class Topology:
    """How a run is laid out: processes, machines, this process's machine, and the training engine."""

    world_size: int = 1
    num_machines: int = 1
    node_rank: int = 0
    engine: str = "single"

    def describe(self) -> str:
        return (f"{self.world_size} process{'es' if self.world_size != 1 else ''} on {self.num_machines} "
                f"machine{'s' if self.num_machines != 1 else ''} ({self.engine})")

    def same_layout(self, other: "Topology") -> bool:
        return (self.world_size, self.num_machines, self.engine) == (other.world_size, other.num_machines, other.engine)


def current_engine() -> str:
    """The engine accelerate runs this process with, from the variables ``accelerate launch`` sets.

    FSDP and DeepSpeed run only on accelerators: on CPU accelerate trains plain data parallel even under
    an FSDP or DeepSpeed config, and the label says so.
    """
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1") or 1)
    try:
        import torch

        on_gpu = torch.cuda.is_available() and env.get("ACCELERATE_USE_CPU", "false").lower() != "true"
    except ImportError:
        on_gpu = False
    if on_gpu and env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return f"deepspeed-zero{env.get('ACCELERATE_DEEPSPEED_ZERO_STAGE', '?')}"
    if on_gpu and env.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return f"fsdp{env.get('FSDP_VERSION', '1')}-{env.get('FSDP_STATE_DICT_TYPE', 'FULL_STATE_DICT').lower()}"
    if world > 1:
        return "ddp" if on_gpu else "ddp-cpu"
    return "single"


def current_topology() -> Topology:
    """This process's layout from the launcher's environment (torchrun's WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK)."""
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1") or 1)
    local_world = int(env.get("LOCAL_WORLD_SIZE", str(world)) or world)
    rank = global_rank()
    node = int(env.get("GROUP_RANK", str(rank // max(local_world, 1))) or 0)
    return Topology(world_size=world, num_machines=max(1, world // max(local_world, 1)), node_rank=node,
                    engine=current_engine())


def manifest_name(node_rank: int) -> str:
    """A node's manifest, relative to its checkpoint folder."""
    return f"{MANIFEST_DIR}/node-{node_rank}.json"


def _manifest_topology(manifest: dict) -> Topology:
    return Topology(world_size=int(manifest.get("world_size", 1)), num_machines=int(manifest.get("num_machines", 1)),
                    node_rank=int(manifest.get("node_rank", 0)), engine=str(manifest.get("engine", "?")))


def checkpoint_problem(sizes: dict[str, int], manifests: list[dict], *, need_manifests: bool = False) -> str | None:
    """Why a checkpoint (its files' sizes, its node manifests) is not whole; None when it is.

    Without manifests (a checkpoint from before they existed, or one whose upload was cut before them)
    the old rule applies, trainer_state.json and model weights, unless ``need_manifests`` (a run on
    several machines: only the manifests show that the other machines' files arrived). With them: every
    node of the run left its manifest, and every file a manifest lists is there with the listed size,
    trainer_state.json and weights included.
    """
    if not manifests:
        if need_manifests:
            return "no node manifest: the machines' files may not all have reached S3"
        return None if is_complete_checkpoint(sizes) else f"needs {TRAINER_STATE} and model weights"
    layouts = {(_manifest_topology(m).world_size, _manifest_topology(m).num_machines) for m in manifests}
    if len(layouts) != 1:
        return f"its node manifests disagree on the run's layout ({sorted(layouts)})"
    machines = _manifest_topology(manifests[0]).num_machines
    nodes = {_manifest_topology(m).node_rank for m in manifests}
    if missing := sorted(set(range(machines)) - nodes):
        return f"no manifest from node(s) {missing} of {machines}: their files may not have reached S3"
    listed: dict[str, int] = {}
    for manifest in manifests:
        listed.update({str(k): int(v) for k, v in dict(manifest.get("files", {})).items()})
    for rel, size in sorted(listed.items()):
        if rel not in sizes:
            return f"{rel} is missing"
        if sizes[rel] != size:
            return f"{rel} has {sizes[rel]} bytes, its manifest says {size}"
    if not is_complete_checkpoint(listed):
        return f"its manifests list no {TRAINER_STATE} or no model weights"
    return None


def check_layout(checkpoint: str, manifests: list[dict], current: Topology) -> None:
    """CheckpointMismatchError when ``checkpoint`` was saved by another world size or engine."""
    if not manifests:
        return
    saved = _manifest_topology(manifests[0])
    if not saved.same_layout(current):
        raise CheckpointMismatchError(
            f"{checkpoint} was saved by {saved.describe()}, this run has {current.describe()}: restart with the "
            f"same number of processes and machines and the same accelerate config, or start a new run (another "
            f"--output_dir and --s3_save_path)"
        )


def _local_manifests(folder: Path) -> list[dict]:
    manifests = []
    for path in sorted((folder / MANIFEST_DIR).glob("node-*.json")):
        try:
            manifests.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return manifests


def _remote_manifests(client, bucket: str, files: dict[str, RemoteObject]) -> list[dict]:
    manifests = []
    for rel in sorted(files):
        if PurePosixPath(rel).parent.as_posix() == MANIFEST_DIR and rel.endswith(".json"):
            body = client.get_object(Bucket=bucket, Key=files[rel].key)["Body"].read()
            try:
                manifests.append(json.loads(body))
            except ValueError:
                manifests.append({"num_machines": -1})  # unreadable: never complete
    return manifests


def pull_latest_checkpoint_from_s3(
    s3_uri: str, output_dir: str | os.PathLike, *, topology: Topology | None = None, prefer_remote: bool = False,
) -> Path | None:
    """Download the newest complete ``checkpoint-<N>/`` under ``s3_uri`` into ``output_dir``.

    Returns the local checkpoint when ``output_dir`` already has one (nothing is fetched; with
    ``prefer_remote``, used by multi-machine runs, S3's newest complete checkpoint wins instead and only
    the files the local copy lacks are fetched), the pulled checkpoint's path, or None when S3 holds no
    complete checkpoint. Complete means :func:`checkpoint_problem` finds nothing: with node manifests,
    every node's files are there. Every file of the checkpoint comes down (each node then has every
    rank's shards), the older checkpoints stay on S3, files arrive under temporary names, with S3's
    modification times, and trainer_state.json and the manifests come last, so an interrupted pull is
    never taken for a whole checkpoint and a rerun finishes it. Raises CheckpointMismatchError when the
    checkpoint's manifests name another world size or engine than ``topology``, and StorageError naming
    the URI when S3 cannot be listed or read.
    """
    output = Path(output_dir)
    current = topology or current_topology()
    if not prefer_remote:
        local = find_latest_checkpoint(output)
        if local is not None:
            return local
    bucket, prefix = parse_s3_uri(s3_uri)
    client = None
    try:
        client = s3.make_s3_client()
        newest, files, manifests = _newest_remote_checkpoint(client, s3_uri, bucket, folder_prefix(prefix), current)
    except storage_errors() as exc:
        raise explain(exc, "listing checkpoints in", s3_uri, client) from exc
    if newest is None:
        logger.info("no complete checkpoint-<N>/ under %s", s3_uri)
        return None
    source = f"s3://{bucket}/{folder_prefix(prefix)}{newest}/"
    check_layout(source, manifests, current)
    started = time.monotonic()
    with folder_lock(output / ".olmocr_rl-pull.lock"):
        try:
            fetched = _download_checkpoint(client, bucket, files, output / newest, source)
        except storage_errors() as exc:
            raise explain(exc, "downloading checkpoint from", source, client) from exc
    logger.info(
        "pulled %s (%d files, %s; %d fetched) into %s in %.1f s", source, len(files),
        human_bytes(sum(o.size for o in files.values())), fetched, output / newest, time.monotonic() - started,
    )
    return output / newest


def _newest_remote_checkpoint(
    client, s3_uri: str, bucket: str, folder: str, current: Topology,
) -> tuple[str | None, dict[str, RemoteObject], list[dict]]:
    """The newest complete checkpoint under ``folder``: its name, its files (by path inside it), its manifests."""
    by_checkpoint: dict[str, dict[str, RemoteObject]] = {}
    for rel, obj in list_objects(client, bucket, folder).items():
        top, _, rest = rel.partition("/")
        if rest and checkpoint_step(top) is not None:
            by_checkpoint.setdefault(top, {})[rest] = obj
    for name in sorted(by_checkpoint, key=checkpoint_step, reverse=True):
        manifests = _remote_manifests(client, bucket, by_checkpoint[name])
        problem = checkpoint_problem({rel: obj.size for rel, obj in by_checkpoint[name].items()}, manifests,
                                     need_manifests=current.num_machines > 1)
        if problem is None:
            return name, by_checkpoint[name], manifests
        logger.warning("skipping incomplete checkpoint %s/%s on S3: %s", s3_uri.rstrip("/"), name, problem)
    return None, {}, []


def _download_checkpoint(client, bucket: str, files: dict[str, RemoteObject], destination: Path, source: str) -> int:
    """Fetch the files ``destination`` lacks, trainer_state.json and manifests last; returns how many came down."""
    fetched = 0
    for rest in sorted(files, key=state_last):
        local_path = destination / safe_relative(rest, source)
        if local_path.is_file() and local_path.stat().st_size == files[rest].size:
            continue  # finished by an earlier, interrupted pull (files are renamed only when whole)
        s3.download_object(client, bucket, files[rest].key, local_path)
        # S3's time: the mirror then sees the file as sent, not as a newer file to upload again.
        os.utime(local_path, (files[rest].last_modified, files[rest].last_modified))
        fetched += 1
    return fetched


def resolve_resume_checkpoint(
    output_dir: str | os.PathLike, s3_save_path: str | None = None, topology: Topology | None = None,
) -> Path | None:
    """The checkpoint to resume from: newest complete local one, else the newest pulled from S3, else None.

    A run on several machines with ``s3_save_path`` takes S3's newest complete checkpoint first (every
    node's files there, per its manifests), so all machines agree whatever their local disks hold; its
    local disk is the fallback. None means "nothing to resume, start fresh" (launchers pass
    --resume_from_checkpoint on every restart). StorageError when ``s3_save_path`` is given but S3
    cannot be read: resuming was asked for, so silently starting over would be wrong;
    CheckpointMismatchError when the checkpoint was saved by another world size or engine.
    """
    topology = topology or current_topology()
    if s3_save_path and topology.num_machines > 1:
        pulled = pull_latest_checkpoint_from_s3(s3_save_path, output_dir, topology=topology, prefer_remote=True)
        if pulled is not None:
            logger.info("resuming from %s, pulled from %s", pulled, s3_save_path)
            return pulled
    local = find_latest_checkpoint(output_dir)
    if local is not None:
        check_layout(str(local), _local_manifests(local), topology)
        logger.info("resuming from local checkpoint %s", local)
        return local
    if s3_save_path and topology.num_machines == 1:
        pulled = pull_latest_checkpoint_from_s3(s3_save_path, output_dir, topology=topology)
        if pulled is not None:
            logger.info("resuming from %s, pulled from %s", pulled, s3_save_path)
        return pulled
    return None


# ---- --resume_from_checkpoint ----------------------------------------------------------------------


def resume_checkpoint(
    flag: bool | str | os.PathLike | None, output_dir: str | os.PathLike, s3_save_path: str | None = None,
) -> str | None:
    """What ``--resume_from_checkpoint`` resumes from: None (start fresh) or a checkpoint folder.

    ``flag`` is the flag's value: falsy (do not resume), True (:func:`resolve_resume_checkpoint`: the
    newest local checkpoint, else one pulled from ``s3_save_path``; none found starts fresh) or a path
    (taken as given, its node manifests checked against this run's layout like any other). On the main process the run's metrics.jsonl is then made to end at the checkpoint's
    step (:func:`restore_history`). Raises what :func:`resolve_resume_checkpoint` raises.
    """
    if not flag:
        return None
    if flag is not True:
        checkpoint = Path(flag)
        # Another world size or engine: one line here, not a failure deep inside the Trainer's load.
        check_layout(str(checkpoint), _local_manifests(checkpoint), current_topology())
    else:
        checkpoint = resolve_resume_checkpoint(output_dir, s3_save_path)
        if checkpoint is None:
            where = f"{output_dir}" + (f" or {s3_save_path}" if s3_save_path else "")
            logger.info("--resume_from_checkpoint: no checkpoint in %s, starting fresh", where)
            return None
    logger.info("resuming from %s", checkpoint)
    if is_main_process():
        restore_history(checkpoint, output_dir, s3_save_path)
    return str(checkpoint)


def restore_history(checkpoint: str | os.PathLike, output_dir: str | os.PathLike, s3_save_path: str | None = None) -> None:
    """Make OUTPUT_DIR/metrics.jsonl end at the checkpoint's step before training appends to it.

    On a fresh machine (the checkpoint was pulled from ``s3_save_path``) the file is fetched from S3
    first; otherwise the final mirror would replace the remote history with only the resumed steps.
    Failures are logged: the history is a convenience, the checkpoint is what matters.
    """
    metrics = Path(output_dir) / HISTORY_FILE
    try:
        last_step = int(json.loads((Path(checkpoint) / TRAINER_STATE).read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("cannot read the step of %s (%s); %s left as it is", checkpoint, exc, HISTORY_FILE)
        return
    if not metrics.exists() and s3_save_path:
        _fetch_history(s3_save_path, metrics)
    kept, dropped = trim_history(metrics, last_step)
    if dropped:
        logger.info("%s: dropped %d records after step %d (trained again now), kept %d",
                    HISTORY_FILE, dropped, last_step, kept)


def _fetch_history(s3_save_path: str, destination: Path) -> None:
    """Download the run's history beside the checkpoints on S3; a failure is a warning (the run goes on)."""
    bucket, prefix = parse_s3_uri(s3_save_path)
    key = folder_prefix(prefix) + destination.name  # where S3SyncCallback's mirror put it
    try:
        s3.download_object(s3.make_s3_client(), bucket, key, destination)
    except storage_errors() as exc:  # a missing object, a dead server: the run goes on with a shorter history
        logger.warning("could not restore the run history from s3://%s/%s (%s: %s); %s starts at the resumed "
                       "step", bucket, key, type(exc).__name__, exc, destination.name)
        return
    logger.info("restored the run history from s3://%s/%s", bucket, key)


def trim_history(path: str | Path, last_step: int) -> tuple[int, int]:
    """Drop the records of steps after ``last_step`` from a metrics.jsonl; returns (kept, dropped).

    A run resumed from ``checkpoint-<last_step>`` trains those steps again, and would otherwise leave
    two records per step. Lines that are not a JSON object with a numeric ``step`` are kept as they
    are (not ours to judge). A missing file is (0, 0). The file is replaced atomically.
    """
    path = Path(path)
    if not path.is_file():
        return 0, 0
    kept: list[str] = []
    dropped = 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > last_step:
            dropped += 1
            continue
        kept.append(line)
    if dropped:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(path)
    return len(kept), dropped
