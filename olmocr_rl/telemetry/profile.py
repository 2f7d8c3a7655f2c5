"""One optimizer step under ``torch.profiler``, split by phase (``--profile_step N``).

The trainer, built with ``label_phases=True``, labels TRL 1.16's ``_generate`` (sampling) and
``_calculate_rewards`` (reward functions) with ``record_function`` ranges; :func:`attach_step_profiler` gives
:class:`StepProfiler`, which profiles optimizer step N
(CPU, and CUDA when present) and writes ``OUTPUT_DIR/profile_step_N.json``: for each phase (``generate``,
``reward`` and ``train``, the rest of the step: log-probs, forward/backward, optimizer) its wall time, the
time its operators kept the CPU and the GPU busy, how many GPU kernels it launched and how long they ran on
average, the top operators by GPU time (CPU time on a CPU-only machine), and a verdict:

* ``compute-bound``: the GPU was busy for at least half of the phase's wall time;
* ``launch-bound``: the GPU was mostly idle while kernels were being launched (short kernels, one after the
  other from Python: what one-token-per-step decoding and per-window vision attention look like);
* ``cpu``: no GPU (the verdict is about the host alone).
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from pathlib import Path

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

__all__ = ["PHASE_PREFIX", "StepProfiler", "attach_step_profiler", "summarise_profile"]

PHASE_PREFIX = "olmocr_rl/"
#: GPU busy share of a phase's wall time at and above which it counts as compute-bound.
COMPUTE_BOUND_BUSY = 0.5
TOP_OPERATORS = 10


def attach_step_profiler(trainer, step: int, output_dir: str | Path) -> "StepProfiler":
    """The callback that profiles optimizer step ``step`` (1-based); the trainer labels its phases when built with
    ``label_phases=True`` (olmocr_rl.telemetry.timing.StepClock)."""
    return StepProfiler(step, Path(output_dir))


def _phase_of(event) -> str:
    """The phase range an operator ran in (its nearest ``olmocr_rl/`` ancestor), else ``train``."""
    parent = event
    while parent is not None:
        if parent.name.startswith(PHASE_PREFIX):
            return parent.name[len(PHASE_PREFIX):]
        parent = parent.cpu_parent
    return "train"


def _kernels_by_window(events, spans: dict[str, list[tuple[float, float]]]):
    """``{phase: (GPU seconds, kernels)}`` from the profile's GPU events, each placed in the phase range its start
    falls in (``train`` outside every range): used where the operators carry no kernels of their own."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in events:
        if "CUDA" not in str(getattr(event, "device_type", "")):
            continue
        start = event.time_range.start
        phase = next((name for name, ranges in spans.items() if any(a <= start <= b for a, b in ranges)), "train")
        totals[phase][0] += (event.time_range.end - event.time_range.start) / 1e6
        totals[phase][1] += 1
    return totals


def summarise_profile(events, step_wall_s: float, cuda: bool) -> dict:
    """Per-phase figures of a profiled step from ``prof.events()`` (see the module docstring)."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    ops: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for event in events:
        if "CUDA" in str(getattr(event, "device_type", "")):
            continue  # a kernel: counted through the operator that launched it
        if event.name.startswith(PHASE_PREFIX):
            phase = event.name[len(PHASE_PREFIX):]
            if event.cpu_parent is None or _phase_of(event.cpu_parent) != phase:  # the outermost range
                spans[phase].append((event.time_range.start, event.time_range.end))
            continue
        entry = ops[_phase_of(event)][event.name]
        entry["cpu_s"] += event.self_cpu_time_total / 1e6
        entry["gpu_s"] += getattr(event, "self_device_time_total", 0) / 1e6
        entry["kernels"] += len(event.kernels)
        entry["calls"] += 1
    windows = {phase: sum(b - a for a, b in ranges) / 1e6 for phase, ranges in spans.items()}
    windows["train"] = max(step_wall_s - sum(windows.values()), 0.0)
    by_window = _kernels_by_window(events, spans) if cuda else {}
    counted = any(o["kernels"] for table in ops.values() for o in table.values())
    phases = {}
    for phase in ("generate", "reward", "train"):
        table = ops.get(phase, {})
        gpu_s, kernels = sum(o["gpu_s"] for o in table.values()), int(sum(o["kernels"] for o in table.values()))
        if cuda and not counted:
            gpu_s, kernels = by_window.get(phase, (0.0, 0))
        wall = windows.get(phase, 0.0)
        busy = gpu_s / wall if wall > 0 else 0.0
        key = "gpu_s" if cuda and counted else "cpu_s"
        top = sorted(table.items(), key=lambda item: item[1][key], reverse=True)[:TOP_OPERATORS]
        phases[phase] = {
            "wall_s": wall, "cpu_op_s": sum(o["cpu_s"] for o in table.values()), "gpu_s": gpu_s,
            "gpu_busy": busy, "kernels": int(kernels), "mean_kernel_us": gpu_s / kernels * 1e6 if kernels else 0.0,
            "verdict": ("compute-bound" if busy >= COMPUTE_BOUND_BUSY else "launch-bound") if cuda else "cpu",
            "top_operators": [{"name": name, **{k: (int(v) if k in ("kernels", "calls") else v) for k, v in o.items()}}
                              for name, o in top],
        }
    return {"step_wall_s": step_wall_s, "device": "cuda" if cuda else "cpu", "phases": phases}


class StepProfiler(TrainerCallback):
    """Profiles one optimizer step and writes its per-phase summary (see the module docstring)."""

    def __init__(self, step: int, output_dir: Path):
        self.step, self.output_dir = step, output_dir
        self._profiler = None
        self._start = 0.0
        self.summary: dict | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 != self.step or self._profiler is not None:
            return
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._profiler = profile(activities=activities)
        self._profiler.__enter__()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._profiler is None or self.summary is not None:
            return
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - self._start
        self._profiler.__exit__(None, None, None)
        self.summary = {"step": self.step, **summarise_profile(self._profiler.events(), wall,
                                                                torch.cuda.is_available())}
        if state.is_world_process_zero:
            path = self.output_dir / f"profile_step_{self.step}.json"
            path.write_text(json.dumps(self.summary, indent=2) + "\n")
            for phase, figures in self.summary["phases"].items():
                logger.info("profile step %d %s: %.2f s wall, GPU busy %.0f%%, %d kernels (%s); top: %s", self.step,
                            phase, figures["wall_s"], 100 * figures["gpu_busy"], figures["kernels"], figures["verdict"],
                            ", ".join(op["name"] for op in figures["top_operators"][:3]))
