"""The model cache: ``download_s3_prefix("s3://bucket/models/qwen")`` -> a local folder, reused once complete.

Used for ``--model_name s3://...``. A marker file in the folder records each whole file's key, ETag and size
and says "complete" only after every file arrived; a lock file serialises the processes of one machine
(e.g. 8 ranks loading one model) around a download.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from olmocr_rl.storage import s3
from olmocr_rl.storage.files import folder_lock, write_json_atomic
from olmocr_rl.storage.s3 import (
    StorageError,
    endpoint_of,
    explain,
    folder_prefix,
    human_bytes,
    list_objects,
    parse_s3_uri,
    safe_relative,
    storage_errors,
)

logger = logging.getLogger(__name__)

CACHE_MARKER = ".olmocr_rl_s3_complete.json"


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
    write_json_atomic(marker, {"uri": uri, "complete": complete, "objects": objects}, indent=1)


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
    folder = folder_prefix(prefix)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    destination = root / bucket / folder.strip("/") if folder else root / bucket
    marker = destination / CACHE_MARKER
    canonical = f"s3://{bucket}/{folder}"  # ".../tiny" and ".../tiny/" share one cache

    client = None
    try:
        client = s3.make_s3_client()
        remote = list_objects(client, bucket, folder)
    except storage_errors() as exc:
        error = explain(exc, "listing", uri, client)
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
            f"nothing to download under {uri} (endpoint {endpoint_of(client)}): check the bucket and prefix "
            "(a model folder holds config.json and weights), and AWS_ENDPOINT_URL for non-AWS servers"
        )
    wanted = {rel: {"etag": obj.etag, "size": obj.size} for rel, obj in sorted(remote.items())}
    for rel in wanted:
        safe_relative(rel, canonical)

    with folder_lock(destination.parent / f".{destination.name}.lock"):
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
                s3.download_object(client, bucket, remote[rel].key, destination / rel)
                whole[rel] = meta
                _write_marker(marker, canonical, whole, complete=False)
                fetched, fetched_bytes = fetched + 1, fetched_bytes + meta["size"]
        except storage_errors() as exc:
            raise explain(exc, "downloading", uri, client) from exc
        _remove_stale_files(destination, set(wanted))
        _write_marker(marker, canonical, wanted, complete=True)
    logger.info(
        "downloaded %d of %d files (%s) from %s to %s in %.1f s",
        fetched, len(wanted), human_bytes(fetched_bytes), uri, destination, time.monotonic() - started,
    )
    return destination


def _remove_stale_files(folder: Path, keep: set[str]) -> None:
    """Delete files under ``folder`` that the listing no longer has (the marker is rewritten after)."""
    for path in folder.rglob("*"):
        if path.is_file() and path.name != CACHE_MARKER and path.relative_to(folder).as_posix() not in keep:
            path.unlink()