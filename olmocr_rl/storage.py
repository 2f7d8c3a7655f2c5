"""S3 storage for training runs: ``s3://`` model download, checkpoint mirroring, resume.

Four jobs, all through boto3 (no ``s5cmd`` binary; docs/design.md, "Where olmocr_rl differs", items 6-7):

* ``download_s3_prefix("s3://bucket/models/qwen")`` -> a local folder, cached and reused once complete
  (used for ``--model_name s3://...``);
* ``sync_dir_to_s3(local_dir, "s3://bucket/run/")`` / ``S3Mirror`` -> mirror a folder like
  ``s5cmd sync --delete``;
* ``S3SyncCallback(s3_save_path, output_dir)`` -> a ``TrainerCallback`` that mirrors ``output_dir`` after
  each checkpoint and at the end, on the global main process only, and never stops training;
* ``resolve_resume_checkpoint(output_dir, s3_save_path)`` -> the newest complete local checkpoint, else
  the newest complete one on S3 pulled into ``output_dir``, else None.

Credentials and endpoint come from boto3's usual sources: ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (or ``AWS_PROFILE``, instance roles ...) and ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_S3``) for an S3-compatible server; ``AWS_MAX_ATTEMPTS`` bounds botocore's own
per-request retries. boto3 is imported only inside functions, so a machine without it trains fine as
long as nothing asks for S3. See docs/storage.md for the user-facing description.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

# The excludes of olmOCR's s5cmd sync, plus our own in-flight download names.
DEFAULT_EXCLUDE: tuple[str, ...] = ("*.lock", ".git/*")
PARTIAL_SUFFIX = ".olmocr_rl-part"
CACHE_MARKER = ".olmocr_rl_s3_complete.json"
TRAINER_STATE = "trainer_state.json"
# Per-node manifests of a checkpoint (``checkpoint-N/olmocr_rl_manifest/node-R.json``): written and
# uploaded by node R's local main process after every file of its ranks reached S3. A checkpoint that
# has manifests counts as complete on S3 only when all of its nodes' manifests are there and every file
# they list is there with its size.
MANIFEST_DIR = "olmocr_rl_manifest"

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,254}$", re.IGNORECASE)
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_SINGLE_WEIGHTS = frozenset(
    {"model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin"}
)
_SHARD_RE = re.compile(r"^(model|pytorch_model)-(\d+)-of-(\d+)\.(safetensors|bin)$")
# Error codes that retrying cannot fix: fail at once with the explanation instead of backing off.
_CREDENTIAL_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "403"}
)
_MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})


class StorageError(RuntimeError):
    """An S3 operation failed; the message names the URI and what to fix."""


# ---- URIs ------------------------------------------------------------------------------------------


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/some/prefix`` into ``("bucket", "some/prefix")``.

    The prefix is returned verbatim (it may be empty or end with ``/``). Raises ValueError naming the
    URI and the expected form for anything else (missing scheme, empty or invalid bucket, whitespace).
    """
    if not isinstance(uri, str):
        raise ValueError(f"S3 URI must be a string like s3://BUCKET/PREFIX, got {type(uri).__name__}: {uri!r}")
    if uri != uri.strip() or any(ch.isspace() for ch in uri):
        raise ValueError(f"S3 URI {uri!r} contains whitespace; write it as s3://BUCKET/PREFIX with no spaces")
    if not uri.startswith("s3://"):
        hint = " (a single slash? write s3://)" if uri.lower().startswith(("s3:/", "s3:")) else ""
        raise ValueError(f"not an S3 URI: {uri!r}{hint}; expected s3://BUCKET/PREFIX")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"S3 URI {uri!r} has no bucket; expected s3://BUCKET/PREFIX")
    if not _BUCKET_RE.match(bucket):
        raise ValueError(
            f"S3 URI {uri!r}: {bucket!r} is not a valid bucket name "
            "(3-255 letters, digits, '.', '-' or '_'); expected s3://BUCKET/PREFIX"
        )
    return bucket, prefix


def _folder_prefix(prefix: str) -> str:
    """``"a/b"`` -> ``"a/b/"`` so ``s3://x/a/b`` never matches ``a/bc/...``; ``""`` stays ``""``."""
    return prefix if prefix == "" or prefix.endswith("/") else prefix + "/"


def _safe_relative(rel: str, uri: str) -> PurePosixPath:
    """A remote key's path below the prefix, refusing keys that would escape the local folder."""
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise StorageError(f"refusing to download {uri}{rel}: the key escapes the destination folder")
    return path


# ---- clients and errors ----------------------------------------------------------------------------


_CLIENTS: dict[tuple, object] = {}
_CLIENTS_LOCK = threading.Lock()
_LOADER: list = []  # botocore's JSON model loader, shared: it is most of a client's creation cost


def make_s3_client():
    """A boto3 S3 client, created on first use and shared (clients are thread-safe; creating one costs ~0.5 s).

    Endpoint, credentials and botocore's retry count follow boto3's environment (AWS_ENDPOINT_URL,
    AWS_ACCESS_KEY_ID, AWS_MAX_ATTEMPTS ...); ``OLMOCR_RL_S3_CONNECT_TIMEOUT`` /
    ``OLMOCR_RL_S3_READ_TIMEOUT`` (seconds, default 10 / 60) bound a hung server. A change to any of
    those variables, or a fork, gets a fresh client.
    """
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith(("AWS_", "OLMOCR_RL_S3_")))
    key = (os.getpid(), tuple(settings))
    with _CLIENTS_LOCK:
        if key in _CLIENTS:
            return _CLIENTS[key]
        try:
            import boto3
            import botocore.session
            from botocore.config import Config
        except ImportError as exc:  # the GPU image may lack boto3; only S3 features need it
            raise StorageError("S3 support needs boto3, which is not installed: pip install boto3") from exc
        config = Config(
            retries={"mode": "standard"},
            connect_timeout=float(os.environ.get("OLMOCR_RL_S3_CONNECT_TIMEOUT", "10")),
            read_timeout=float(os.environ.get("OLMOCR_RL_S3_READ_TIMEOUT", "60")),
        )
        # Its own session (boto3's default one is not thread-safe, and caches credentials), but one loader.
        core = botocore.session.get_session()
        if _LOADER:
            core.register_component("data_loader", _LOADER[0])
        else:
            _LOADER.append(core.get_component("data_loader"))
        client = boto3.session.Session(botocore_session=core).client("s3", config=config)
        if len(_CLIENTS) >= 8:  # only tests change the environment this often
            _CLIENTS.clear()
        _CLIENTS[key] = client
        return client


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code of a ClientError, or of one wrapped by s3transfer (S3UploadFailedError)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or None
    match = re.search(r"An error occurred \((\w+)\)", str(exc))
    return match.group(1) if match else None


def _is_permanent(exc: BaseException) -> bool:
    """True for failures a retry cannot fix (missing or refused credentials, missing bucket)."""
    name = type(exc).__name__
    if name in {"NoCredentialsError", "PartialCredentialsError", "StorageError"}:
        return True
    return _error_code(exc) in (_CREDENTIAL_CODES | _MISSING_BUCKET_CODES)


def _endpoint(client) -> str:
    return getattr(getattr(client, "meta", None), "endpoint_url", None) or "AWS's default endpoint"


def _explain(exc: BaseException, action: str, uri: str, client=None) -> StorageError:
    """Turn a boto/OS error into a StorageError that names the URI and the likely fix."""
    if isinstance(exc, StorageError):
        return exc
    endpoint = _endpoint(client)
    name, code = type(exc).__name__, _error_code(exc)
    if name in {"NoCredentialsError", "PartialCredentialsError"}:
        hint = "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
    elif name in {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"}:
        hint = (
            f"cannot reach the S3 endpoint {endpoint}: check the network, and AWS_ENDPOINT_URL "
            "when the bucket lives on an S3-compatible server"
        )
    elif name == "ReadTimeoutError":
        hint = f"the S3 endpoint {endpoint} stopped answering (raise OLMOCR_RL_S3_READ_TIMEOUT if it is just slow)"
    elif code in _CREDENTIAL_CODES:
        hint = (
            f"the credentials were refused ({code}) by {endpoint}: check AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (or AWS_PROFILE) and that they may use this bucket"
        )
    elif code in _MISSING_BUCKET_CODES:
        hint = f"the bucket does not exist at {endpoint}: check the URI, and AWS_ENDPOINT_URL for non-AWS servers"
    else:
        hint = f"{name}: {exc}"
        return StorageError(f"{action} {uri} failed: {hint}")
    return StorageError(f"{action} {uri} failed: {hint} ({name}: {exc})")


# ---- listings --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteObject:
    """One object under a prefix: its full key, size in bytes, ETag and LastModified (epoch seconds)."""

    key: str
    size: int
    etag: str
    last_modified: float


def _list_objects(client, bucket: str, folder: str) -> dict[str, RemoteObject]:
    """Every object under ``folder`` keyed by its path relative to it (folder-marker keys skipped)."""
    objects: dict[str, RemoteObject] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
        for item in page.get("Contents", []):
            rel = item["Key"][len(folder) :]
            if not rel or rel.endswith("/"):
                continue
            objects[rel] = RemoteObject(
                key=item["Key"],
                size=int(item["Size"]),
                etag=str(item.get("ETag", "")).strip('"'),
                last_modified=item["LastModified"].timestamp(),
            )
    return objects


def check_s3_access(s3_uri: str) -> None:
    """List one key under ``s3_uri`` to prove endpoint, credentials and bucket work; StorageError if not.

    Meant as a pre-flight before a long run, so a typo in ``--s3_save_path`` shows up in the first
    minute instead of as logged sync failures hours later.
    """
    bucket, prefix = parse_s3_uri(s3_uri)
    client = None
    try:
        client = make_s3_client()
        client.list_objects_v2(Bucket=bucket, Prefix=_folder_prefix(prefix), MaxKeys=1)
    except Exception as exc:
        raise _explain(exc, "listing", s3_uri, client) from exc


# ---- downloads -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _folder_lock(lock_path: Path) -> Iterator[None]:
    """Serialise processes on one machine (e.g. 8 ranks loading one model) around a download."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # non-POSIX: no cross-process lock, temp names still keep files whole
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download_object(client, bucket: str, key: str, destination: Path) -> None:
    """Download to a temporary name beside ``destination``, then rename: a killed run leaves no whole-looking file."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f"{destination.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    try:
        client.download_file(bucket, key, str(partial))
        os.replace(partial, destination)
    finally:
        partial.unlink(missing_ok=True)


def default_cache_root() -> Path:
    """``$OLMOCR_RL_CACHE/s3`` when set, else ``~/.cache/olmocr_rl/s3``."""
    base = os.environ.get("OLMOCR_RL_CACHE")
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "olmocr_rl") / "s3"


def _read_marker(marker: Path) -> dict | None:
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def _write_marker(marker: Path, uri: str, objects: dict[str, dict], complete: bool) -> None:
    """Atomically record which listed files are whole locally, and whether that is all of them."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    partial = marker.with_name(marker.name + PARTIAL_SUFFIX)
    partial.write_text(json.dumps({"uri": uri, "complete": complete, "objects": objects}, indent=1))
    os.replace(partial, marker)


def _cache_is_whole(folder: Path, objects: dict[str, dict]) -> bool:
    return all(
        (folder / rel).is_file() and (folder / rel).stat().st_size == meta["size"] for rel, meta in objects.items()
    )


def download_s3_prefix(uri: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Download every object under ``uri`` (a folder) into a local cache folder and return that folder.

    The folder is ``<cache_dir>/<bucket>/<prefix>``; ``cache_dir`` defaults to ``default_cache_root()``.
    A marker file records each whole file's key, ETag and size and says "complete" only after every file
    arrived; a later call whose listing matches a complete marker downloads nothing, a changed listing
    re-fetches only changed keys and removes local files whose keys are gone, an interrupted download
    resumes with the files it lacks. Files arrive under temporary names and are renamed, so an
    interrupted download never looks complete. When S3 cannot be listed but a complete copy is cached,
    that copy is used with a warning. Raises StorageError (naming the URI and the fix) when nothing is
    under the prefix or S3 cannot be reached and no complete copy exists.
    """
    bucket, prefix = parse_s3_uri(uri)
    folder_prefix = _folder_prefix(prefix)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    destination = root / bucket / folder_prefix.strip("/") if folder_prefix else root / bucket
    marker = destination / CACHE_MARKER
    canonical = f"s3://{bucket}/{folder_prefix}"  # ".../tiny" and ".../tiny/" share one cache

    client = None
    try:
        client = make_s3_client()
        remote = _list_objects(client, bucket, folder_prefix)
    except Exception as exc:
        error = _explain(exc, "listing", uri, client)
        cached = _read_marker(marker)
        if (
            cached and cached.get("uri") == canonical and cached.get("complete")
            and _cache_is_whole(destination, cached.get("objects", {}))
        ):
            logger.warning("%s; using the complete cached copy in %s", error, destination)
            return destination
        raise error from exc
    if not remote:
        raise StorageError(
            f"nothing to download under {uri} (endpoint {_endpoint(client)}): check the bucket and prefix "
            "(a model folder holds config.json and weights), and AWS_ENDPOINT_URL for non-AWS servers"
        )
    wanted = {rel: {"etag": obj.etag, "size": obj.size} for rel, obj in sorted(remote.items())}
    for rel in wanted:
        _safe_relative(rel, canonical)

    with _folder_lock(destination.parent / f".{destination.name}.lock"):
        previous = _read_marker(marker) or {}
        known = previous.get("objects", {}) if previous.get("uri") == canonical else {}
        if previous.get("complete") and known == wanted and _cache_is_whole(destination, wanted):
            logger.info("using cached copy of %s in %s", uri, destination)
            return destination

        # Keep only entries still listed unchanged: after an interrupted or outdated download those files
        # are whole and current, so a rerun resumes instead of starting over.
        whole = {
            rel: meta for rel, meta in known.items()
            if wanted.get(rel) == meta and (destination / rel).is_file()
            and (destination / rel).stat().st_size == meta["size"]
        }
        _write_marker(marker, canonical, whole, complete=False)
        started, fetched, fetched_bytes = time.monotonic(), 0, 0
        try:
            for rel, meta in wanted.items():
                if rel in whole:
                    continue
                _download_object(client, bucket, remote[rel].key, destination / rel)
                whole[rel] = meta
                _write_marker(marker, canonical, whole, complete=False)
                fetched, fetched_bytes = fetched + 1, fetched_bytes + meta["size"]
        except Exception as exc:
            raise _explain(exc, "downloading", uri, client) from exc
        _remove_stale_files(destination, set(wanted))
        _write_marker(marker, canonical, wanted, complete=True)
    logger.info(
        "downloaded %d of %d files (%s) from %s to %s in %.1f s",
        fetched, len(wanted), _human_bytes(fetched_bytes), uri, destination, time.monotonic() - started,
    )
    return destination


def _remove_stale_files(folder: Path, keep: set[str]) -> None:
    """Delete files under ``folder`` that the listing no longer has (the marker is rewritten after)."""
    for path in folder.rglob("*"):
        if path.is_file() and path.name != CACHE_MARKER and path.relative_to(folder).as_posix() not in keep:
            path.unlink()


# ---- mirroring -------------------------------------------------------------------------------------


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
            f"uploaded {len(self.uploaded)} files ({_human_bytes(self.bytes_uploaded)}){tops(self.uploaded)}, "
            f"deleted {len(self.deleted)}{tops(self.deleted)}, unchanged {self.unchanged} in {self.seconds:.1f} s"
            + (f" ({self.attempts} attempts)" if self.attempts > 1 else "")
        )


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


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


def _marks_whole(rel: str) -> bool:
    path = PurePosixPath(rel)
    return path.name == TRAINER_STATE or MANIFEST_DIR in path.parts


def _state_last(rel: str) -> tuple[bool, str]:
    """Upload order: a checkpoint's trainer_state.json (and manifests) last, so a remote checkpoint that has
    them is whole."""
    return (_marks_whole(rel), rel)


class S3Mirror:
    """Mirror ``local_dir`` to ``s3_uri`` (a folder), like ``s5cmd sync --delete``, with retries.

    ``delete``: remove remote objects that no longer exist locally (mirrors ``save_total_limit``
    pruning). ``keep_remote_only``: only delete objects that this mirror has seen locally at some point
    (see ``remember_local``), so a run resumed on a fresh machine, which pulled only the newest
    checkpoint, does not wipe the older checkpoints already on S3. ``retries`` whole passes, waiting
    ``backoff_s * 2**k`` between them; each pass re-lists, so it resumes where the last one stopped.
    Credential and missing-bucket errors are not retried.
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
    ):
        bucket, prefix = parse_s3_uri(s3_uri)
        if retries < 1:
            raise ValueError(f"retries must be at least 1, got {retries}")
        self.local_dir = Path(local_dir)
        self.s3_uri = s3_uri
        self.bucket, self.folder = bucket, _folder_prefix(prefix)
        self.delete, self.keep_remote_only = delete, keep_remote_only
        self.exclude = tuple(exclude)
        self.retries, self.backoff_s = retries, backoff_s
        self._seen: set[str] = set()
        # (size, mtime) of each file as this mirror uploaded it: immune to clock skew against S3.
        self._sent: dict[str, tuple[int, float]] = {}

    def remember_local(self) -> None:
        """Record the files present now as ours to delete remotely once they vanish locally."""
        if self.local_dir.is_dir():
            self._seen |= set(scan_local(self.local_dir, self.exclude))

    def sync(self) -> SyncResult:
        """Run one mirror pass (with retries); returns what it did, raises StorageError on final failure."""
        if not self.local_dir.is_dir():
            raise StorageError(f"cannot mirror {self.local_dir} to {self.s3_uri}: the folder does not exist")
        result, started = SyncResult(), time.monotonic()
        for attempt in range(1, self.retries + 1):
            result.attempts = attempt
            client = None
            try:
                client = make_s3_client()
                self._sync_once(client, result)
                break
            except Exception as exc:
                error = _explain(exc, f"mirroring {self.local_dir} to", self.s3_uri, client)
                if attempt == self.retries or _is_permanent(exc):
                    result.seconds = time.monotonic() - started
                    raise StorageError(f"{error} (gave up after {attempt} attempt(s))") from exc
                wait = self.backoff_s * 2 ** (attempt - 1)
                logger.warning("%s; retrying in %.1f s (attempt %d of %d)", error, wait, attempt, self.retries)
                time.sleep(wait)
        result.seconds = time.monotonic() - started
        return result

    def _sync_once(self, client, result: SyncResult) -> None:
        local = scan_local(self.local_dir, self.exclude)
        self._seen |= set(local)
        remote = {
            rel: obj
            for rel, obj in _list_objects(client, self.bucket, self.folder).items()
            if not is_excluded(rel, self.exclude)
        }
        result.unchanged = 0
        for rel in sorted(local, key=_state_last):
            file, obj = local[rel], remote.get(rel)
            sent_as_is = obj is not None and obj.size == file.size and self._sent.get(rel) == (file.size, file.mtime)
            if sent_as_is or not needs_upload(file, obj):
                result.unchanged += 1
                continue
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
        states = sorted(rel for rel in gone if _marks_whole(rel))
        others = sorted(rel for rel in gone if not _marks_whole(rel))
        for batch_source in (states, others):
            for start in range(0, len(batch_source), 1000):
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


# ---- checkpoints and resume ------------------------------------------------------------------------


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


def _local_checkpoint_files(folder: Path) -> set[str]:
    return {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.endswith(PARTIAL_SUFFIX)
    }


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
        if is_complete_checkpoint(_local_checkpoint_files(path)):
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
    rank = int(env.get("RANK", "0") or 0)
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
    folder = _folder_prefix(prefix)
    client = None
    try:
        client = make_s3_client()
        remote = _list_objects(client, bucket, folder)
        by_checkpoint: dict[str, dict[str, RemoteObject]] = {}
        for rel, obj in remote.items():
            top, _, rest = rel.partition("/")
            if rest and checkpoint_step(top) is not None:
                by_checkpoint.setdefault(top, {})[rest] = obj
        newest, manifests = None, []
        for name in sorted(by_checkpoint, key=checkpoint_step, reverse=True):
            manifests = _remote_manifests(client, bucket, by_checkpoint[name])
            problem = checkpoint_problem({rel: obj.size for rel, obj in by_checkpoint[name].items()}, manifests,
                                         need_manifests=current.num_machines > 1)
            if problem is None:
                newest = name
                break
            logger.warning("skipping incomplete checkpoint %s%s on S3: %s", _folder_prefix(s3_uri), name, problem)
    except Exception as exc:
        raise _explain(exc, "listing checkpoints in", s3_uri, client) from exc
    if newest is None:
        logger.info("no complete checkpoint-<N>/ under %s", s3_uri)
        return None
    check_layout(f"{_folder_prefix(s3_uri)}{newest}/", manifests, current)

    destination = output / newest
    files = by_checkpoint[newest]
    started = time.monotonic()
    fetched = 0
    with _folder_lock(output / ".olmocr_rl-pull.lock"):
        try:
            for rest in sorted(files, key=_state_last):
                local_path = destination / _safe_relative(rest, f"{_folder_prefix(s3_uri)}{newest}/")
                if local_path.is_file() and local_path.stat().st_size == files[rest].size:
                    continue  # finished by an earlier, interrupted pull (files are renamed only when whole)
                _download_object(client, bucket, files[rest].key, local_path)
                # S3's time: the mirror then sees the file as sent, not as a newer file to upload again.
                os.utime(local_path, (files[rest].last_modified, files[rest].last_modified))
                fetched += 1
        except Exception as exc:
            raise _explain(exc, "downloading checkpoint from", f"{_folder_prefix(s3_uri)}{newest}/", client) from exc
    logger.info(
        "pulled %s%s/ (%d files, %s; %d fetched) into %s in %.1f s",
        _folder_prefix(s3_uri), newest, len(files), _human_bytes(sum(o.size for o in files.values())), fetched,
        destination, time.monotonic() - started,
    )
    return destination


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


# ---- the Trainer callback --------------------------------------------------------------------------


class S3SyncCallback(TrainerCallback):
    """Mirror ``output_dir`` to ``s3_save_path`` after every checkpoint save and at the end of training.

    Runs on every machine's local main process (``state.is_local_process_zero``): each mirrors its own
    disk to the same prefix, so the files only another machine holds (its ranks' RNG states, optimizer
    and weight shards of a sharded engine) reach S3 too; no shared file system is needed. At each save
    every rank first waits for the others (a barrier: their files are written), then each node's local
    main notes the checkpoint's files and, once they are on S3, uploads its manifest
    ``checkpoint-N/olmocr_rl_manifest/node-R.json`` (files, sizes, world size, engine) last. The resume
    side (:func:`checkpoint_problem`) takes a checkpoint only when every node's manifest and every listed
    file are there. With one process, or a shared ``output_dir``, it is the same mirror as before (plus
    the manifest). On a machine other than the first, whose disk the Trainer does not prune, the
    checkpoints beyond ``save_total_limit`` are pruned here, and so on S3.

    It never raises: a failed sync (server gone, bad credentials) is logged as an error naming the URI,
    the checkpoints stay on local disk, the next save tries again. With ``background=True`` (the
    default) each sync runs in a worker thread so a node does not stall the other ranks during a
    multi-GB upload (long enough to hit collective timeouts); saves that arrive while a sync runs are
    coalesced into one more pass, and ``on_train_end`` waits for the last pass. Deletions mirror local
    pruning but keep remote objects this node never had locally (see ``S3Mirror.keep_remote_only``).
    ``last_result`` / ``last_error`` hold the outcome of the latest pass. Call ``sync(wait=True)`` after
    a final ``save_model`` that happens after ``train()`` returns.
    """

    def __init__(
        self,
        s3_save_path: str,
        output_dir: str | os.PathLike,
        retries: int = 3,
        *,
        background: bool = True,
        backoff_s: float = 2.0,
        exclude: Iterable[str] = DEFAULT_EXCLUDE,
        topology: Topology | None = None,
    ):
        parse_s3_uri(s3_save_path)  # a malformed URI is a user error: fail at construction, not hours later
        self.s3_save_path = s3_save_path.rstrip("/") + "/"
        self.output_dir = Path(output_dir)
        self.background = background
        self.topology = topology or current_topology()
        self.mirror = S3Mirror(
            self.output_dir, self.s3_save_path, delete=True, keep_remote_only=True,
            exclude=exclude, retries=retries, backoff_s=backoff_s,
        )
        self.last_result: SyncResult | None = None
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._pending = False
        self._worker: threading.Thread | None = None
        self._manifests: dict[str, dict[str, int]] = {}  # checkpoint name -> its files, awaiting upload

    # Trainer events --------------------------------------------------------------------------------
    @staticmethod
    def _local_main(state) -> bool:
        return bool(getattr(state, "is_local_process_zero", state.is_world_process_zero))

    def on_train_begin(self, args, state, control, **kwargs):
        if self._local_main(state):
            self.mirror.remember_local()  # pre-existing local checkpoints are ours to prune remotely

    def on_save(self, args, state, control, **kwargs):
        _barrier()  # every rank's files of this checkpoint are written before any node lists them
        if not self._local_main(state):
            return
        folder = self.output_dir / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            if self.topology.node_rank > 0:
                self._prune(args, folder)
            files = {rel: (folder / rel).stat().st_size for rel in _local_checkpoint_files(folder)
                     if not rel.startswith(MANIFEST_DIR + "/") and not is_excluded(rel, self.mirror.exclude)}
            with self._lock:
                self._manifests[folder.name] = files
        self.sync(wait=not self.background)

    def on_train_end(self, args, state, control, **kwargs):
        if self._local_main(state):
            self.sync(wait=True)

    def _prune(self, args, newest: Path) -> None:
        """Keep this machine's newest ``save_total_limit`` checkpoints (the Trainer prunes the first machine's
        disk only); skipped when the folder is shared (the first machine's trainer_state.json is here)."""
        limit = getattr(args, "save_total_limit", None)
        if not limit or (newest / TRAINER_STATE).exists():
            return
        steps = sorted((step, path) for path in self.output_dir.iterdir()
                       if path.is_dir() and (step := checkpoint_step(path.name)) is not None)
        for _step, path in steps[:-limit]:
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            logger.info("pruned %s (save_total_limit %d)", path, limit)

    # The work ---------------------------------------------------------------------------------------
    def sync(self, wait: bool = True) -> None:
        """Request a mirror pass; with ``wait`` return only after every requested pass finished.

        No rank check here (the Trainer events do that): call it on the global main process only.
        """
        if not self.background:
            self._run_pass()
            return
        with self._lock:
            self._pending = True
            if self._worker is None:
                # Not a daemon: an interpreter exiting after a crash still finishes the upload in flight.
                self._worker = threading.Thread(target=self._drain, name="olmocr_rl-s3-sync", daemon=False)
                self._worker.start()
        if wait:
            self.wait()

    def wait(self) -> None:
        """Block until the background worker has no pass running or pending."""
        while True:
            with self._lock:
                worker = self._worker
            if worker is None:
                return
            worker.join()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._worker = None
                    return
                self._pending = False
            try:
                self._run_pass()
            except BaseException:  # _run_pass catches Exception; this is KeyboardInterrupt and kin
                with self._lock:
                    self._worker = None
                raise

    def _run_pass(self) -> None:
        if not self.output_dir.is_dir():  # training ended before its first save: nothing to mirror
            logger.info("S3 sync skipped: %s does not exist yet", self.output_dir)
            return
        with self._lock:  # only checkpoints noted before this pass listed the folder
            manifests = dict(self._manifests)
        try:
            result = self.mirror.sync()
            for name, files in manifests.items():
                self._upload_manifest(name, files)
                with self._lock:
                    if self._manifests.get(name) is files:
                        del self._manifests[name]
        except Exception as exc:  # never let S3 stop training
            self.last_error = str(exc)
            logger.error("S3 sync of %s to %s failed; training goes on, checkpoints stay on local disk: %s",
                         self.output_dir, self.s3_save_path, exc)
            return
        self.last_result, self.last_error = result, None
        logger.info("S3 sync %s -> %s: %s", self.output_dir, self.s3_save_path, result.summary())

    def _upload_manifest(self, name: str, files: dict[str, int]) -> None:
        """This node's manifest of checkpoint ``name``, once its files are on S3: written locally, uploaded last."""
        folder = self.output_dir / name
        if not all((folder / rel).is_file() and (folder / rel).stat().st_size == size for rel, size in files.items()):
            logger.info("no manifest for %s: pruned or changed since the save", folder)
            return
        topo = self.topology
        record = {"checkpoint": name, "node_rank": topo.node_rank, "num_machines": topo.num_machines,
                  "world_size": topo.world_size, "engine": topo.engine, "files": files}
        rel = manifest_name(topo.node_rank)
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        os.replace(partial, path)
        try:
            make_s3_client().upload_file(str(path), self.mirror.bucket, f"{self.mirror.folder}{name}/{rel}")
        except Exception as exc:
            raise _explain(exc, f"uploading the manifest of {name} to", self.s3_save_path) from exc
        stat = path.stat()
        self.mirror._sent[f"{name}/{rel}"] = (stat.st_size, stat.st_mtime)
        self.mirror._seen.add(f"{name}/{rel}")


def _barrier() -> None:
    """torch.distributed's barrier when several processes train; nothing otherwise."""
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
