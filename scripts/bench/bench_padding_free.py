"""Training forward + backward of one micro-batch, TRL's padded block vs ``--padding_free``, in one run.

    python scripts/bench/bench_padding_free.py                          # small model, G = 8, completions 64..512
    OMP_NUM_THREADS=1 python scripts/bench/bench_padding_free.py --shape tiny --side 448 --repeats 5
    python scripts/bench/bench_padding_free.py --rows 2 --shape tiny    # micro-batches of 2 rows

The micro-batch is what TRL 1.16 scores: a page prompt (--side px page) per row, left-padded, and completions
whose lengths are spread evenly from --shortest to --longest tokens, right-padded to the longest of the
generation batch; log-probs and entropies through TRL's fused LM head, then backward. Prints the padded
share of the block, the median times and the ratio. The numbers are equal (tests/unit/test_padding_free.py).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed_common import interleaved, model_dir, page_image, report, trl_block  # noqa: E402


def read_prompt(processor) -> str:
    """The chat text of a short page prompt ("Read." and the page)."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Read."}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="small", help="olmocr_rl.tiny_model shape")
    parser.add_argument("--side", type=int, default=640, help="page size, longest side (px)")
    parser.add_argument("--rows", type=int, default=8, help="rows of the micro-batch (completions of one page)")
    parser.add_argument("--shortest", type=int, default=64)
    parser.add_argument("--longest", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch
    from trl.trainer.utils import add_fused_lm_head

    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.model.vision_speedups import share_page_encoding
    from olmocr_rl.trainer.padding_free import PackedForward, install_padding_free

    stock, processor = load_model_and_processor(str(model_dir(args.shape)))
    share_page_encoding(stock)  # the default: one page encoding for the G copies, in both arms
    packed = copy.deepcopy(stock)
    install_padding_free(packed)
    for model in (stock, packed):
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
        model.train()
    step = (args.longest - args.shortest) / max(args.rows - 1, 1)
    lengths = [round(args.shortest + i * step) for i in range(args.rows)]
    inputs = trl_block(processor, page_image(args.side), read_prompt(processor), lengths,
                       stock.config.get_text_config().vocab_size)
    width = inputs["input_ids"].shape[1] - lengths[-1]

    def run(call, parameters):
        parameters.zero_grad(set_to_none=True)
        out = call(**inputs)
        (out.log_probs[:, -max(lengths):].sum() + out.entropy.mean()).backward()

    padded = 1 - float(inputs["attention_mask"].float().mean())
    times = interleaved({"padded (stock)": lambda: run(stock, stock),
                         "--padding_free": lambda: run(PackedForward(packed), packed)}, args.repeats)
    report("bench_padding_free", f"{args.shape} model, {args.rows} rows of a {width}-token page prompt + completions "
           f"{args.shortest}..{args.longest} tokens: {padded:.0%} of the block is padding; forward + backward, "
           f"median of {args.repeats}, {torch.get_num_threads()} threads", times, "padded (stock)")


if __name__ == "__main__":
    main()
