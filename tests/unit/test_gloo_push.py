"""The gloo weight push's pieces that run without vLLM: the server's flags, the check of a server before the
model loads, and the group's broadcast.

The push itself, against a real ``trl vllm-serve``, runs in the vLLM lane (tests/vllm_lane/test_vllm_server.py).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import sys
import threading

import torch

from olmocr_rl.trainer.gloo_push import BACKEND, WORKER_EXTENSION, open_group, server_flags, server_problem


def test_server_flags_name_our_backend_and_survive_a_shell():
    flags = server_flags()
    assert flags[0] == "--weight-transfer-config" and json.loads(flags[1]) == {"backend": BACKEND}
    assert flags[2:] == ["--worker-extension-cls", WORKER_EXTENSION]
    assert not any(" " in flag for flag in flags)  # `trl vllm-serve ... $(python -m olmocr_rl.trainer.gloo_push)`
    printed = subprocess.run([sys.executable, "-m", "olmocr_rl.trainer.gloo_push"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert printed == flags


def test_a_group_of_its_own_broadcasts_from_the_trainer():
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    sent = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    received = torch.empty(3, 4)

    def worker():
        group = open_group("127.0.0.1", store.port, 1, 2)
        group.broadcast(received, 0).wait()

    thread = threading.Thread(target=worker)
    thread.start()
    open_group("127.0.0.1", store.port, 0, 2, store=store).broadcast(sent, 0).wait()
    thread.join(timeout=60)
    assert torch.equal(received, sent)
    assert not dist.is_initialized()  # the default process group is untouched


def test_local_address_is_loopback_for_a_loopback_server():
    from olmocr_rl.trainer.gloo_push import _local_address

    assert _local_address("127.0.0.1") == "127.0.0.1"
    socket.inet_aton(_local_address("10.255.255.1"))  # a routable address of this machine, not a name


@contextlib.contextmanager
def serving_info(backend: str | None, status: int = 200):
    """A stand-in for a vLLM server's /server_info on a free loopback port; yields the port."""
    body = json.dumps({"vllm_config": {"weight_transfer_config": backend and {"backend": backend}}}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_without_our_backend_is_named_with_the_flags_to_start_it():
    with serving_info(BACKEND) as port:
        assert server_problem("127.0.0.1", port) is None
    with serving_info("nccl") as port:
        problem = server_problem("127.0.0.1", port)
    assert "takes weights over nccl" in problem and " ".join(server_flags()) in problem
    with serving_info(None) as port:
        assert "takes weights over nothing" in server_problem("127.0.0.1", port)
    with serving_info(None, status=404) as port:
        assert "no development endpoints" in server_problem("127.0.0.1", port)
    with socket.socket() as sock:  # nothing listens: not up yet, TRL waits for it
        sock.bind(("127.0.0.1", 0))
        assert server_problem("127.0.0.1", sock.getsockname()[1]) is None
