"""A real S3 server on loopback for tests: moto's standalone server, started and stopped per test.

Use from any test module (pytest puts tests/ on sys.path):

    from s3_server import moto_s3            # the fixture: server up, fake AWS env set, bucket created
    def test_x(moto_s3):
        uri = f"s3://{moto_s3.bucket}/run/"
        ...                                  # boto3 in this process talks to moto_s3.endpoint_url
        subprocess.run(cmd, env={**os.environ, **moto_s3.env})   # a child process finds it too
        moto_s3.stop()                       # the server goes away mid-test (idempotent)

or without pytest: ``with run_moto_server() as server: ... server.endpoint_url``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

TEST_BUCKET = "olmocr-rl-test"
_LOADER: list = []  # botocore's model loader, shared by the tests' clients (creating one is slow)


def fake_aws_env(endpoint_url: str) -> dict[str, str]:
    """Environment that points boto3 at ``endpoint_url`` with fake credentials and fast failure.

    The shared config/credential files are redirected to nowhere so a developer's ~/.aws cannot leak
    in; one botocore attempt per request and short timeouts make a dead server fail in milliseconds.
    """
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_MAX_ATTEMPTS": "1",
        "OLMOCR_RL_S3_CONNECT_TIMEOUT": "2",
        "OLMOCR_RL_S3_READ_TIMEOUT": "10",
    }


# Variables that would override the fake ones above if a developer's shell had them set.
_CLEARED = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_RETRY_MODE")


@dataclass
class MotoS3Server:
    """A running moto server: ``endpoint_url``, the ``env`` pointing at it, and ``stop()``."""

    endpoint_url: str
    bucket: str = TEST_BUCKET
    env: dict[str, str] = field(default_factory=dict)
    _server: object = None
    _client: object = None
    stopped_after: str | None = None  # the key stop_after_put stopped the server after
    puts: list = field(default_factory=list)  # PATH_INFO of each PUT an after_put gate saw (for failure messages)

    def stop(self) -> None:
        """Shut the server down AND close its socket, so clients get "connection refused" at once."""
        server, self._server = self._server, None
        if server is None:
            return
        _stop_without_polling_delay(server)
        # ThreadedMotoServer.stop() leaves the listening socket open: connects would then hang in the
        # backlog until a read timeout instead of failing like a vanished host.
        server._server.server_close()

    def stop_after_put(self, key: str) -> None:
        """Stop the server as soon as it has stored ``key`` (a PUT whose path ends with it), before its answer goes
        back: the uploader's next request finds no server, however busy the machine is (a test that polled for the
        key and then stopped the server raced the uploader). ``stopped_after`` names the key once that happened."""
        def stop():
            self.stop()  # from this request's thread: the serve loop and the listening socket go first
            self.stopped_after = key

        self.after_put(key, stop)

    def after_put(self, key: str, action) -> None:
        """Call ``action()`` once the server has stored ``key`` (a PUT whose path ends with it), in that request's
        thread, before its answer goes back: whatever the client does next happens after ``action``."""
        wsgi = self._server._server  # ThreadedMotoServer's werkzeug server
        app = wsgi.app

        def gate(environ, start_response):
            answer = app(environ, start_response)
            if environ["REQUEST_METHOD"] == "PUT":
                self.puts.append(environ.get("PATH_INFO", ""))
            if environ["REQUEST_METHOD"] == "PUT" and environ.get("PATH_INFO", "").endswith(key):
                body = b"".join(answer)  # stored: moto's work is done
                action()
                return [body]
            return answer

        wsgi.app = gate

    def client(self):
        """A boto3 client for the test's own setup and assertions (one per server: creating one is slow)."""
        import boto3

        if self._client is None:
            self._client = self._make_client(boto3)
        return self._client

    def _make_client(self, boto3):
        import botocore.session

        core = botocore.session.get_session()
        if _LOADER:
            core.register_component("data_loader", _LOADER[0])
        else:
            _LOADER.append(core.get_component("data_loader"))
        return boto3.session.Session(botocore_session=core).client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )


def _stop_without_polling_delay(server) -> None:
    """``server.stop()``, without waiting out the serve loop's poll: socketserver looks for a shutdown request
    every 0.5 s (its default ``poll_interval``, which moto keeps) or after a request, so a connection made while
    the stop is under way ends it at once (about 0.25 s saved per test on average)."""
    host, port = server.get_host_and_port()
    stopping = threading.Thread(target=server.stop, daemon=True)
    stopping.start()
    while stopping.is_alive():
        with contextlib.suppress(OSError):
            socket.create_connection((host, port), timeout=0.2).close()
        stopping.join(0.02)


@contextlib.contextmanager
def run_moto_server() -> Iterator[MotoS3Server]:
    """Start moto's S3 server on 127.0.0.1 (a free port), reset its state, stop it on exit."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto keeps its buckets in process-global state shared by every server in this process.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).close()
    handle = MotoS3Server(endpoint_url=endpoint, env=fake_aws_env(endpoint), _server=server)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def moto_s3(monkeypatch) -> Iterator[MotoS3Server]:
    """A fresh moto S3 server with bucket ``TEST_BUCKET`` and this process's AWS env pointing at it."""
    with run_moto_server() as server:
        for name in _CLEARED:
            monkeypatch.delenv(name, raising=False)
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        server.client().create_bucket(Bucket=server.bucket)
        yield server
