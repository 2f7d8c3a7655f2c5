"""The vLLM points of TRL's private surface (trainer/compat.py) hold in the vLLM lane's stack (the main lane has
no vLLM, so only this lane can check them)."""

from __future__ import annotations

from olmocr_rl.trainer import compat


def test_every_vllm_point_holds_with_the_installed_vllm():
    vllm_points = [p for p in compat.SURFACE if p.vllm]
    assert len(vllm_points) >= 8
    assert compat.problems(vllm=True) == []
    compat.require_surface(vllm=True)
