"""Benchmark: our in-process pypdfium2 renderer vs olmOCR's poppler path, and renders per training step.

    python scripts/bench/bench_render.py [--folder ../shared/olmocr-bench-sample] [--repeats 3]

1. Renders every page of every PDF under <folder>/pdfs twice: the way olmOCR's dataset does
   (`pdfinfo` for the MediaBox, then `pdftoppm -png -r <dpi>` as a subprocess, base64 round trip,
   PNG decode to RGB) and with `olmocr_rl.data.render.render_page`. Prints per-page times (median
   of --repeats), the speed ratio (target: >= 10x in total) and checks that image sizes agree.
   Poppler (Debian's poppler-utils) is needed only for this comparison; without it the script says
   so and times our renderer alone.
2. Simulates GRPO training steps: TRL's RepeatSampler asks the dataset for every page G times in a
   row (G = 8, and olmOCR's G = 28); prints how many times each page was rasterised per step with
   the page cache, without it, and with two dataloader workers.
"""

from __future__ import annotations

import argparse
import base64
import io
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from olmocr_rl.data.render import PageRenderCache, pdf_page_count, render_page  # noqa: E402

DEFAULT_FOLDER = REPO_ROOT.parent / "shared" / "olmocr-bench-sample"


def poppler_render(pdf_path: Path, page: int, target: int) -> Image.Image:
    """olmOCR's path: pdfinfo MediaBox -> dpi = target*72/longest side -> pdftoppm PNG -> base64 -> PIL RGB."""
    info = subprocess.run(
        ["pdfinfo", "-f", str(page), "-l", str(page), "-box", "-enc", "UTF-8", str(pdf_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    media_box = next(line for line in info.splitlines() if "MediaBox" in line)
    x0, y0, x1, y1 = (float(value) for value in media_box.split(":")[1].split())
    dpi = target * 72 / max(abs(x1 - x0), abs(y1 - y0))
    png = subprocess.run(
        ["pdftoppm", "-png", "-f", str(page), "-l", str(page), "-r", str(dpi), str(pdf_path)],
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout
    encoded = base64.b64encode(png).decode("ascii")  # olmOCR passes pages around as base64 PNG
    return Image.open(io.BytesIO(base64.b64decode(encoded))).convert("RGB")


def timed(function, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def compare_renderers(folder: Path, target: int, repeats: int) -> bool:
    pages = [
        (pdf, page)
        for pdf in sorted((folder / "pdfs").rglob("*.pdf"))
        for page in range(1, pdf_page_count(pdf) + 1)
    ]
    have_poppler = shutil.which("pdftoppm") is not None and shutil.which("pdfinfo") is not None
    if not have_poppler:
        print("POPPLER MISSING: pdftoppm/pdfinfo not found, so olmOCR's path cannot be timed.")
        print("  Install Debian's poppler-utils for the comparison (apt-get install -y poppler-utils);")
        print("  it is a benchmark tool only, not a dependency of olmocr_rl. Timing our renderer alone.\n")

    print(f"== renderers: {len(pages)} pages of {folder}, longest side {target} px, median of {repeats} run(s)")
    header = f"{'page':<64} {'ours size':>11} {'ours ms':>8}"
    if have_poppler:
        header += f" {'poppler size':>12} {'poppler ms':>10} {'ratio':>6} {'mean |diff|':>11}"
    print(header)
    ours_total = poppler_total = 0.0
    ratios, size_problems, float_quirks = [], [], []
    for pdf, page in pages:
        name = f"{pdf.relative_to(folder / 'pdfs')} p{page}"
        ours_time, ours = timed(lambda: render_page(pdf, page, target), repeats)
        ours_total += ours_time
        row = f"{name:<64} {'x'.join(map(str, ours.size)):>11} {ours_time * 1000:>8.1f}"
        if have_poppler:
            poppler_time, theirs = timed(lambda: poppler_render(pdf, page, target), repeats)
            poppler_total += poppler_time
            ratios.append(poppler_time / ours_time)
            if theirs.size != ours.size:
                # pdftoppm rounds page_size * dpi / 72 up; float noise can push target to target + 1.
                long_ours, long_theirs = max(ours.size), max(theirs.size)
                if long_theirs == target + 1 and min(ours.size) == min(theirs.size):
                    float_quirks.append(name)
                else:
                    size_problems.append(f"{name}: ours {ours.size}, poppler {theirs.size}")
            same = theirs.size == ours.size
            diff = float(np.abs(np.asarray(ours, dtype=np.int16) - np.asarray(theirs, dtype=np.int16)).mean()) if same else float("nan")
            row += f" {'x'.join(map(str, theirs.size)):>12} {poppler_time * 1000:>10.1f} {ratios[-1]:>6.1f} {diff:>11.2f}"
        print(row)

    print(f"\nours total: {ours_total:.2f} s ({ours_total / len(pages) * 1000:.1f} ms/page)")
    if not have_poppler:
        return True
    print(f"poppler total: {poppler_total:.2f} s ({poppler_total / len(pages) * 1000:.1f} ms/page)")
    total_ratio = poppler_total / ours_total
    print(
        f"speed ratio, total: {total_ratio:.1f}x  (per page: median {statistics.median(ratios):.1f}x, "
        f"min {min(ratios):.1f}x, max {max(ratios):.1f}x)  target >= 10x: {'PASS' if total_ratio >= 10 else 'FAIL'}"
    )
    same_sizes = len(pages) - len(float_quirks) - len(size_problems)
    print(f"image sizes: {same_sizes}/{len(pages)} identical")
    if float_quirks:
        print(
            f"  {len(float_quirks)} page(s) where pdftoppm made the long side {target + 1} px (float rounding "
            f"of pdfinfo's 2-decimal MediaBox and of target*72/side, rounded up); ours keeps {target}, short sides equal:"
        )
        for name in float_quirks:
            print(f"    {name}")
    for problem in size_problems:
        print(f"  SIZE MISMATCH {problem}")
    return not size_problems and total_ratio >= 10


def simulate_training_steps(folder: Path, target: int, pages_per_step: int) -> None:
    from torch.utils.data import DataLoader
    from trl.trainer.utils import RepeatSampler

    from olmocr_rl.data.dataset import OlmOCRBenchDataset

    class CountingDataset(OlmOCRBenchDataset):
        """Adds the serving process's cumulative render count to each item (benchmark only)."""

        def __getitem__(self, index):
            item = super().__getitem__(index)
            import os

            item["_process"] = os.getpid()
            item["_renders"] = self.render_cache.stats.renders
            return item

    print(f"\n== training-step simulation: TRL RepeatSampler, {pages_per_step} pages per step, {folder}")
    print(f"{'G':>3} {'cache':>10} {'workers':>7} {'steps':>5} {'requests':>8} {'renders':>7} {'renders/page/step':>17} {'s/step':>7}")
    for group_size in (8, 28):
        for cache_bytes, workers in ((512 * 2**20, 0), (0, 0), (512 * 2**20, 2)):
            dataset = CountingDataset(folder, render_cache=PageRenderCache(cache_bytes), target_longest_image_dim=target)
            sampler = RepeatSampler(dataset, mini_repeat_count=group_size, batch_size=pages_per_step, shuffle=True, seed=0)
            loader = DataLoader(
                dataset, batch_size=group_size * pages_per_step, sampler=sampler, num_workers=workers, collate_fn=list
            )
            started = time.perf_counter()
            per_step, requests, renders = [], 0, 0
            last_count: dict[int, int] = {}
            for batch in loader:
                step_renders = 0
                for process in {item["_process"] for item in batch}:
                    newest = max(item["_renders"] for item in batch if item["_process"] == process)
                    step_renders += newest - last_count.get(process, 0)
                    last_count[process] = newest
                distinct = len({(item["pdf_path"], item["page"]) for item in batch})
                per_step.append(step_renders / distinct)
                requests += len(batch)
                renders += step_renders
            elapsed = time.perf_counter() - started
            label = "off" if cache_bytes == 0 else f"{cache_bytes // 2**20} MiB"
            print(
                f"{group_size:>3} {label:>10} {workers:>7} {len(per_step):>5} {requests:>8} {renders:>7} "
                f"{statistics.mean(per_step):>8.2f} (max {max(per_step):.0f}) {elapsed / len(per_step):>7.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER, help="bench folder with pdfs/ (default: ../shared sample)")
    parser.add_argument("--target", type=int, default=1288, help="longest image side in pixels (olmOCR: 1288)")
    parser.add_argument("--repeats", type=int, default=3, help="timing runs per page and renderer (median reported)")
    parser.add_argument("--pages_per_step", type=int, default=4, help="distinct pages per simulated training step")
    parser.add_argument("--skip_steps", action="store_true", help="only compare the renderers")
    args = parser.parse_args(argv)
    if not (args.folder / "pdfs").is_dir():
        print(f"no pdfs/ folder in {args.folder}; pass --folder with an olmOCR-bench folder", file=sys.stderr)
        return 1
    ok = compare_renderers(args.folder, args.target, args.repeats)
    if not args.skip_steps:
        simulate_training_steps(args.folder, args.target, args.pages_per_step)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
