"""What the speed-up benches share (bench_generation, bench_page_processing, bench_padding_free, bench_shared_prefix,
bench_grad_checkpointing): a model folder of an ``olmocr_rl.tiny_model`` shape, a real page, TRL's log-prob block of
one page's completions and its micro-batches, interleaved timing, and the medians-and-ratios table. Every figure is a
ratio against the stock path measured in the same run."""

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


def trl_block(processor, page, text: str, lengths: list[int], vocab: int) -> dict:
    """Inputs of TRL's log-prob forward for len(lengths) copies of one page prompt (chat ``text``, the page its
    image) with completions of those lengths (random ids, right-padded; labels on the completion tokens)."""
    import torch
    from trl.trainer.utils import pad

    vision = processor(images=[[page]] * len(lengths), text=[text] * len(lengths), padding=True, return_tensors="pt")
    generator = torch.Generator().manual_seed(0)
    completions = [torch.randint(20, vocab, (n,), generator=generator) for n in lengths]
    completion_ids = pad(completions, 0, "right")
    completion_mask = pad([torch.ones_like(c) for c in completions], 0, "right")
    input_ids = torch.cat([vision["input_ids"], completion_ids], 1)
    attention_mask = torch.cat([vision["attention_mask"], completion_mask], 1)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-completion_ids.shape[1]] = -100
    mm = torch.cat([vision["mm_token_type_ids"], torch.zeros_like(completion_ids)], 1)
    return dict(input_ids=input_ids, attention_mask=attention_mask, pixel_values=vision["pixel_values"],
                image_grid_thw=vision["image_grid_thw"], mm_token_type_ids=mm, labels=labels, fused_lm_head=True)


def rows_of(inputs: dict, rows: list[int]) -> dict:
    """The micro-batch of ``rows`` of a TRL block (pixel values by each row's image grid), as TRL splits it."""
    import torch

    ends = torch.cumsum(inputs["image_grid_thw"].prod(-1), 0).tolist()
    part = {key: value[rows] if isinstance(value, torch.Tensor) else value for key, value in inputs.items()}
    part["pixel_values"] = torch.cat([inputs["pixel_values"][(ends[r - 1] if r else 0):ends[r]] for r in rows])
    return part


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
