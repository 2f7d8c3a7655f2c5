"""What this machine and launcher offer, probed in one place and handed to the (pure) config checks."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from olmocr_rl.ranks import world_size


@dataclass(frozen=True)
class Environment:
    """The facts validation depends on besides the flags."""

    cuda: bool  # a CUDA GPU is visible to torch
    vllm: bool  # vLLM is importable
    num_processes: int = 1  # training processes (the launcher's WORLD_SIZE)


def vllm_available() -> bool:
    """vLLM importable here (found without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def cuda_available() -> bool:
    """A CUDA GPU visible to torch (False when torch itself cannot load)."""
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def probe_environment() -> Environment:
    """This process's environment: GPU, vLLM, and the process count accelerate/torchrun set."""
    return Environment(cuda=cuda_available(), vllm=vllm_available(),
                       num_processes=world_size())


def server_not_listening(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """Why nothing accepts connections at ``host:port`` (refused, no such host, no answer within ``timeout_s``), or
    None when something listens there (a vLLM server still loading its model listens already; TRL waits for it)."""
    import socket

    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return "connection refused: nothing listens on that port"
    except socket.gaierror as exc:
        return f"the host name does not resolve ({exc.strerror or exc})"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)
