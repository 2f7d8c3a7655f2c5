"""Training forward + backward under each gradient-checkpointing plan, in one run: time, and activations kept.

    python scripts/bench/bench_grad_checkpointing.py                    # small model, 4 rows of a page + 256 tokens
    python scripts/bench/bench_grad_checkpointing.py --shape 3b --rows 8    # on a GPU: the 3B shape

Plans: ``full`` (transformers' checkpointing of every layer, TRL's default and the baseline), ``partial``
(the vision tower and half the decoder layers), ``vision`` (the vision tower only) and ``off``. For each:
the median step time and its ratio to ``full``, and the bytes autograd keeps through the forward (counted
with saved-tensor hooks, weights excluded) beside what olmocr_rl.model.grad_checkpointing predicts from its
one-layer measurement. Loss and gradients are equal (tests/unit/test_grad_checkpointing.py).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed_common import interleaved, model_dir, page_image, report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="small", help="olmocr_rl.tiny_model shape")
    parser.add_argument("--side", type=int, default=640, help="page size, longest side (px)")
    parser.add_argument("--rows", type=int, default=4, help="rows of the micro-batch (completions of one page)")
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens per row")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from olmocr_rl.model.grad_checkpointing import (
        GIB,
        CheckpointPlan,
        _saved_bytes,
        activation_bytes,
        apply_checkpointing,
        measure_activation_facts,
    )
    from olmocr_rl.model.loading import load_model_and_processor

    stock, processor = load_model_and_processor(str(model_dir(args.shape)))
    page = page_image(args.side)
    messages = [[{"role": "user", "content": [{"type": "image", "image": page}, {"type": "text", "text": "Read."}]}]]
    inputs = processor.apply_chat_template(messages * args.rows, add_generation_prompt=True, tokenize=True,
                                           return_dict=True, return_tensors="pt", padding=True).to(stock.device)
    generator = torch.Generator().manual_seed(0)
    completion = torch.randint(20, stock.config.get_text_config().vocab_size, (args.rows, args.tokens),
                               generator=generator).to(stock.device)
    inputs["input_ids"] = torch.cat([inputs["input_ids"], completion], 1)
    inputs["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(completion)], 1)
    inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(completion)], 1)
    layers = stock.config.get_text_config().num_hidden_layers
    models = {}
    for name, plan in (("full (TRL's default)", None), ("partial", CheckpointPlan("partial", "", layers // 2)),
                       ("vision", CheckpointPlan("vision", "")), ("off", CheckpointPlan("off", ""))):
        model = copy.deepcopy(stock).train()
        if plan is None:
            model.gradient_checkpointing_enable()
        else:
            apply_checkpointing(model, plan)
        models[name] = model

    def step(model):
        model.zero_grad(set_to_none=True)
        model(**inputs, labels=inputs["input_ids"]).loss.backward()

    tokens, patches = inputs["input_ids"].numel(), int(inputs["image_grid_thw"].prod(-1).sum())
    facts = measure_activation_facts(stock.config, stock.dtype)
    predicted = {"full (TRL's default)": (True, layers), "partial": (True, layers // 2), "vision": (True, 0),
                 "off": (False, 0)}
    times = interleaved({name: (lambda m=m: step(m)) for name, m in models.items()}, args.repeats)
    report("bench_grad_checkpointing", f"{args.shape} model, {args.rows} rows x {tokens // args.rows} tokens "
           f"({patches // args.rows} patches a page), forward + backward, median of {args.repeats}", times,
           "full (TRL's default)")
    print("  activations kept through the forward (measured / predicted by olmocr_rl.model.grad_checkpointing):")
    for name, model in models.items():
        kept = _saved_bytes(lambda m=model: m(**inputs, labels=inputs["input_ids"]), model.parameters())
        vision, text_layers = predicted[name]
        guess = activation_bytes(facts, tokens=tokens, patches=patches, vision=vision, text_layers=text_layers)
        print(f"    {name:<22} {kept / GIB * 1024:8.1f} MiB / {guess / GIB * 1024:8.1f} MiB")


if __name__ == "__main__":
    main()
