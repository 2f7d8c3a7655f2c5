"""What the speed-up benches share (bench_generation, bench_page_processing, bench_padding_free,
bench_grad_checkpointing): a model folder of an ``olmocr_rl.tiny_model`` shape, a real page, interleaved timing,
and the medians-and-ratios table. Every figure is a ratio against the stock path measured in the same run."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def model_dir(shape: str, work: str | None = None) -> Path:
    """A random-weight model folder of ``shape`` (built once into ``work``, default a temp dir)."""
    from olmocr_rl.tiny_model import build_tiny_model

    folder = Path(work or tempfile.mkdtemp(prefix="olmocr_rl_bench_")) / f"model-{shape}"
    if not (folder / "config.json").is_file():
        import torch

        cuda = torch.cuda.is_available() and shape in ("3b", "7b")
        build_tiny_model(folder, seed=0, shape=shape, dtype="bfloat16" if cuda else "float32",
                         device="cuda" if cuda else "cpu")
    return folder


def page_image(longest_side: int, index: int = 0):
    """Page ``index`` of bench_data_sample/ rendered as the trainer renders it."""
    from olmocr_rl.data import OlmOCRBenchDataset

    return OlmOCRBenchDataset(str(REPO / "bench_data_sample"), target_longest_image_dim=longest_side)[index]["image"]


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def interleaved(arms: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of each arm's call over ``repeats`` rounds, arms interleaved within a round (one warm-up call each)."""
    for run in arms.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(repeats):
        for name, run in arms.items():
            synchronize()
            start = time.perf_counter()
            run()
            synchronize()
            times[name].append(time.perf_counter() - start)
    return times


def report(tag: str, header: str, times: dict[str, list[float]], baseline: str) -> dict[str, float]:
    """Print the medians and their speed-ups over ``baseline``; returns the medians."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"[{tag}] {header}")
    width = max(len(name) for name in medians)
    for name, value in medians.items():
        print(f"  {name:<{width}}  {value * 1000:9.1f} ms   {medians[baseline] / value:5.2f}x vs {baseline}")
    return medians
