"""Vision-tower forward + backward time, stock vs olmocr_rl.model.vision_speedups, on one machine in one run.

    python scripts/bench/bench_vision.py                       # CPU-sized tower, 8 copies of a 896 px page
    python scripts/bench/bench_vision.py --depth 32 --hidden 1280 --heads 16 --side 1288   # the 3B tower (GPU)

Builds a random Qwen2.5-VL vision tower (windowed attention, full attention in every 4th layer as in
the released models), then times, interleaved over --repeats rounds: the stock tower on G copies of the
page, the batched window attention alone, and both speed-ups (G copies encoded once). Prints the
medians and their ratios to the stock tower. The speed-ups are exact; tests/unit/test_vision_speedups.py
checks the numbers.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--side", type=int, default=896, help="page's longest side in px (the other is 0.77 of it)")
    parser.add_argument("--copies", type=int, default=8, help="G: copies of the page in the batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from olmocr_rl.model.vision_speedups import batch_window_attention, share_page_encoding

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    full = [i for i in range(args.depth) if i % 4 == 3]
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]}),
        vision_config=dict(depth=args.depth, hidden_size=args.hidden, intermediate_size=args.hidden * 2,
                           num_heads=args.heads, out_hidden_size=64, fullatt_block_indexes=full, window_size=112),
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    stock = Qwen2_5_VLForConditionalGeneration(config).to(device, dtype)
    batched = copy.deepcopy(stock)
    batch_window_attention(batched)
    both = copy.deepcopy(stock)
    batch_window_attention(both)
    share_page_encoding(both)

    h = (args.side // 28) * 2  # patches per side after the processor's rounding to 28 px
    w = (int(args.side * 0.77) // 28) * 2
    page = torch.randn(h * w, 3 * 2 * 14 * 14, device=device, dtype=dtype)
    pixels = torch.cat([page] * args.copies)
    grid = torch.tensor([[1, h, w]] * args.copies, device=device)

    def run(model) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        features = model.model.get_image_features(pixels, grid).pooler_output
        sum(f.float().square().mean() for f in features).backward()
        if device == "cuda":
            torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    arms = {"stock": stock, "batched window attention": batched, "batched + page encoded once": both}
    for model in arms.values():
        run(model)  # warm-up
    times = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, model in arms.items():
            times[name].append(run(model))
    print(f"[bench_vision] {device}, vision tower depth {args.depth} hidden {args.hidden}, page {h} x {w} patches, "
          f"G = {args.copies}, forward + backward, median of {args.repeats}")
    base = statistics.median(times["stock"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:30s} {median:8.3f} s   {base / median:5.2f}x")


if __name__ == "__main__":
    main()
