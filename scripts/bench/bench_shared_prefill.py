"""HF generation of one page's group, the shared prefill (``--shared_prefix``) vs TRL's stock prefill: time, tokens.

    OMP_NUM_THREADS=1 python scripts/bench/bench_shared_prefill.py                    # demo and olmOCR 2 shapes
    OMP_NUM_THREADS=1 python scripts/bench/bench_shared_prefill.py --shapes olmocr2 --generations 28 --completion 64

The batch is what TRL 1.16 generates from for one page: G copies of the page prompt (the olmOCR v4 YAML prompt and
a page of bench_data_sample/ rendered at the shape's size; shape ``demo``: the CPU demo's G = 16 at 448 px with the
tiny processor's pixel budget; ``olmocr2``: G = 8 and about 1,800 prompt tokens, the released processor's budget),
sampled with TRL's settings (temperature 1, no top-k/top-p, EOS held off so every completion is C tokens). The
arms use a DynamicCache and no compilation (TRL's HF path), the page encoded once per call
(``--share_page_encoding``): the stock prefill; the shared prefill with DynamicCache's copying update (each decoded
token concatenated to the whole cache: ``copying cache``); and ``--shared_prefix`` as the CLI runs it, decoding
into room made at the prefill. Printed: generate's time and its prefill's (medians of --repeats interleaved
rounds), the prompt tokens the prefill forwarded, and whether each arm's ids equal the stock arm's for the same seed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_shared_prefix import add_shape_arguments, load, page_prompt, shape_names, shape_params  # noqa: E402
from speed_common import interleaved, page_image  # noqa: E402

COPYING = "shared, copying cache"


def setup(args, params: dict):
    """The model, the generate inputs of one group, and a function running one arm (returns (ids, prefill s))."""
    import torch
    from transformers import GenerationConfig

    from olmocr_rl.trainer.shared_prefill import PrefillGuard, shared_prefill

    model, processor = load(args.model_shape, args.work, params["released"])
    model.eval()
    page = page_image(params["side"])
    text = page_prompt(processor, page)
    g = params["generations"]
    inputs = processor(images=[[page]] * g, text=[text] * g, padding=True, return_tensors="pt")
    config = GenerationConfig(max_new_tokens=params["completion"], min_new_tokens=params["completion"],
                              do_sample=True, temperature=1.0, top_p=1.0, top_k=0, disable_compile=True,
                              pad_token_id=processor.tokenizer.pad_token_id,
                              eos_token_id=processor.tokenizer.eos_token_id)
    guard, copying, off = PrefillGuard(), PrefillGuard(), PrefillGuard()
    off.off = True  # shared_prefill() leaves the stock prefill in place
    copying.in_place = False  # the shared prefill, decoding with DynamicCache's own update
    guards = {"--shared_prefix": guard, COPYING: copying}
    clock = {}

    def timed_prefill(*a, **k):
        start = time.perf_counter()
        out = timed_prefill.inner(*a, **k)
        clock["prefill"] = time.perf_counter() - start
        return out

    def run(arm: str):
        torch.manual_seed(0)
        try:
            with torch.no_grad(), shared_prefill(model, guards.get(arm, off)):
                timed_prefill.inner, model._prefill = model._prefill, timed_prefill  # the prefill, shared or not
                ids = model.generate(**inputs, generation_config=config)
        finally:
            model.__dict__.pop("_prefill", None)  # the class's method again
        return ids, clock["prefill"]

    run("--shared_prefix")  # the first use's check (the stock prefill once more) is not what is timed
    run(COPYING)
    return run, int(inputs["attention_mask"][0].sum())


def measure(args, shape: str) -> None:
    params = shape_params(args, shape)
    run, prompt = setup(args, params)
    arms = ("stock (TRL)", COPYING, "--shared_prefix")
    prefill: dict[str, list[float]] = {arm: [] for arm in arms}
    ids: dict = {}

    def call(arm):
        ids[arm], seconds = run(arm)
        prefill[arm].append(seconds)

    times = interleaved({arm: (lambda arm=arm: call(arm)) for arm in arms}, args.repeats)
    import torch

    same = all(torch.equal(ids[arms[0]], ids[arm]) for arm in arms[1:])
    g = params["generations"]
    print(f"[bench_shared_prefill] shape {shape}: {args.model_shape} model, G = {g} completions of "
          f"{params['completion']} tokens on a {prompt}-token page prompt ({params['side']} px); HF generate, median "
          f"of {args.repeats}, {torch.get_num_threads()} threads; every arm's ids equal to the stock arm's: {same}")
    base, base_prefill = statistics.median(times[arms[0]]), statistics.median(prefill[arms[0]])
    header = ("arm", "generate ms", "speed-up", "prefill ms", "speed-up", "prefill tokens")
    print("  {:<32} {:>12} {:>9} {:>11} {:>9} {:>15}".format(*header))
    for arm, rows in zip(arms, (g, 1, 1)):
        whole, first = statistics.median(times[arm]), statistics.median(prefill[arm])
        print(f"  {arm:<32} {whole * 1000:12.1f} {base / whole:8.2f}x {first * 1000:11.1f} "
              f"{base_prefill / first:8.2f}x {rows * prompt:15d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_shape_arguments(parser)  # --completion: every completion's length here (EOS held off)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=None, help="folder for the model (default: a temporary one)")
    args = parser.parse_args()
    for shape in shape_names(args):
        measure(args, shape)


if __name__ == "__main__":
    main()
