"""Launching GRPO runs on Slurm and Beaker: one pure plan (:mod:`olmocr_rl.launch.plan`), thin front-ends.

* :mod:`~olmocr_rl.launch.plan`: GPU layout, s3 syncs, vLLM server and per-rank trainer commands (pure).
* :mod:`~olmocr_rl.launch.runtime`: print-or-run, the vLLM server's start / health check / stop.
* :mod:`~olmocr_rl.launch.slurm`: ``submit`` (sbatch) and ``job`` (what scripts/slurm/grpo.sbatch runs).
* :mod:`~olmocr_rl.launch.beaker`: image, experiment spec and submission (scripts/grpotrainer-beaker.sh).
* :mod:`~olmocr_rl.launch.beaker_task`: what one Beaker replica runs (scripts/beaker/task.sh).
"""

from olmocr_rl.launch.plan import Command, Layout, LaunchError, Plan, plan

__all__ = ["Command", "Layout", "LaunchError", "Plan", "plan"]
