"""The gloo weight push's pieces that run without vLLM: the server's flags and the group's broadcast.

The push itself, against a real ``trl vllm-serve``, runs in the vLLM lane (tests/vllm_lane/test_vllm_server.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import torch

from olmocr_rl.trainer.gloo_push import BACKEND, WORKER_EXTENSION, open_group, server_flags


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
