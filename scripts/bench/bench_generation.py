"""HF generation of one GRPO batch, TRL's stock path vs the static cache vs ``--compiled_generation``, in one run.

    python scripts/bench/bench_generation.py                       # small model, G = 8 copies of a page, 64 tokens
    python scripts/bench/bench_generation.py --shape 3b --tokens 256   # on a GPU: the 3B shape

Arms, all sampling with TRL 1.16's generation settings and the same seed (the ids are equal: the bench
checks it): TRL's stock path (dynamic cache, compilation off), a static cache sized by the bucketed prompt
length (no compilation), and the static cache with compiled decoding (inductor; on CPU transformers is told
to compile anyway). The compiled arm's first call, which compiles, is timed on its own: the table says how
many generation batches the compilation takes to pay back.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed_common import interleaved, model_dir, page_image, report, synchronize  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="small", help="olmocr_rl.tiny_model shape")
    parser.add_argument("--side", type=int, default=448, help="page size, longest side (px)")
    parser.add_argument("--copies", type=int, default=8, help="G: completions of the page")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens (EOS held off)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip_compiled", action="store_true",
                        help="leave out the compiled arm (compiling takes minutes on a CPU): a quick run of the others")
    args = parser.parse_args()

    import torch
    from transformers import GenerationConfig

    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.model.vision_speedups import apply_vision_speedups
    from olmocr_rl.trainer.generation import bucketed_cache_length, enable_compiled_generation

    model, processor = load_model_and_processor(str(model_dir(args.shape)))
    apply_vision_speedups(model, batched_attention=torch.cuda.is_available())
    model.eval()
    page = page_image(args.side)
    messages = [[{"role": "user", "content": [{"type": "image", "image": page}, {"type": "text", "text": "Read."}]}]]
    inputs = processor.apply_chat_template(messages * args.copies, add_generation_prompt=True, tokenize=True,
                                           return_dict=True, return_tensors="pt", padding=True).to(model.device)
    common = dict(max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=True, temperature=1.0, top_p=1.0,
                  top_k=0, pad_token_id=processor.tokenizer.pad_token_id, eos_token_id=processor.tokenizer.eos_token_id,
                  suppress_tokens=[model.config.image_token_id])
    stock = GenerationConfig(**common, disable_compile=True)  # what TRL 1.16 builds
    static = GenerationConfig(**common, disable_compile=True)
    enable_compiled_generation(static, compile_on_cpu=True)
    static.disable_compile = True
    static.max_cache_len = bucketed_cache_length([inputs["input_ids"].shape[1]], args.tokens)
    compiled = GenerationConfig(**common)
    enable_compiled_generation(compiled, compile_on_cpu=True)
    compiled.max_cache_len = static.max_cache_len

    def generate(config, seed=0):
        torch.manual_seed(seed)
        with torch.no_grad():
            return model.generate(**inputs, generation_config=config)

    reference = generate(stock)
    assert torch.equal(generate(static), reference), "ids differ from the stock path"
    arms = {"stock (TRL: dynamic cache)": lambda: generate(stock), "static cache, bucketed": lambda: generate(static)}
    if not args.skip_compiled:
        synchronize()
        start = time.perf_counter()
        first = generate(compiled)
        synchronize()
        compile_s = time.perf_counter() - start
        assert torch.equal(first, reference), "ids differ from the stock path"
        arms["--compiled_generation"] = lambda: generate(compiled)
    times = interleaved(arms, args.repeats)
    medians = report("bench_generation", f"{args.shape} model on {model.device}, G = {args.copies} x {args.tokens} "
                     f"tokens, {inputs['input_ids'].shape[1]}-token prompt, median of {args.repeats}; ids equal to "
                     "the stock path's", times, "stock (TRL: dynamic cache)")
    if args.skip_compiled:
        return
    saved = medians["stock (TRL: dynamic cache)"] - medians["--compiled_generation"]
    tokens = args.copies * args.tokens
    print(f"  stock {tokens / medians['stock (TRL: dynamic cache)']:.0f} tok/s, compiled "
          f"{tokens / medians['--compiled_generation']:.0f} tok/s; first compiled call {compile_s:.1f} s (compiling)"
          + (f": pays back after {compile_s / saved:.0f} generation batches" if saved > 0 else ": never pays back"))


if __name__ == "__main__":
    main()
