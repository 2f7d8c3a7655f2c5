"""Training phase of one group, ``--shared_prefix`` vs the forward it replaces: time, tokens forwarded, peak memory.

    OMP_NUM_THREADS=1 python scripts/bench/bench_shared_prefix.py                       # demo and olmOCR 2 shapes
    OMP_NUM_THREADS=1 python scripts/bench/bench_shared_prefix.py --shapes olmocr2 --generations 28
    python scripts/bench/bench_shared_prefix.py --shapes demo --side 224 --repeats 1    # the smoke test's size
    OMP_NUM_THREADS=1 python scripts/bench/bench_shared_prefix.py --shapes olmocr2 --frozen_tower  # LoRA's phase
    OMP_NUM_THREADS=1 python scripts/bench/bench_shared_prefix.py --shapes olmocr2 --generations 28 \
        --per_device_train_batch_size 1                                   # olmOCR 2's geometry: 28 micro-steps

The block is what TRL 1.16 scores for one page: G rows of the page prompt (the olmOCR v4 YAML prompt and
a page of bench_data_sample/ rendered at --side px) and G completions whose lengths are spread evenly over
[C/2, C] (shape ``demo``: the CPU demo's 16 x 64 tokens at 448 px, the tiny processor's 16 image tokens a page;
``olmocr2``: olmOCR 2's token shape, about 1,800 prompt tokens -- a 1400 px page under the released processor's
pixel budget; bench_data_sample's 1288 px page gives 1,541 -- and C = 1,000). The training phase of a step is this forward with
gradients and its backward (the loss), plus the same forward without gradients (the old-policy log-probs,
and the reference model's when beta > 0). ``--per_device_train_batch_size`` splits the block into micro-batches
as TRL does (olmOCR 2 trains one completion a micro-batch): the forward without gradients runs over TRL's chunks
of that many rows, then each micro-batch's forward and backward, the gradients accumulated over the window.
Arms, all through TRL's fused log-prob head, the page encoded once per forward in each (``--share_page_encoding``,
the default):

* ``--padding_free`` (the default before): the rows packed into one row, attention per sequence;
* ``--shared_prefix`` (with ``--padding_free``): the prompt once, each completion attending to it (across the
  micro-steps too: the prompt's keys and values kept, their gradient run through it once in the last);
* ``padded (TRL)``: TRL's padded block as is (shape ``demo`` only, or ``--padded``).

``--frozen_tower``: the vision tower frozen and its features cached per step (``--freeze_vision_tower``, and LoRA,
whose vision side is frozen): the page is encoded before the phase, as generation's prefill does in a step, so the
phase is the merger and the language model, without the tower's work that is the same in both arms.

Time: medians of --repeats interleaved rounds in this process. Tokens: the rows the language model forwarded
(its embedding's input). Peak memory: each arm once more in a fresh process, the rise of its peak RSS over
the RSS before the call (CPU; the allocator's reuse makes in-process peaks meaningless). The numbers are
equal to float rounding (tests/unit/test_shared_prefix.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed_common import interleaved, model_dir, page_image, rows_of, trl_block  # noqa: E402

#: released: the page gets the released Qwen2.5-VL processor's pixel budget (2,560 image tokens at most) instead
#: of the tiny model's (16 tokens, the CPU demo's), so a 1288 px page is about 1,600 image tokens as in olmOCR 2.
SHAPES = {"demo": {"side": 448, "generations": 16, "completion": 64, "released": False},
          "olmocr2": {"side": 1400, "generations": 8, "completion": 1000, "released": True}}
ARMS = ("--padding_free", "--shared_prefix", "padded (TRL)")


def page_prompt(processor, page) -> str:
    """The chat text of one page prompt: the olmOCR v4 YAML prompt and the page image."""
    from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt

    content = [{"type": "text", "text": build_no_anchoring_v4_yaml_prompt()}, {"type": "image", "image": page}]
    return processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                         tokenize=False)


def load(shape: str, work: str | None, released: bool, frozen_tower: bool = False):
    """The model of ``shape`` (an olmocr_rl.tiny_model shape or a folder) and its processor, the page encoded once
    per forward; ``released``: the released Qwen2.5-VL processor's pixel budget; ``frozen_tower``: the vision
    tower frozen and its features cached per step, as the trainer runs it with ``--freeze_vision_tower`` or LoRA
    (the merger still trains)."""
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.model.vision_speedups import share_page_encoding

    model, processor = load_model_and_processor(shape if Path(shape).is_dir() else str(model_dir(shape, work)))
    if released:
        from olmocr_rl.model.families import _RELEASED_PIXELS_14

        processor.image_processor.size.longest_edge = _RELEASED_PIXELS_14
    share_page_encoding(model)
    if frozen_tower:
        from olmocr_rl.model.frozen_vision import freeze_vision, install_feature_cache

        freeze_vision(model, tower=True, merger=False)
        cache, what = install_feature_cache(model)
        if cache is None:
            sys.exit(f"error: --frozen_tower: no feature cache for this model ({what})")
    return model, processor


def add_shape_arguments(parser) -> None:
    """The shape flags both shared-prefix benchmarks take."""
    parser.add_argument("--shapes", default="demo,olmocr2", help="comma list of: " + ", ".join(SHAPES))
    parser.add_argument("--model_shape", default="tiny", help="olmocr_rl.tiny_model shape, or a model folder")
    parser.add_argument("--side", type=int, default=None, help="page size (px), instead of the shape's")
    parser.add_argument("--generations", type=int, default=None, help="G, instead of the shape's")
    parser.add_argument("--completion", type=int, default=None, help="longest completion C, instead of the shape's")


def shape_names(args) -> list[str]:
    """--shapes, each checked (one error line naming the flag otherwise)."""
    names = args.shapes.split(",")
    for shape in names:
        if shape not in SHAPES:
            sys.exit(f"error: --shapes {shape!r}: choose from {', '.join(SHAPES)}")
    return names


def shape_params(args, shape: str) -> dict:
    """The shape's side, G, C and pixel budget, with --side/--generations/--completion where given."""
    overrides = {k: getattr(args, k) for k in ("side", "generations", "completion") if getattr(args, k) is not None}
    return {**SHAPES[shape], **overrides}


def setup(shape: str, side: int, generations: int, completion: int, work: str | None, released: bool,
          frozen_tower: bool = False, batch: int | None = None):
    """The model (pack-aware attention, page encoded once per group), the inputs, and each arm's phase. With
    ``frozen_tower`` the page's features are encoded here, as generation's prefill encodes them in a step, so the
    phase runs the merger and the language model only. ``batch``: rows a micro-batch (default: the whole group)."""
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from olmocr_rl.trainer.padding_free import PackedForward
    from olmocr_rl.trainer.prefix_steps import PrefixScope, page_keys
    from olmocr_rl.trainer.shared_prefix import SharedPrefixForward, SharedPrefixGuard, install_shared_prefix

    model, processor = load(shape, work, released, frozen_tower)
    assert install_shared_prefix(model) is not None  # also the pack-aware SDPA of --padding_free
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model.train()
    lengths = [round(completion / 2 + i * (completion / 2) / max(generations - 1, 1)) for i in range(generations)]
    page = page_image(side)
    inputs = trl_block(processor, page, page_prompt(processor, page), lengths, model.config.get_text_config().vocab_size)
    width = max(lengths)  # TRL's logits_to_keep: the completion columns
    batch = batch or generations
    micro = [list(range(start, min(start + batch, generations))) for start in range(0, generations, batch)]
    parts = [rows_of(inputs, rows) for rows in micro]
    keys = page_keys(inputs["input_ids"][:, :-width], inputs["attention_mask"][:, :-width], inputs["pixel_values"],
                     inputs["image_grid_thw"])
    guard = SharedPrefixGuard()
    guard.checked = True  # the first-use check is the trainer's; here each arm runs its own forward only
    fixed = {"--padding_free": PackedForward(model), "padded (TRL)": model}

    def call(arm: str, pages: list, **window):
        return fixed.get(arm) or SharedPrefixForward(model, None, width, guard, pages=pages, **window)

    seen: list[int] = []
    model.get_input_embeddings().register_forward_hook(lambda module, args, out: seen.append(args[0].numel()))

    def phase(arm: str) -> int:
        """The training phase of one page's group: the forward without gradients over TRL's chunks of ``batch``
        rows (one call: the old-policy log-probs, and the reference model's when beta > 0), then each micro-batch's
        forward and backward, gradients accumulated over the window; returns the tokens the language model
        forwarded."""
        seen.clear()
        with torch.no_grad():
            chunks = call(arm, keys)
            for part in parts:
                chunks(**part)
        model.zero_grad(set_to_none=True)
        scope = PrefixScope()  # the window's kept prompts
        for step, (rows, part) in enumerate(zip(micro, parts)):
            later = frozenset(keys[r] for rows_after in micro[step + 1:] for r in rows_after)
            out = call(arm, [keys[r] for r in rows], scope=scope, later=later, final=step == len(micro) - 1)(**part)
            mask = part["attention_mask"][:, -width:]
            ((out.log_probs[:, -width:] * mask).sum() + out.entropy[:, -width:].mean()).backward()
        return sum(seen)

    if frozen_tower:  # generation's prefill has encoded the page by the time the training phase runs
        with torch.no_grad():
            fixed["--padding_free"](**inputs)
    prompt = int(inputs["attention_mask"][0].sum()) - lengths[0]
    return phase, prompt, lengths


def memory_child(args) -> None:
    """One arm's phase in this fresh process: the rise of peak RSS over the RSS before it (MiB), as JSON. The
    kernel's peak (VmHWM) is reset first (``/proc/self/clear_refs``), so loading and page processing do not count."""
    phase, _, _ = setup(args.shape_name, args.side, args.generations, args.completion, args.work, args.released,
                        args.frozen_tower, args.per_device_train_batch_size)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the current RSS
    before = _status_kib("VmHWM")
    tokens = phase(args.memory_arm)
    print(json.dumps({"rise_mib": (_status_kib("VmHWM") - before) / 1024, "tokens": tokens}))


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def measure(args, shape: str, arms: list[str]) -> None:
    params = shape_params(args, shape)
    phase, prompt, lengths = setup(args.model_shape, params["side"], params["generations"], params["completion"],
                                   args.work, params["released"], args.frozen_tower, args.per_device_train_batch_size)
    tokens: dict[str, int] = {}
    times = interleaved({arm: (lambda arm=arm: tokens.__setitem__(arm, phase(arm))) for arm in arms}, args.repeats)
    memory = {arm: float("nan") for arm in arms}
    for arm in arms if not args.skip_memory else ():
        command = [sys.executable, __file__, f"--memory_arm={arm}", "--shape_name", args.model_shape, "--work", args.work,
                   "--side", str(params["side"]), "--generations", str(params["generations"]),
                   "--completion", str(params["completion"])] + (["--released"] if params["released"] else []) \
            + (["--frozen_tower"] if args.frozen_tower else []) \
            + ([f"--per_device_train_batch_size={args.per_device_train_batch_size}"]
               if args.per_device_train_batch_size else [])
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
        if done.returncode != 0:
            sys.exit(f"memory run of {arm} failed:\n{done.stderr[-3000:]}")
        memory[arm] = json.loads(done.stdout.strip().splitlines()[-1])["rise_mib"]
    import statistics

    import torch

    batch = args.per_device_train_batch_size or params["generations"]
    print(f"[bench_shared_prefix] shape {shape}: {args.model_shape} model, G = {params['generations']} completions of "
          f"{lengths[0]}..{lengths[-1]} tokens on a {prompt}-token page prompt ({params['side']} px), {batch} a "
          f"micro-batch ({-(-params['generations'] // batch)} micro-steps)"
          f"{', vision tower frozen (features cached per step)' if args.frozen_tower else ''}; training phase "
          f"(no-grad forward + forward + backward), median of {args.repeats}, {torch.get_num_threads()} threads")
    base = statistics.median(times["--padding_free"])
    print(f"  {'arm':<16} {'time ms':>9} {'speed-up':>9} {'tokens':>8} {'peak rise MiB':>14}")
    for arm in arms:
        median = statistics.median(times[arm])
        print(f"  {arm:<16} {median * 1000:9.1f} {base / median:8.2f}x {tokens[arm] // 2:8d} {memory[arm]:14.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_shape_arguments(parser)
    parser.add_argument("--padded", action="store_true", help="also TRL's padded block at every shape")
    parser.add_argument("--per_device_train_batch_size", type=int, default=None,
                        help="completions a micro-batch (default: the whole group in one; olmOCR 2 trains 1), the "
                             "window's micro-steps accumulating gradients")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip_memory", action="store_true", help="no peak-memory runs (one process per arm)")
    parser.add_argument("--frozen_tower", action="store_true",
                        help="the vision tower frozen, its features cached per step (--freeze_vision_tower, LoRA): "
                             "the phase without the tower, the same in both arms")
    parser.add_argument("--work", default=None, help="folder for the model (default: a temporary one)")
    parser.add_argument("--memory_arm", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--shape_name", help=argparse.SUPPRESS)
    parser.add_argument("--released", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_arm:
        return memory_child(args)
    import tempfile

    args.work = args.work or tempfile.mkdtemp(prefix="olmocr_rl_bench_")
    for shape in shape_names(args):
        arms = list(ARMS) if shape == "demo" or args.padded else list(ARMS[:2])
        measure(args, shape, arms)


if __name__ == "__main__":
    main()
