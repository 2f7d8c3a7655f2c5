"""Mirroring a folder to S3 like ``s5cmd sync --delete``: ``S3Mirror`` and the one-pass ``sync_dir_to_s3``.

A pass lists the local folder (``scan_local``, excludes applied) and the remote prefix, uploads what is
new or changed (``needs_upload``; each checkpoint's trainer_state.json and node manifests last, so a remote
checkpoint that has them is whole), then deletes what vanished locally. Whole passes are retried with
backoff; credential and missing-bucket errors are not.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from olmocr_rl.storage import s3
from olmocr_rl.storage.checkpoints import marks_whole, state_last
from olmocr_rl.storage.s3 import (
    PARTIAL_SUFFIX,
    RemoteObject,
    StorageError,
    explain,
    folder_prefix,
    human_bytes,
    is_permanent,
    list_objects,
    parse_s3_uri,
    storage_errors,
)

logger = logging.getLogger(__name__)

# The excludes of olmOCR's s5cmd sync; our own in-flight download names are always excluded.
DEFAULT_EXCLUDE: tuple[str, ...] = ("*.lock", ".git/*")


@dataclass(frozen=True)
class LocalFile:
    """A file to mirror: absolute path, size in bytes, mtime (epoch seconds)."""

    path: Path
    size: int
    mtime: float


@dataclass
class SyncResult:
    """What one mirror pass did. ``vanished``: files deleted locally between listing and upload."""

    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    vanished: int = 0
    bytes_uploaded: int = 0
    attempts: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        """One log line: counts, bytes, time, and which top-level entries (checkpoints) were touched."""

        def tops(rels: list[str]) -> str:
            names = sorted({rel.split("/")[0] for rel in rels})
            return f" [{', '.join(names[:6])}{', ...' if len(names) > 6 else ''}]" if names else ""

        return (
            f"uploaded {len(self.uploaded)} files ({human_bytes(self.bytes_uploaded)}){tops(self.uploaded)}, "
            f"deleted {len(self.deleted)}{tops(self.deleted)}, unchanged {self.unchanged} in {self.seconds:.1f} s"
            + (f" ({self.attempts} attempts)" if self.attempts > 1 else "")
        )


def is_excluded(rel: str, exclude: Iterable[str]) -> bool:
    """True when the relative posix path matches an exclude glob (``*`` crosses ``/``, as in s5cmd)."""
    return rel.endswith(PARTIAL_SUFFIX) or any(fnmatch.fnmatchcase(rel, pattern) for pattern in exclude)


def scan_local(local_dir: Path, exclude: Iterable[str] = DEFAULT_EXCLUDE) -> dict[str, LocalFile]:
    """Every regular file under ``local_dir`` by relative posix path, excludes applied."""
    files: dict[str, LocalFile] = {}
    for dirpath, _dirnames, filenames in os.walk(local_dir):
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(local_dir).as_posix()
            if is_excluded(rel, exclude):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:  # deleted while we walked (checkpoint rotation)
                continue
            files[rel] = LocalFile(path=path, size=stat.st_size, mtime=stat.st_mtime)
    return files


def needs_upload(local: LocalFile, remote: RemoteObject | None) -> bool:
    """s5cmd's rule: upload when the object is missing, its size differs, or the file is newer.

    "Newer" compares whole seconds, since S3's LastModified has one-second resolution: a file written in
    the second it was uploaded in is not re-sent forever. Checksums are not compared, because hashing a
    multi-GB checkpoint on every save costs minutes and multipart ETags are not MD5s anyway. (S3Mirror
    also remembers what it sent, so a local clock running ahead of S3's does not cause re-uploads.)
    """
    return remote is None or remote.size != local.size or int(local.mtime) > remote.last_modified


class HaltedError(StorageError):
    """A mirror pass stopped before its next write: ``halted`` gave a reason (the run lost its S3 lease)."""


class S3Mirror:
    """Mirror ``local_dir`` to ``s3_uri`` (a folder), like ``s5cmd sync --delete``, with retries.

    ``delete``: remove remote objects that no longer exist locally (mirrors ``save_total_limit``
    pruning). ``keep_remote_only``: only delete objects that this mirror has seen locally at some point
    (see ``remember_local``), so a run resumed on a fresh machine, which pulled only the newest
    checkpoint, does not wipe the older checkpoints already on S3. ``retries`` whole passes, waiting
    ``backoff_s * 2**k`` between them; each pass re-lists, so it resumes where the last one stopped.
    Credential and missing-bucket errors are not retried. ``halted``, asked before each upload and delete,
    stops the pass when it gives a reason (:class:`HaltedError`, not retried): the run lost its S3 lease.
    """

    def __init__(
        self,
        local_dir: str | os.PathLike,
        s3_uri: str,
        *,
        delete: bool = True,
        keep_remote_only: bool = False,
        exclude: Iterable[str] = DEFAULT_EXCLUDE,
        retries: int = 3,
        backoff_s: float = 2.0,
        halted: Callable[[], str | None] | None = None,
    ):
        bucket, prefix = parse_s3_uri(s3_uri)
        if retries < 1:
            raise ValueError(f"retries must be at least 1, got {retries}")
        self.local_dir = Path(local_dir)
        self.s3_uri = s3_uri
        self.bucket, self.folder = bucket, folder_prefix(prefix)
        self.delete, self.keep_remote_only = delete, keep_remote_only
        self.exclude = tuple(exclude)
        self.retries, self.backoff_s = retries, backoff_s
        self.halted = halted  # asked before each upload and delete: a reason (nothing more may be written) or None
        self._seen: set[str] = set()
        # (size, mtime) of each file as this mirror uploaded it: immune to clock skew against S3.
        self._sent: dict[str, tuple[int, float]] = {}

    def remember_local(self) -> None:
        """Record the files present now as ours to delete remotely once they vanish locally."""
        if self.local_dir.is_dir():
            self._seen |= set(scan_local(self.local_dir, self.exclude))

    def note_uploaded(self, rel: str, local: Path) -> None:
        """Record that ``local`` (``rel`` under the folder) was uploaded outside a pass, as it is now: the next
        pass neither sends it again nor keeps it remotely once it vanishes locally."""
        stat = local.stat()
        self._sent[rel] = (stat.st_size, stat.st_mtime)
        self._seen.add(rel)

    def unsent(self) -> list[str]:
        """Local files (excludes applied) not known to be on S3 as they are now: neither uploaded nor found there
        unchanged by a pass of this mirror, or changed since."""
        if not self.local_dir.is_dir():
            return []
        return sorted(rel for rel, file in scan_local(self.local_dir, self.exclude).items()
                      if self._sent.get(rel) != (file.size, file.mtime))

    def sync(self) -> SyncResult:
        """Run one mirror pass (with retries); returns what it did, raises StorageError on final failure."""
        if not self.local_dir.is_dir():
            raise StorageError(f"cannot mirror {self.local_dir} to {self.s3_uri}: the folder does not exist")
        result, started = SyncResult(), time.monotonic()
        for attempt in range(1, self.retries + 1):
            result.attempts = attempt
            client = None
            try:
                client = s3.make_s3_client()
                self._sync_once(client, result)
                break
            except HaltedError:
                raise
            except storage_errors() as exc:  # anything else is a bug: raised at once, not retried
                error = explain(exc, f"mirroring {self.local_dir} to", self.s3_uri, client)
                if attempt == self.retries or is_permanent(exc):
                    result.seconds = time.monotonic() - started
                    raise StorageError(f"{error} (gave up after {attempt} attempt(s))") from exc
                wait = self.backoff_s * 2 ** (attempt - 1)
                logger.warning("%s; retrying in %.1f s (attempt %d of %d)", error, wait, attempt, self.retries)
                time.sleep(wait)
        result.seconds = time.monotonic() - started
        return result

    def _check_halted(self) -> None:
        reason = self.halted() if self.halted is not None else None
        if reason:
            raise HaltedError(f"nothing more is written to {self.s3_uri}: {reason}")

    def _sync_once(self, client, result: SyncResult) -> None:
        local = scan_local(self.local_dir, self.exclude)
        self._seen |= set(local)
        remote = {
            rel: obj
            for rel, obj in list_objects(client, self.bucket, self.folder).items()
            if not is_excluded(rel, self.exclude)
        }
        result.unchanged = 0
        for rel in sorted(local, key=state_last):
            file, obj = local[rel], remote.get(rel)
            sent_as_is = obj is not None and obj.size == file.size and self._sent.get(rel) == (file.size, file.mtime)
            if sent_as_is or not needs_upload(file, obj):
                result.unchanged += 1
                self._sent[rel] = (file.size, file.mtime)  # on S3 as it is here
                continue
            self._check_halted()
            try:
                client.upload_file(str(file.path), self.bucket, self.folder + rel)
            except (FileNotFoundError, OSError) as exc:
                if file.path.exists():
                    raise
                logger.debug("skipped %s: deleted locally during upload (%s)", rel, exc)
                result.vanished += 1
                continue
            self._sent[rel] = (file.size, file.mtime)
            result.uploaded.append(rel)
            result.bytes_uploaded += file.size
        if not self.delete:
            return
        gone = [
            rel for rel in remote if rel not in local and (not self.keep_remote_only or rel in self._seen)
        ]
        # Delete trainer_state.json and the node manifests first: a half-deleted remote checkpoint then no
        # longer counts as whole.
        states = sorted(rel for rel in gone if marks_whole(rel))
        others = sorted(rel for rel in gone if not marks_whole(rel))
        for batch_source in (states, others):
            for start in range(0, len(batch_source), 1000):
                self._check_halted()
                batch = batch_source[start : start + 1000]
                response = client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self.folder + rel} for rel in batch], "Quiet": True},
                )
                if response.get("Errors"):
                    first = response["Errors"][0]
                    raise StorageError(
                        f"deleting {len(response['Errors'])} objects under {self.s3_uri} failed, first "
                        f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                    )
                result.deleted.extend(batch)


def sync_dir_to_s3(
    local_dir: str | os.PathLike,
    s3_uri: str,
    *,
    delete: bool = True,
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
    retries: int = 3,
    backoff_s: float = 2.0,
) -> SyncResult:
    """One exact mirror pass of ``local_dir`` to ``s3_uri`` (``s5cmd sync --delete`` semantics).

    With ``delete`` every remote object under the prefix that is not a local file is removed (excluded
    patterns are left alone on both sides). Raises StorageError after ``retries`` failed passes.
    """
    mirror = S3Mirror(local_dir, s3_uri, delete=delete, exclude=exclude, retries=retries, backoff_s=backoff_s)
    return mirror.sync()

