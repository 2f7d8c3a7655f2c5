"""One run at a time on an ``--s3_save_path`` prefix: its lease object, ``<prefix>/.olmocr_rl-lease.json``.

The local lock (``files.hold_run_lock``) cannot see another machine; two jobs resuming into one prefix would mix
their checkpoints there. So the run's global main process claims the prefix with a conditional put (S3's
``If-None-Match: *``: only one writer creates the object), renews it with ``If-Match`` on the ETag it holds (at
each save and every third of :func:`lease_seconds` from a background thread), and deletes it when it ends.

A lease found there belongs to another run unless it names this process. It is stale, and taken over with one
warning, when its holder is a process on this machine that is no longer running, when it names an earlier attempt
of this job (the same ``SLURM_JOB_ID``, ``BEAKER_TASK_ID`` or ``OLMOCR_RL_JOB_ID``, and a lower attempt number:
``SLURM_RESTART_COUNT`` or ``OLMOCR_RL_JOB_ATTEMPT``; a scheduler starts the next attempt of a job only once the
earlier one ended), or when it was not renewed for :func:`lease_seconds` (``OLMOCR_RL_S3_LEASE_SECONDS``, default
900), measured on the S3 server's clock (its ``Date`` header against the object's ``LastModified``), so no two
machines' clocks are compared. A live one, of this job too, stops the start in one line naming its holder
(:class:`LeaseHeldError`); an object there that is no lease (:class:`LeaseUnreadableError`) too.

Losing the lease (another run took it over as stale, or it was deleted) is seen at the next renewal: the
background one, or the one each mirror pass makes before it uploads anything (:func:`check_held`). From then on
:func:`lost_lease` says who holds it now, the mirror uploads nothing more, and the hooks of :data:`ON_LOST` run
(the training CLI stops at the end of the step, saving it locally only, and exits with status 77).

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


class LeaseUnreadableError(StorageError):
    """The prefix's lease object is not an olmocr_rl lease (not JSON, not an object, no run named); ``detail`` says
    which."""

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


class LeaseLostError(StorageError):
    """This run's lease was taken over or deleted: nothing more may be written to the prefix; the message says
    who holds it now."""


LEASE_SECONDS_ENV = "OLMOCR_RL_S3_LEASE_SECONDS"


def lease_seconds() -> float:
    """How long a lease lives without renewal before another run may take it over (``OLMOCR_RL_S3_LEASE_SECONDS``,
    default 900); StorageError in one line when the variable is not a positive number."""
    raw = os.environ.get(LEASE_SECONDS_ENV, "900")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):  # NaN fails `> 0` too
        raise StorageError(f"{LEASE_SECONDS_ENV}={raw!r} is not a positive number of seconds: set it to how long an "
                           "S3 lease lives without renewal (default 900), or unset it")
    return value


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

    lost_to: str | None = None  # who holds the prefix now (or that the lease was deleted), once lost

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
                self._lose()
            else:
                logger.warning("renewing the S3 lease on %s failed (tried again later): %s", self.uri, exc)
            return False

    def _lose(self) -> None:
        """The lease is no longer this run's: note who holds it now, log it once, run the hooks of ON_LOST."""
        self.lost = True
        self._stop.set()
        _LOST[:] = [self]
        try:
            found = _read(s3.make_s3_client(), self.bucket, self.key)
        except LeaseUnreadableError as exc:
            self.lost_to = f"its object was replaced by one that is no lease ({exc.detail})"
        except storage_errors() as exc:
            self.lost_to = f"it was taken over or deleted (reading who holds it now failed: {exc})"
        else:
            self.lost_to = ("its object was deleted" if found is None else
                            f"it is held by {describe(found[0])} (renewed {found[2]:.0f} s ago)")
        logger.error("the S3 lease on %s is no longer this run's: %s; this run uploads nothing more there", self.uri,
                     self.lost_to)
        for hook in list(ON_LOST):
            hook(self)
    def lost_message(self) -> str:
        """``the S3 lease on URI is no longer this run's: it is held by ...`` (once lost)."""
        return f"the S3 lease on {self.uri} is no longer this run's: {self.lost_to or 'it was taken over or deleted'}"

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
_LOST: list[Lease] = []  # this process's lease, once lost (kept after release: the run's end still reads it)

#: Called with the Lease, from the thread that found it lost (a renewal), once: the training CLI's stop.
ON_LOST: list = []


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
    raw = response["Body"].read()
    try:
        body, detail = json.loads(raw), None
    except ValueError:
        body, detail = None, "empty" if not raw.strip() else "not JSON"
    if detail is None and not isinstance(body, dict):
        detail = f"JSON {type(body).__name__}, not an object"
    elif detail is None and not (isinstance(body.get("run"), str) and body["run"]):
        detail = "a JSON object naming no run"
    if detail is not None:
        raise LeaseUnreadableError(
            f"s3://{bucket}/{key} is not an olmocr_rl lease ({detail}, {len(raw)} bytes): if no run writes to this "
            f"prefix, delete it (`aws s3 rm s3://{bucket}/{key}`) and start again", detail)
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    now = parsedate_to_datetime(date).timestamp() if date else time.time()
    return body, response["ETag"], max(0.0, now - response["LastModified"].timestamp())


JOB_ENV = ("OLMOCR_RL_JOB_ID", "SLURM_JOB_ID", "BEAKER_TASK_ID")  # the same across a scheduler's requeues


def job_id() -> str | None:
    """The scheduler's id of this job, the same for each of its requeued starts (None outside a scheduler)."""
    return next((f"{name}={os.environ[name]}" for name in JOB_ENV if os.environ.get(name)), None)


def job_attempt() -> int | None:
    """Which attempt of its job this start is, where the scheduler says: ``OLMOCR_RL_JOB_ATTEMPT``, or Slurm's
    ``SLURM_RESTART_COUNT`` (0 on a job's first start); None when nothing says."""
    raw = os.environ.get("OLMOCR_RL_JOB_ATTEMPT")
    if raw is None and os.environ.get("SLURM_JOB_ID"):
        raw = os.environ.get("SLURM_RESTART_COUNT", "0")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def stale_reason(holder: dict, age: float) -> str | None:
    """Why a lease found on the prefix may be taken over, or None when its run may still be live.

    A start of this same job is no proof that the holder is dead (a scheduler may start a requeued task before the
    old one is gone): only an earlier attempt number is (the scheduler starts attempt N+1 once attempt N ended)."""
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        if not _alive_here(holder["pid"]):
            return f"its process {holder['pid']} on this machine is gone"
    mine, theirs = job_attempt(), holder.get("attempt")
    if holder.get("job") and holder.get("job") == job_id() and isinstance(theirs, int) and mine is not None \
            and theirs < mine:
        return (f"it is attempt {theirs} of this job ({holder['job']}) and this is attempt {mine}: the scheduler "
                "started this one after that one ended")
    if age > lease_seconds():
        return f"not renewed for {age:.0f} s (stale after {lease_seconds():.0f} s)"
    return None


def _held_message(uri: str, holder: dict, age: float) -> str:
    """The one line for a live lease found on the prefix (LeaseHeldError's message)."""
    base = f"{uri} is in use by another run ({describe(holder)}; lease renewed {age:.0f} s ago)"
    stale = f"a lease not renewed for {lease_seconds():.0f} s is stale and taken over"
    if holder.get("job") and holder.get("job") == job_id():
        return (f"{base}, an earlier start of this job ({holder['job']}) that may still be running: wait until it has "
                f"ended ({stale}); if it is dead, delete its lease (`aws s3 rm {uri}{LEASE_NAME}`) or start this one "
                "with a higher OLMOCR_RL_JOB_ATTEMPT, then start again")
    return f"{base}: wait for it to end, or choose another --s3_save_path ({stale})"


def acquire_lease(s3_save_path: str, *, keep_alive: bool = True) -> Lease:
    """Claim ``s3_save_path`` for this run (see the module's docstring); LeaseHeldError when a live run holds it,
    StorageError when S3 cannot be written."""
    bucket, prefix = parse_s3_uri(s3_save_path)
    uri = f"s3://{bucket}/{folder_prefix(prefix)}"
    every = lease_seconds() / 3  # a bad OLMOCR_RL_S3_LEASE_SECONDS: its one line, before anything is written
    body = {"run": uuid.uuid4().hex[:12], "job": job_id(), "attempt": job_attempt(), "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)[:500]}
    lease = Lease(uri, bucket, folder_prefix(prefix) + LEASE_NAME, body, etag="")
    client = None
    try:
        client = s3.make_s3_client()
        _claim(client, lease)
    except (LeaseHeldError, LeaseUnreadableError):
        raise
    except storage_errors() as exc:
        raise explain(exc, "claiming (the lease object)", uri + LEASE_NAME, client) from exc
    for held in _HELD:  # this process's earlier claim (a library caller starting twice) stops renewing
        held._stop.set()
    _HELD[:] = [lease]
    _LOST.clear()  # an earlier run's lost lease is not this one's
    if keep_alive:
        lease.keep_alive(every)
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
        raise LeaseHeldError(_held_message(lease.uri, holder, age))
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
        raise LeaseHeldError(_held_message(lease.uri, found[0], found[2]))
    lease.etag = _put(client, lease)
    time.sleep(1.0)
    found = _read(client, lease.bucket, lease.key)
    if found is None or found[0].get("run") != lease.body["run"]:
        raise LeaseHeldError(f"{lease.uri} was just claimed by another run: choose another --s3_save_path")


def lost_lease() -> Lease | None:
    """This process's lease once it was found taken over or deleted (``lost_to`` says by whom), else None."""
    return next((lease for lease in (*_HELD, *_LOST) if lease.lost), None)


def check_held() -> Lease | None:
    """Before an upload: renew this process's lease now, in this thread (only the global main process holds one);
    the lost Lease when it is no longer this run's (nothing may be written to the prefix), else None. A renewal
    that fails for another reason (S3 down) lets the upload go on: it fails or succeeds on its own."""
    for lease in list(_HELD):
        lease.renew()
    return lost_lease()


def renew_held() -> None:
    """Renew this process's lease, if it holds one (at each checkpoint save), in the background: a hung S3 server
    must not hold up training."""
    for lease in _HELD:
        threading.Thread(target=lease.renew, name="olmocr_rl-s3-lease-renew", daemon=True).start()


def release_held(timeout: float = 5.0) -> None:
    """Release this process's lease, if it holds one (at the run's end, whatever its status), waiting ``timeout``
    seconds at most: a hung S3 server must not keep a stopped run past its grace period (the lease then goes
    stale on its own). A lost lease is forgotten too: the run is over."""
    _LOST.clear()
    while _HELD:
        lease = _HELD.pop()
        worker = threading.Thread(target=lease.release, name="olmocr_rl-s3-lease-release", daemon=True)
        worker.start()
        worker.join(timeout)
