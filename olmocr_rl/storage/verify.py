"""Verified checkpoints: the node manifest written last, and the checks a checkpoint on disk must pass.

A checkpoint's manifest (``checkpoint-N/olmocr_rl_manifest/node-R.json``, one per machine) is written by
that machine's main process once every file of the save is on its disk (trainer.checkpoint_save, after a
barrier of all ranks): each file's size and a cheap checksum, plus the run's layout. It goes up to S3 last
and is deleted there first (storage.mirror), so on S3 as on disk a checkpoint whose manifest is there and
agrees with the files is whole.

:func:`files_problem` checks files against the manifests; :func:`format_problem` checks what a file's
own format says about it (a JSON file parses, a safetensors file is as long as its header says, a torch
zip archive has its central directory), so a checkpoint without a manifest (saved before manifests, or
cut off before it) is still never taken when its trainer_state.json or weights are cut short.

Checksums are CRC-32: of the whole file up to :data:`FULL_CHECKSUM_BYTES`; of the first and last
:data:`EDGE_BYTES` beyond that (the weights and optimizer state of a 7B model are tens of GB: a full pass
would add a minute to every save, while a file cut short or padded is caught by its size and its ends).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from olmocr_rl.storage.files import write_json_atomic
from olmocr_rl.storage.s3 import PARTIAL_SUFFIX

TRAINER_STATE = "trainer_state.json"
MANIFEST_DIR = "olmocr_rl_manifest"
MANIFEST_VERSION = 2
FULL_CHECKSUM_BYTES = 16 * 1024 * 1024
EDGE_BYTES = 1024 * 1024
_ZIP_MAGIC = b"PK\x03\x04"

__all__ = ["MANIFEST_DIR", "TRAINER_STATE", "checksum", "files_problem", "format_problem", "local_files",
           "manifest_name", "read_manifests", "verify_folder", "write_manifest"]


def manifest_name(node_rank: int) -> str:
    """A node's manifest, relative to its checkpoint folder."""
    return f"{MANIFEST_DIR}/node-{node_rank}.json"


def is_manifest(rel: str) -> bool:
    return MANIFEST_DIR in PurePosixPath(rel).parts


def local_files(folder: Path) -> dict[str, int]:
    """Every whole file under ``folder`` (in-flight ``PARTIAL_SUFFIX`` names skipped) and its size."""
    files = {}
    for path in folder.rglob("*"):
        if path.name.endswith(PARTIAL_SUFFIX):
            continue
        try:
            if path.is_file():
                files[path.relative_to(folder).as_posix()] = path.stat().st_size
        except FileNotFoundError:  # pruned while listed
            continue
    return files


def checksum(path: Path, size: int | None = None) -> str:
    """``crc32:<hex>`` of the whole file, or ``crc32-ends:<hex>`` of its first and last EDGE_BYTES when larger
    than FULL_CHECKSUM_BYTES."""
    size = path.stat().st_size if size is None else size
    crc = 0
    with path.open("rb") as handle:
        if size <= FULL_CHECKSUM_BYTES:
            while block := handle.read(1 << 20):
                crc = zlib.crc32(block, crc)
            return f"crc32:{crc:08x}"
        crc = zlib.crc32(handle.read(EDGE_BYTES), crc)
        handle.seek(size - EDGE_BYTES)
        crc = zlib.crc32(handle.read(EDGE_BYTES), crc)
    return f"crc32-ends:{crc:08x}"


def write_manifest(folder: Path, topology, exclude: Iterable[str] = ()) -> Path:
    """Write ``folder``'s manifest for this machine (``topology``: node_rank, num_machines, world_size, engine):
    every file on this disk with its size and checksum. Atomic; returns its path."""
    skip = set(exclude)
    files = {rel: size for rel, size in sorted(local_files(folder).items()) if not is_manifest(rel) and rel not in skip}
    record = {
        "version": MANIFEST_VERSION, "checkpoint": folder.name, "node_rank": topology.node_rank,
        "num_machines": topology.num_machines, "world_size": topology.world_size, "engine": topology.engine,
        "files": files, "checksums": {rel: checksum(folder / rel, size) for rel, size in files.items()},
    }
    path = folder / manifest_name(topology.node_rank)
    write_json_atomic(path, record, indent=1, sort_keys=True)
    return path


def read_manifests(folder: Path) -> tuple[list[dict], str | None]:
    """The node manifests on disk, and the problem of the first unreadable one (None when all parse)."""
    manifests, problem = [], None
    for path in sorted((folder / MANIFEST_DIR).glob("node-*.json")):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict) or not isinstance(record.get("files", {}), dict):
                raise ValueError("not a manifest object")
            manifests.append(record)
        except (OSError, ValueError) as exc:
            problem = problem or f"its manifest {MANIFEST_DIR}/{path.name} is unreadable ({exc})"
    return manifests, problem


def files_problem(folder: Path, sizes: dict[str, int], manifests: list[dict]) -> str | None:
    """Why the files on disk disagree with the manifests (missing, another size, another checksum); None if not."""
    for manifest in manifests:
        sums = manifest.get("checksums", {}) or {}
        for rel, size in sorted(dict(manifest.get("files", {})).items()):
            if rel not in sizes:
                return f"{rel} is missing (its manifest lists it)"
            if sizes[rel] != int(size):
                return f"{rel} has {sizes[rel]} bytes, its manifest says {size}"
            if rel in sums and checksum(folder / rel, sizes[rel]) != sums[rel]:
                return f"{rel} does not match its manifest's checksum ({sums[rel]})"
    return None


def format_problem(path: Path, rel: str) -> str | None:
    """What the file's own format says is wrong with it (JSON, safetensors, torch zip archives); None if nothing."""
    name = path.name
    try:
        if name.endswith(".json"):
            json.loads(path.read_text())
        elif name.endswith(".safetensors"):
            return _safetensors_problem(path, rel)
        elif name.endswith((".pt", ".pth", ".bin")):
            return _zip_problem(path, rel)
    except ValueError as exc:
        return f"{rel} is not valid JSON ({exc}): written only in part"
    except OSError as exc:
        return f"{rel} cannot be read ({exc})"
    return None


def _safetensors_problem(path: Path, rel: str) -> str | None:
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"{rel} has {size} bytes, too few for a safetensors header: written only in part"
        length = struct.unpack("<Q", head)[0]
        if length > size - 8:
            return f"{rel} has {size} bytes, its safetensors header alone says {length + 8}: written only in part"
        try:
            header = json.loads(handle.read(length))
        except ValueError:
            return f"{rel}: its safetensors header is not valid JSON: written only in part"
    ends = [entry["data_offsets"][1] for key, entry in header.items()
            if key != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry]
    expected = 8 + length + max(ends, default=0)
    if expected != size:
        return f"{rel} has {size} bytes, its safetensors header says {expected}: written only in part"
    return None


def _zip_problem(path: Path, rel: str) -> str | None:
    """torch.save's archives are zip files: a cut one has no end-of-central-directory record (legacy pickles pass)."""
    import zipfile

    with path.open("rb") as handle:
        if handle.read(4) != _ZIP_MAGIC:
            return None
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, EOFError) as exc:
        return f"{rel} is not a whole torch archive ({exc}): written only in part"
    return None


def verify_folder(folder: Path) -> str | None:
    """Why ``folder``'s files cannot be trusted: an unreadable manifest, a file that disagrees with one, or a
    file its own format says was written only in part (of the files the manifests list, when there are any).
    None when nothing is wrong."""
    sizes = local_files(folder)
    manifests, problem = read_manifests(folder)
    if problem:
        return problem
    problem = files_problem(folder, sizes, manifests)
    if problem:
        return problem
    # With manifests only the files they list count (a stray file dropped in later says nothing about the
    # checkpoint); without, every file is format-checked.
    listed = {rel for manifest in manifests for rel in dict(manifest.get("files", {}))} | {TRAINER_STATE}
    checked = [rel for rel in sizes if rel in listed] if manifests else list(sizes)
    for rel in sorted(checked, key=lambda r: (r != TRAINER_STATE, r)):  # the state first: the commonest damage
        if problem := format_problem(folder / rel, rel):
            return problem
    return None
