"""Processor time per step, stock vs ``--share_page_processing``, in one run.

    python scripts/bench/bench_page_processing.py              # 8 copies of a 1288 px page, the real image processor
    python scripts/bench/bench_page_processing.py --copies 28 --pages 2

A step of TRL 1.16 runs the processor twice over the generation batch (prompts for generation, then the
training inputs), G copies of each page. The image processor is Qwen2.5-VL's with its released pixel
limits (the tiny tokenizer does the text). Prints the median step time of each arm and the ratio; the
outputs are equal (tests/unit/test_page_processing.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed_common import interleaved, model_dir, page_image, report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=1288, help="rendered page size, longest side (px)")
    parser.add_argument("--copies", type=int, default=8, help="G: copies of each page in the batch")
    parser.add_argument("--pages", type=int, default=1, help="distinct pages in the batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from olmocr_rl.model.loading import load_processor
    from olmocr_rl.model.page_processing import share_page_processing

    folder = model_dir("tiny")
    stock, shared = load_processor(str(folder)), load_processor(str(folder))
    for processor in (stock, shared):  # Qwen2.5-VL's released limits: 3,136 to 12,845,056 pixels
        processor.image_processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 16384)
    share_page_processing(shared)
    pages = [page_image(args.side, i) for i in range(args.pages)]

    def step(processor):
        images = [page.copy() for page in pages for _ in range(args.copies)]  # distinct objects, as TRL passes them
        messages = [[{"role": "user", "content": [{"type": "image", "image": im}, {"type": "text", "text": "Read."}]}]
                    for im in images]
        processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        texts = [processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
        return processor(images=[[im] for im in images], text=texts, padding=True, return_tensors="pt")

    grid = step(stock)["image_grid_thw"][0].tolist()
    times = interleaved({"stock (every copy, twice)": lambda: step(stock),
                         "--share_page_processing": lambda: step(shared)}, args.repeats)
    report("bench_page_processing", f"{args.pages} page(s) x G = {args.copies}, {args.side} px ({pages[0].size[0]} x "
           f"{pages[0].size[1]}, grid {grid}), the two processor calls of a step, median of {args.repeats}", times,
           "stock (every copy, twice)")


if __name__ == "__main__":
    main()
