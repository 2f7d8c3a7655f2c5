"""Benchmark: what a verified checkpoint costs, against writing the checkpoint itself.

    python scripts/bench/bench_checkpoint_verify.py [--weights-mb 1024] [--optimizer-mb 2048] [--repeats 3]

Writes a checkpoint shaped like a real one (a safetensors weights file, a torch-saved optimizer state
twice its size, a scheduler and an RNG state, trainer_state.json, config and tokenizer files) with
``torch.save`` / ``safetensors``, then times, median of ``--repeats``:

- the save (the baseline: what the Trainer spends anyway),
- ``storage.verify.write_manifest`` (sizes and CRC-32s, written at every save),
- ``storage.local_checkpoint_problem`` (what a resume runs on the newest checkpoint: manifest, sizes,
  checksums, each file's format),

and prints each as seconds and as a ratio to the save. The page cache is warm for the manifest and the
check (the save has just written the files): that is how they run in training, right after the save.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def write_checkpoint(folder: Path, weights_mb: int, optimizer_mb: int) -> None:
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.ones(weights_mb * (1 << 20) // 4)}, str(folder / "model.safetensors"))
    half = optimizer_mb * (1 << 20) // 8
    torch.save({"state": {0: {"exp_avg": torch.zeros(half), "exp_avg_sq": torch.zeros(half)}}}, folder / "optimizer.pt")
    torch.save({"last_epoch": 7}, folder / "scheduler.pt")
    torch.save({"python": 1, "cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    (folder / "tokenizer.json").write_text(json.dumps({"vocab": {f"t{i}": i for i in range(150_000)}}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 8, "log_history": [{"step": i} for i in
                                                                                          range(500)]}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights-mb", type=int, default=1024)
    parser.add_argument("--optimizer-mb", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args(argv)

    from olmocr_rl.storage import Topology, local_checkpoint_problem
    from olmocr_rl.storage.verify import write_manifest

    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-verify-"))
    times: dict[str, list[float]] = {"save": [], "manifest": [], "check": []}
    try:
        for repeat in range(args.repeats):
            folder = root / f"checkpoint-{repeat}"
            started = time.perf_counter()
            write_checkpoint(folder, args.weights_mb, args.optimizer_mb)
            times["save"].append(time.perf_counter() - started)
            started = time.perf_counter()
            write_manifest(folder, Topology())
            times["manifest"].append(time.perf_counter() - started)
            started = time.perf_counter()
            problem = local_checkpoint_problem(folder)
            times["check"].append(time.perf_counter() - started)
            assert problem is None, problem
            shutil.rmtree(folder)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    size = args.weights_mb + args.optimizer_mb
    save = statistics.median(times["save"])
    print(f"checkpoint of {size} MB ({args.weights_mb} MB weights + {args.optimizer_mb} MB optimizer), "
          f"median of {args.repeats}:")
    for name, label in (("save", "save (baseline)"), ("manifest", "write_manifest"),
                        ("check", "local_checkpoint_problem")):
        value = statistics.median(times[name])
        print(f"  {label:26s} {value:8.3f} s   {value / save:6.3f} x the save")
    return 0


if __name__ == "__main__":
    sys.exit(main())
