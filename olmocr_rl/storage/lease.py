"""One run at a time on an ``--s3_save_path`` prefix: its lease object, ``<prefix>/.olmocr_rl-lease.json``.

The local lock (``files.hold_run_lock``) cannot see another machine; two jobs resuming into one prefix would mix
their checkpoints there. So the run's global main process claims the prefix with a conditional put (S3's
``If-None-Match: *``: only one writer creates the object), renews it with ``If-Match`` on the ETag it holds (at
each save and every third of :func:`lease_seconds` from a background thread), and deletes it when it ends.

A lease found there belongs to another run unless it names this process. It is stale, and taken over with one
warning, when it names this job (``SLURM_JOB_ID``, ``BEAKER_TASK_ID`` or ``OLMOCR_RL_JOB_ID``: a requeued
job's earlier start, killed before it could release it), when its holder is a process on this machine that is
no longer running, or when it was not renewed
for :func:`lease_seconds` (``OLMOCR_RL_S3_LEASE_SECONDS``, default 900), measured on the S3 server's clock
(its ``Date`` header against the object's ``LastModified``), so no two machines' clocks are compared. A live
one stops the start in one line naming its holder (:class:`LeaseHeldError`).

A server that does not implement conditional writes (``NotImplemented``) gets a best-effort claim instead: the
lease is read, written plainly, then read back after a second; a second writer in that window wins silently.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

from olmocr_rl.storage import s3
from olmocr_rl.storage.s3 import StorageError, explain, folder_prefix, parse_s3_uri, storage_errors

logger = logging.getLogger(__name__)

LEASE_NAME = ".olmocr_rl-lease.json"
_PRECONDITION = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


class LeaseHeldError(StorageError):
    """Another live run holds the prefix's lease; the message names it."""


def lease_seconds() -> float:
    """How long a lease lives without renewal before another run may take it over."""
    return float(os.environ.get("OLMOCR_RL_S3_LEASE_SECONDS", "900"))


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) or str(response.get("ResponseMetadata", {})
                                                                   .get("HTTPStatusCode", ""))


def _alive_here(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (a zombie is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def describe(holder: dict) -> str:
    return (f"run {holder.get('run', '?')}: pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}: {holder.get('command', '?')}")


@dataclass
class Lease:
    """The lease this process holds on ``uri``: ``renew()`` it, ``release()`` it."""

    uri: str
    bucket: str
    key: str
    body: dict
    etag: str
    lost: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # one renewal at a time (the ETag chain)

    def renew(self) -> bool:
        """Write the lease again if it is still this run's; False (logged) when it could not be, or was taken."""
        with self._lock:
            return self._renew()

    def _renew(self) -> bool:
        if self.lost:
            return False
        self.body["renewed"] = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            try:
                self.etag = _put(s3.make_s3_client(), self, IfMatch=self.etag)
            except storage_errors() as exc:
                if _code(exc) != "NotImplemented":
                    raise
                self.etag = _put(s3.make_s3_client(), self)  # a server without conditional writes: best effort
            return True
        except storage_errors() as exc:
            if _code(exc) in _PRECONDITION or _code(exc) in {"NoSuchKey", "404"}:
                self.lost = True
                logger.error("the S3 lease on %s is no longer this run's (taken over as stale by another run, or "
                             "deleted): another run may now write checkpoints there", self.uri)
            else:
                logger.warning("renewing the S3 lease on %s failed (tried again later): %s", self.uri, exc)
            return False

    def keep_alive(self, every: float) -> None:
        """Renew from a daemon thread every ``every`` seconds until :meth:`release`."""
        def loop():
            while not self._stop.wait(every):
                self.renew()
        threading.Thread(target=loop, name="olmocr_rl-s3-lease", daemon=True).start()

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still this run's (failures only logged)."""
        self._stop.set()
        if self.lost:
            return
        try:
            client = s3.make_s3_client()
            if client.head_object(Bucket=self.bucket, Key=self.key)["ETag"] == self.etag:
                client.delete_object(Bucket=self.bucket, Key=self.key)
        except storage_errors() as exc:
            logger.warning("releasing the S3 lease on %s failed (it goes stale on its own): %s", self.uri, exc)


_HELD: list[Lease] = []


def _put(client, lease: Lease, **condition) -> str:
    response = client.put_object(Bucket=lease.bucket, Key=lease.key, Body=json.dumps(lease.body).encode(),
                                 ContentType="application/json", **condition)
    return response["ETag"]


def _read(client, bucket: str, key: str) -> tuple[dict, str, float] | None:
    """The lease there: its body, ETag and age in seconds on the server's clock; None when there is none."""
    try:
        response = client.get_object(Bucket=bucket, Key=key)
    except storage_errors() as exc:
        if _code(exc) in {"NoSuchKey", "404"}:
            return None
        raise
    try:
        body = json.loads(response["Body"].read())
    except ValueError:
        body = {}
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    now = parsedate_to_datetime(date).timestamp() if date else time.time()
    return body, response["ETag"], max(0.0, now - response["LastModified"].timestamp())


JOB_ENV = ("OLMOCR_RL_JOB_ID", "SLURM_JOB_ID", "BEAKER_TASK_ID")  # the same across a scheduler's requeues


def job_id() -> str | None:
    """The scheduler's id of this job, the same for each of its requeued starts (None outside a scheduler)."""
    return next((f"{name}={os.environ[name]}" for name in JOB_ENV if os.environ.get(name)), None)


def stale_reason(holder: dict, age: float) -> str | None:
    """Why a lease found on the prefix may be taken over, or None when its run is live."""
    if holder.get("job") and holder.get("job") == job_id():
        return f"it is an earlier start of this job ({holder['job']}), requeued: only one runs at a time"
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        if not _alive_here(holder["pid"]):
            return f"its process {holder['pid']} on this machine is gone"
    if age > lease_seconds():
        return f"not renewed for {age:.0f} s (stale after {lease_seconds():.0f} s)"
    return None


def acquire_lease(s3_save_path: str, *, keep_alive: bool = True) -> Lease:
    """Claim ``s3_save_path`` for this run (see the module's docstring); LeaseHeldError when a live run holds it,
    StorageError when S3 cannot be written."""
    bucket, prefix = parse_s3_uri(s3_save_path)
    uri = f"s3://{bucket}/{folder_prefix(prefix)}"
    body = {"run": uuid.uuid4().hex[:12], "job": job_id(), "host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)[:500]}
    lease = Lease(uri, bucket, folder_prefix(prefix) + LEASE_NAME, body, etag="")
    client = None
    try:
        client = s3.make_s3_client()
        _claim(client, lease)
    except LeaseHeldError:
        raise
    except storage_errors() as exc:
        raise explain(exc, "claiming (the lease object)", uri + LEASE_NAME, client) from exc
    for held in _HELD:  # this process's earlier claim (a library caller starting twice) stops renewing
        held._stop.set()
    _HELD[:] = [lease]
    if keep_alive:
        lease.keep_alive(lease_seconds() / 3)
    return lease


def _claim(client, lease: Lease) -> None:
    try:
        lease.etag = _put(client, lease, IfNoneMatch="*")
        return
    except storage_errors() as exc:
        if _code(exc) == "NotImplemented":
            return _claim_best_effort(client, lease)
        if _code(exc) not in _PRECONDITION:
            raise
    found = _read(client, lease.bucket, lease.key)
    if found is None:  # released meanwhile
        return _claim(client, lease)
    holder, etag, age = found
    mine = holder.get("host") == socket.gethostname() and holder.get("pid") == os.getpid()
    reason = None if mine else stale_reason(holder, age)
    if not mine and reason is None:
        raise LeaseHeldError(f"{lease.uri} is in use by another run ({describe(holder)}; lease renewed {age:.0f} s "
                             f"ago): wait for it to end, or choose another --s3_save_path (a lease not renewed for "
                             f"{lease_seconds():.0f} s is stale and taken over)")
    try:
        lease.etag = _put(client, lease, IfMatch=etag)
    except storage_errors() as exc:
        if _code(exc) in _PRECONDITION:  # another run took it over first
            raise LeaseHeldError(f"{lease.uri} was just claimed by another run: choose another --s3_save_path, or "
                                 "wait for it to end") from None
        raise
    if reason:
        logger.warning("taking over the stale S3 lease on %s of %s: %s", lease.uri, describe(holder), reason)


def _claim_best_effort(client, lease: Lease) -> None:
    found = _read(client, lease.bucket, lease.key)
    if found is not None and stale_reason(found[0], found[2]) is None and found[0].get("pid") != os.getpid():
        raise LeaseHeldError(f"{lease.uri} is in use by another run ({describe(found[0])})")
    lease.etag = _put(client, lease)
    time.sleep(1.0)
    found = _read(client, lease.bucket, lease.key)
    if found is None or found[0].get("run") != lease.body["run"]:
        raise LeaseHeldError(f"{lease.uri} was just claimed by another run: choose another --s3_save_path")


def renew_held() -> None:
    """Renew this process's lease, if it holds one (at each checkpoint save), in the background: a hung S3 server
    must not hold up training."""
    for lease in _HELD:
        threading.Thread(target=lease.renew, name="olmocr_rl-s3-lease-renew", daemon=True).start()


def release_held(timeout: float = 5.0) -> None:
    """Release this process's lease, if it holds one (at the run's end, whatever its status), waiting ``timeout``
    seconds at most: a hung S3 server must not keep a stopped run past its grace period (the lease then goes
    stale on its own)."""
    while _HELD:
        lease = _HELD.pop()
        worker = threading.Thread(target=lease.release, name="olmocr_rl-s3-lease-release", daemon=True)
        worker.start()
        worker.join(timeout)
