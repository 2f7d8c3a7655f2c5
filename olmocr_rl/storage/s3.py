"""The S3 client and its errors: URIs, one shared boto3 client, explained failures, listings, downloads.

The other storage modules reach S3 only through this one (``make_s3_client``, ``list_objects``,
``download_object``), so a test that counts or breaks S3 calls patches one place. Credentials and endpoint
come from boto3's usual sources: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (or ``AWS_PROFILE``,
instance roles ...) and ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) for an S3-compatible server;
``AWS_MAX_ATTEMPTS`` bounds botocore's own per-request retries. boto3 is imported only inside functions,
so a machine without it trains fine as long as nothing asks for S3.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# In-flight downloads (and marker files) are written under this suffix, then renamed.
PARTIAL_SUFFIX = ".olmocr_rl-part"

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,254}$", re.IGNORECASE)
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


def folder_prefix(prefix: str) -> str:
    """``"a/b"``, ``"a/b/"`` and ``"a/b//"`` -> ``"a/b/"`` (so ``s3://x/a/b`` never matches ``a/bc/...``, and
    every client reads the folder the mirror writes); ``""`` stays ``""``."""
    folder = prefix.rstrip("/")
    return folder + "/" if folder else ""


def safe_relative(rel: str, uri: str) -> PurePosixPath:
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


def is_permanent(exc: BaseException) -> bool:
    """True for failures a retry cannot fix (missing or refused credentials, missing bucket)."""
    if isinstance(exc, StorageError):
        return True
    if type(exc).__name__ in {"NoCredentialsError", "PartialCredentialsError"}:  # botocore's: not imported here
        return True
    return _error_code(exc) in (_CREDENTIAL_CODES | _MISSING_BUCKET_CODES)


def endpoint_of(client) -> str:
    """The endpoint a client talks to, for error messages."""
    return getattr(getattr(client, "meta", None), "endpoint_url", None) or "AWS's default endpoint"


def storage_errors() -> tuple[type[BaseException], ...]:
    """The exception families an S3 or file operation raises for reasons outside the program, the only ones the
    storage modules catch (``except storage_errors():``): OSError (files, sockets), StorageError, botocore's
    (``BotoCoreError``: credentials, endpoints, timeouts; ``ClientError``: S3's answers), boto3's and
    s3transfer's transfer failures. Anything else (a KeyError, a TypeError: a bug) keeps its traceback."""
    families: list[type[BaseException]] = [OSError, StorageError]
    try:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError
        from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError, S3UploadFailedError
    except ImportError:  # no boto3: only OSError and our own can occur
        return tuple(families)
    return (*families, BotoCoreError, ClientError, Boto3Error, RetriesExceededError, S3UploadFailedError,
            S3DownloadFailedError)


def explain(exc: BaseException, action: str, uri: str, client=None) -> StorageError:
    """Turn one of :func:`storage_errors` into a StorageError that names the URI and the likely fix."""
    if isinstance(exc, StorageError):
        return exc
    endpoint = endpoint_of(client)
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


def list_objects(client, bucket: str, folder: str) -> dict[str, RemoteObject]:
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
        client.list_objects_v2(Bucket=bucket, Prefix=folder_prefix(prefix), MaxKeys=1)
    except storage_errors() as exc:
        raise explain(exc, "listing", s3_uri, client) from exc


# ---- downloads -------------------------------------------------------------------------------------


def download_object(client, bucket: str, key: str, destination: Path) -> None:
    """Download to a temporary name beside ``destination``, then rename: a killed run leaves no whole-looking file."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f"{destination.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    try:
        client.download_file(bucket, key, str(partial))
        os.replace(partial, destination)
    finally:
        partial.unlink(missing_ok=True)


# ---- formatting ------------------------------------------------------------------------------------


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KB"``: sizes in log lines."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
