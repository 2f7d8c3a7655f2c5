"""Checkpoints: which ``checkpoint-<N>`` folders are whole, node manifests, layouts, pulls from S3, the history.

* ``local_checkpoint_problem(folder)`` -> why a checkpoint on disk cannot be resumed from (None: it can);
* ``find_latest_checkpoint(output_dir)`` -> the newest local checkpoint that verifies;
* ``remote_checkpoints`` / ``check_remote_checkpoint`` -> S3's checkpoints, newest first, and whether one is whole;
* ``pull_latest_checkpoint_from_s3(s3_uri, output_dir)`` -> the newest whole one on S3, downloaded;
* ``missing_training_state(files)`` -> the optimizer/scheduler files a checkpoint lacks;
* ``restore_history`` / ``trim_history`` -> the run's metrics.jsonl made to end at a checkpoint's step.

Which checkpoint a run resumes from is decided in storage.resume. A checkpoint's per-node manifests
(``checkpoint-N/olmocr_rl_manifest/node-R.json``, storage.verify) are written by node R's local main
process once every file of its ranks is on its disk, and go to S3 after those files. A checkpoint that has
manifests counts as complete on S3 only when all of its nodes' manifests are there and every file they list
is there with its size; on disk, when every listed file has its size and checksum and no file's own format
says it was cut short.
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

from olmocr_rl.ranks import global_rank
from olmocr_rl.storage import s3
from olmocr_rl.storage.files import describe_write_failure, folder_lock
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
from olmocr_rl.storage.verify import (  # noqa: F401  (manifest_name: re-exported)
    MANIFEST_DIR,
    TRAINER_STATE,
    checksum,
    local_files,
    manifest_name,
    verify_folder,
)

logger = logging.getLogger(__name__)

HISTORY_FILE = "metrics.jsonl"  # the run's log records (telemetry.history.MetricsFileCallback)

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_SINGLE_WEIGHTS = frozenset(
    {"model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin"}
)
_SHARD_RE = re.compile(r"^(model|pytorch_model)-(\d+)-of-(\d+)\.(safetensors|bin)$")
#: What a resume needs beyond the weights to go on as the run would have: the optimizer's moments and the
#: learning-rate schedule (transformers' file names; DeepSpeed and FSDP keep them in their own layouts).
OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")
SCHEDULER_FILE = "scheduler.pt"


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


def missing_training_state(files: Iterable[str]) -> list[str]:
    """The optimizer and scheduler files a checkpoint lacks (``[]`` when it has both, or keeps them in a DeepSpeed
    or FSDP layout of its own). Without them a resume restarts Adam's moments and the learning-rate schedule."""
    names = set(files)
    if "latest" in names and any(name.startswith("global_step") and "/" in name for name in names):
        return []  # DeepSpeed: its global_step*/ folder holds the optimizer (and scheduler) state
    missing = []
    if not names & set(OPTIMIZER_FILES) and not any(name.startswith("optimizer_") for name in names):  # FSDP
        missing.append(OPTIMIZER_FILES[0])
    if SCHEDULER_FILE not in names:
        missing.append(SCHEDULER_FILE)
    return missing


def local_checkpoint_files(folder: Path) -> set[str]:
    return set(local_files(folder))


def local_checkpoint_problem(folder: Path) -> str | None:
    """Why the checkpoint folder cannot be resumed from, None when it can: trainer_state.json and weights
    present, every file as its manifests list it (size and checksum), none cut short by its own format, and
    trainer_state.json naming its step."""
    files = local_checkpoint_files(folder)
    if not is_complete_checkpoint(files):
        return f"needs {TRAINER_STATE} and model weights"
    problem = verify_folder(folder)
    if problem:
        return problem
    state = json.loads((folder / TRAINER_STATE).read_text())  # parses: verify_folder checked it
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return f"{TRAINER_STATE} has no global_step"
    return None


def marks_whole(rel: str) -> bool:
    """Whether a file marks its checkpoint whole (trainer_state.json, a node manifest): sent last, deleted first."""
    path = PurePosixPath(rel)
    return path.name == TRAINER_STATE or MANIFEST_DIR in path.parts


def state_last(rel: str) -> tuple[bool, str]:
    """Upload order: a checkpoint's trainer_state.json (and manifests) last, so a remote checkpoint that has
    them is whole."""
    return (marks_whole(rel), rel)


def local_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<N>`` folder in ``output_dir``, newest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    return sorted(((step, path) for path in root.iterdir()
                   if path.is_dir() and (step := checkpoint_step(path.name)) is not None), reverse=True)


def find_latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The newest ``checkpoint-<N>`` folder in ``output_dir`` that verifies (:func:`local_checkpoint_problem`),
    or None. Each newer one that does not is skipped with a log line saying why, so a resume never loads a
    half-written or damaged checkpoint."""
    for _step, path in local_checkpoints(output_dir):
        problem = local_checkpoint_problem(path)
        if problem is None:
            return path
        logger.warning("skipping checkpoint %s: %s", path, problem)
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


def _on_accelerator() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "false").lower() != "true"
    except ImportError:
        return False


def sharded_engines_run_here() -> bool:
    """Whether accelerate runs an FSDP or DeepSpeed config as such in this process: on an accelerator only (on
    CPU it trains plain data parallel even under those configs)."""
    return _on_accelerator()


def current_engine() -> str:
    """The engine accelerate runs this process with, from the variables ``accelerate launch`` sets.

    FSDP and DeepSpeed run only where :func:`sharded_engines_run_here`; elsewhere accelerate trains plain data
    parallel even under an FSDP or DeepSpeed config, and the label says so.
    """
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1") or 1)
    sharded = sharded_engines_run_here()
    if sharded and env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return f"deepspeed-zero{env.get('ACCELERATE_DEEPSPEED_ZERO_STAGE', '?')}"
    if sharded and env.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return f"fsdp{env.get('FSDP_VERSION', '1')}-{env.get('FSDP_STATE_DICT_TYPE', 'FULL_STATE_DICT').lower()}"
    if world > 1:
        return "ddp" if _on_accelerator() else "ddp-cpu"
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


@dataclass(frozen=True)
class RemoteCheckpoint:
    """A checkpoint on S3 that is whole: its URI, its files (by path inside it), manifests and trainer state."""

    uri: str  # s3://bucket/prefix/checkpoint-N/
    bucket: str
    name: str
    files: dict[str, RemoteObject]
    manifests: list[dict]
    state: dict
    state_body: bytes  # trainer_state.json as read: written as is when pulled (no second download)

    @property
    def step(self) -> int:
        return int(checkpoint_step(self.name) or 0)


def remote_checkpoints(client, bucket: str, folder: str) -> dict[str, dict[str, RemoteObject]]:
    """Every ``checkpoint-<N>/`` under ``folder`` on S3 and its files (by path inside it)."""
    by_checkpoint: dict[str, dict[str, RemoteObject]] = {}
    for rel, obj in list_objects(client, bucket, folder).items():
        top, _, rest = rel.partition("/")
        if rest and checkpoint_step(top) is not None:
            by_checkpoint.setdefault(top, {})[rest] = obj
    return by_checkpoint


def check_remote_checkpoint(client, uri: str, bucket: str, name: str, files: dict[str, RemoteObject],
                            need_manifests: bool) -> tuple[RemoteCheckpoint | None, str | None]:
    """``(checkpoint, None)`` when S3's ``name`` is whole (:func:`checkpoint_problem`, and a trainer_state.json
    that parses), else ``(None, why not)``."""
    manifests = _remote_manifests(client, bucket, files)
    problem = checkpoint_problem({rel: obj.size for rel, obj in files.items()}, manifests,
                                 need_manifests=need_manifests)
    if problem:
        return None, problem
    body = client.get_object(Bucket=bucket, Key=files[TRAINER_STATE].key)["Body"].read()
    try:
        state = json.loads(body)
    except ValueError as exc:
        return None, f"{TRAINER_STATE} is not valid JSON ({exc}): written only in part"
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return None, f"{TRAINER_STATE} has no global_step"
    return RemoteCheckpoint(uri, bucket, name, files, manifests, state, body), None


def newest_remote_checkpoint(s3_uri: str, topology: Topology | None = None, *, newer_than: int = -1,
                             damaged: list[str] | None = None) -> RemoteCheckpoint | None:
    """S3's newest whole checkpoint with a step above ``newer_than``, or None; each newer one that is not whole
    is skipped with a log line saying why (and, when it has the trainer_state.json only a whole upload ends with,
    a ``name on S3: why`` line added to ``damaged``). StorageError naming the URI when S3 cannot be listed."""
    current = topology or current_topology()
    bucket, prefix = parse_s3_uri(s3_uri)
    folder = folder_prefix(prefix)
    client = None
    try:
        client = s3.make_s3_client()
        listing = remote_checkpoints(client, bucket, folder)
        for name in sorted(listing, key=checkpoint_step, reverse=True):
            if checkpoint_step(name) <= newer_than:
                break
            uri = f"s3://{bucket}/{folder}{name}/"
            found, problem = check_remote_checkpoint(client, uri, bucket, name, listing[name],
                                                     need_manifests=current.num_machines > 1)
            if found is not None:
                return found
            logger.warning("skipping checkpoint %s/%s on S3: %s", s3_uri.rstrip("/"), name, problem)
            if damaged is not None and TRAINER_STATE in listing[name]:
                damaged.append(f"{name} on S3: {problem}")
    except storage_errors() as exc:
        raise explain(exc, "listing checkpoints in", s3_uri, client) from exc
    return None


def pull_checkpoint(remote: RemoteCheckpoint, output_dir: str | os.PathLike) -> Path:
    """Download ``remote`` into ``output_dir/<name>``: only the files the local copy lacks or has damaged (size,
    or checksum where a manifest gives one), under temporary names, with S3's modification times, manifests and
    trainer_state.json last, so an interrupted pull is never taken for a whole checkpoint and a rerun finishes
    it. Every file comes down (each node then has every rank's shards). StorageError naming the URI on failure."""
    output = Path(output_dir)
    started = time.monotonic()
    client = None
    with folder_lock(output / ".olmocr_rl-pull.lock"):
        try:
            client = s3.make_s3_client()
            fetched = _download_checkpoint(client, remote, output / remote.name)
        except storage_errors() as exc:
            size = sum(o.size for o in remote.files.values())
            full = describe_write_failure(exc, output / remote.name, size)
            if full:  # this disk, not S3: the sizes, and what to do
                raise StorageError(f"pulling {remote.uri} into {output / remote.name} failed: {full}: make room (or "
                                   "point --output_dir at a disk with room) and rerun; what was pulled is kept and "
                                   "not fetched again") from exc
            raise explain(exc, "downloading checkpoint from", remote.uri, client) from exc
    logger.info(
        "pulled %s (%d files, %s; %d fetched) into %s in %.1f s", remote.uri, len(remote.files),
        human_bytes(sum(o.size for o in remote.files.values())), fetched, output / remote.name,
        time.monotonic() - started,
    )
    return output / remote.name


def pull_latest_checkpoint_from_s3(
    s3_uri: str, output_dir: str | os.PathLike, *, topology: Topology | None = None, prefer_remote: bool = False,
) -> Path | None:
    """Download the newest whole ``checkpoint-<N>/`` under ``s3_uri`` into ``output_dir`` (:func:`pull_checkpoint`).

    Returns the local checkpoint when ``output_dir`` already has one that verifies (nothing is fetched; with
    ``prefer_remote``, used by multi-machine runs, S3's newest whole checkpoint wins instead), the pulled
    checkpoint's path, or None when S3 holds no whole checkpoint. Raises CheckpointMismatchError when the
    checkpoint's manifests name another world size or engine than ``topology``, and StorageError naming the
    URI when S3 cannot be listed or read.
    """
    current = topology or current_topology()
    if not prefer_remote:
        local = find_latest_checkpoint(output_dir)
        if local is not None:
            return local
    remote = newest_remote_checkpoint(s3_uri, current)
    if remote is None:
        logger.info("no complete checkpoint-<N>/ under %s", s3_uri)
        return None
    check_layout(remote.uri, remote.manifests, current)
    return pull_checkpoint(remote, output_dir)


def _download_checkpoint(client, remote: RemoteCheckpoint, destination: Path) -> int:
    """Fetch the files ``destination`` lacks or has damaged, trainer_state.json and manifests last; returns how
    many came down."""
    sums: dict[str, str] = {}
    for manifest in remote.manifests:
        sums.update(dict(manifest.get("checksums", {}) or {}))
    fetched = 0
    for rest in sorted(remote.files, key=state_last):
        obj = remote.files[rest]
        local_path = destination / safe_relative(rest, remote.uri)
        if not marks_whole(rest) and local_path.is_file() and local_path.stat().st_size == obj.size and (
                rest not in sums or checksum(local_path, obj.size) == sums[rest]):
            continue  # finished by an earlier, interrupted pull (files are renamed only when whole)
        # trainer_state.json and the manifests (small) always come down: a local copy of the same size may be
        # another save's, and it is what the pulled files are verified against.
        if rest == TRAINER_STATE:
            _write_whole(local_path, remote.state_body)
        else:
            s3.download_object(client, remote.bucket, obj.key, local_path)
        # S3's time: the mirror then sees the file as sent, not as a newer file to upload again.
        os.utime(local_path, (obj.last_modified, obj.last_modified))
        fetched += 1
    return fetched


def _write_whole(path: Path, body: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    partial.write_bytes(body)
    os.replace(partial, path)


# ---- the run's history -------------------------------------------------------------------------------


def restore_history(checkpoint: str | os.PathLike, output_dir: str | os.PathLike, s3_save_path: str | None = None) -> None:
    """Make OUTPUT_DIR/metrics.jsonl end at the checkpoint's step before training appends to it.

    On a fresh machine (the checkpoint was pulled from ``s3_save_path``) the file is fetched from S3
    first; otherwise the final mirror would replace the remote history with only the resumed steps.
    Failures are logged: the history is a convenience, the checkpoint is what matters.
    """
    metrics = Path(output_dir) / HISTORY_FILE
    dropped_remote = 0
    try:
        last_step = int(json.loads((Path(checkpoint) / TRAINER_STATE).read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("cannot read the step of %s (%s); %s left as it is", checkpoint, exc, HISTORY_FILE)
        return
    if not metrics.exists() and s3_save_path:
        # fetched beside it and trimmed before it takes the file's name: the file never shows the records of the
        # steps about to be trained again (a watcher of metrics.jsonl, or a test waiting for a step, would read them)
        pulled = metrics.with_name(metrics.name + ".pulled")
        _fetch_history(s3_save_path, pulled)
        if pulled.is_file():
            dropped_remote = trim_history(pulled, last_step)[1]
            os.replace(pulled, metrics)
    kept, dropped = trim_history(metrics, last_step)
    dropped += dropped_remote
    if dropped:
        logger.info("%s: dropped %d records after step %d (trained again now), kept %d",
                    HISTORY_FILE, dropped, last_step, kept)


def _fetch_history(s3_save_path: str, destination: Path) -> None:
    """Download the run's history beside the checkpoints on S3; a failure is a warning (the run goes on)."""
    bucket, prefix = parse_s3_uri(s3_save_path)
    key = folder_prefix(prefix) + HISTORY_FILE  # where S3SyncCallback's mirror put it
    try:
        s3.download_object(s3.make_s3_client(), bucket, key, destination)
    except storage_errors() as exc:  # a missing object, a dead server: the run goes on with a shorter history
        logger.warning("could not restore the run history from s3://%s/%s (%s: %s); %s starts at the resumed "
                       "step", bucket, key, type(exc).__name__, exc, HISTORY_FILE)
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
