"""Server mode without CUDA: the trainer pushes its weights to the vLLM server over a gloo process group.

TRL 1.16 pushes weights to ``trl vllm-serve`` through vLLM's NCCL weight-transfer engine, which needs a CUDA
device on both sides, so a server-mode run on CPUs (vLLM's CPU build, the test lane) could not train past the
step the server's loaded weights served. This is the same protocol with another transport:

* the server runs vLLM's weight-transfer endpoints with our backend, ``olmocr_gloo``, which the worker extension
  :data:`WORKER_EXTENSION` registers in the worker process (:mod:`olmocr_rl.trainer.gloo_worker`); start it with
  ``trl vllm-serve ... $(python -m olmocr_rl.trainer.gloo_push)``, i.e. the flags of :func:`server_flags`;
* the trainer's main process opens a TCP store on a free port, asks the server's workers to join a gloo group
  of 1 + their number (``/init_weight_transfer_engine``), and broadcasts every tensor from rank 0 while the server
  receives it (``/update_weights`` between ``/start_weight_update`` and ``/finish_weight_update``).

Everything TRL's sync does around the transport stays: the names and order of TRL's ``_iter_named_params``
(with our LoRA merge and MoE expert layout), the prefix-cache reset, and our encoder-cache reset. It is chosen
only where the trainer sees no CUDA device (``PageVLLMGeneration``); on GPUs TRL's NCCL push runs unchanged.
"""

from __future__ import annotations

import json
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

logger = logging.getLogger(__name__)

#: The weight-transfer backend name the worker extension registers in the server.
BACKEND = "olmocr_gloo"
#: vLLM's ``--worker-extension-cls`` that registers :data:`BACKEND` (and keeps linear weights loadable on CPU).
WORKER_EXTENSION = "olmocr_rl.trainer.gloo_worker.GlooWeightsExtension"
#: Seconds a rendezvous or one broadcast may take.
TIMEOUT_S = 600


def server_flags() -> list[str]:
    """The extra ``trl vllm-serve`` / ``vllm serve`` flags for a server the CPU trainer can push weights to."""
    config = json.dumps({"backend": BACKEND}, separators=(",", ":"))  # no space: the flags survive a shell's $(...)
    return ["--weight-transfer-config", config, "--worker-extension-cls", WORKER_EXTENSION]


def server_problem(host: str, port: int, timeout_s: float = 5.0) -> str | None:
    """Why the vLLM server at ``host:port`` cannot take the gloo push, or None (also when it does not answer yet:
    TRL waits for it). Checked before the model loads, by a trainer without CUDA."""
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}/server_info?config_format=json"
    start = f"restart it with `trl vllm-serve --model ... {' '.join(server_flags())}`"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            config = json.loads(response.read()).get("vllm_config", {})
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return f"the vLLM server at {host}:{port} has no development endpoints (weight push): {start}"
        return None
    except (OSError, ValueError):
        return None
    backend = (config.get("weight_transfer_config") or {}).get("backend")
    if backend == BACKEND:
        return None
    return (f"the vLLM server at {host}:{port} takes weights over {backend or 'nothing'}, and this machine has no "
            f"CUDA for TRL's NCCL push: {start}")


def open_group(host: str, port: int, rank: int, world_size: int, store=None):
    """A gloo process group of its own (the default group, if any, is untouched); rank 0 hosts the store."""
    import torch.distributed as dist

    timeout = timedelta(seconds=TIMEOUT_S)
    if store is None:
        store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def _local_address(server_host: str) -> str:
    """The trainer's address on the route to the server (what the server's worker connects back to)."""
    if server_host in ("localhost", "127.0.0.1", "0.0.0.0", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((server_host, 9))  # UDP: no packet is sent, the kernel only picks the route
        return probe.getsockname()[0]


def client_class():
    """TRL's ``VLLMClient`` with the gloo push in place of its NCCL one (built lazily: importing TRL's client needs vLLM)."""
    from trl.generation.vllm_client import VLLMClient

    class GlooVLLMClient(VLLMClient):
        """Pushes weights over gloo; generation requests are TRL's own."""

        group = None

        def _call(self, endpoint: str, payload: dict | None = None) -> None:
            response = self.session.post(f"{self.base_url}/{endpoint}", json=payload or {})
            if response.status_code != 200:
                raise RuntimeError(f"vLLM server: POST /{endpoint} answered {response.status_code} "
                                   f"{response.text[:300]}")

        def init_communicator(self, device=None):
            import torch.distributed as dist

            config = self.get_server_info().get("weight_transfer_config") or {}
            if config.get("backend") != BACKEND:
                raise RuntimeError(
                    f"error: the vLLM server at {self.base_url} has weight-transfer backend {config.get('backend')!r}; "
                    "a trainer without CUDA pushes weights over gloo: start the server with "
                    f"`trl vllm-serve --model ... {' '.join(server_flags())}`")
            world_size = self.get_world_size() + 1
            address = _local_address(self.host)
            store = dist.TCPStore(address, 0, world_size, is_master=True, timeout=timedelta(seconds=TIMEOUT_S),
                                  wait_for_workers=False)
            init_info = {"master_address": address, "master_port": store.port, "world_size": world_size}
            with ThreadPoolExecutor(max_workers=1) as pool:  # the server joins while the request is in flight
                joined = pool.submit(self._call, "init_weight_transfer_engine", {"init_info": init_info})
                self.group = open_group(address, store.port, 0, world_size, store=store)
                joined.result()
            logger.info("vLLM server weight push: gloo group of %d on %s:%d", world_size, address, store.port)

        def update_named_params(self, metadata, named_params):
            names, dtypes, shapes = (list(column) for column in zip(*metadata, strict=True))
            update_info = {"names": names, "dtype_names": dtypes, "shapes": shapes}
            self._call("start_weight_update")
            with ThreadPoolExecutor(max_workers=1) as pool:  # the workers receive while the request is in flight
                received = pool.submit(self._call, "update_weights", {"update_info": update_info})
                for (name, tensor), expected in zip(named_params, names, strict=True):
                    if name != expected:
                        raise RuntimeError(f"weight push: {name} sent where the server expects {expected}")
                    self.group.broadcast(tensor.detach().to("cpu").contiguous(), 0).wait()
                received.result()
            self._call("finish_weight_update")

        def close_communicator(self):
            self.group = None

    return GlooVLLMClient


if __name__ == "__main__":
    print(" ".join(server_flags()))
