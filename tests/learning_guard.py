"""The learning guard (tests/integration/test_learning_guard.py): a task the tiny model learns to read within a CI
budget, the GRPO run that must make it read held-out pages better, and the bugs that must stop it.

The task. A page is one of :data:`WORDS` printed in Pillow's built-in font (no system font needed) on a 112 px
page, starting on an image-token cell (28 px) in a random row and column, at a random grey, with random specks
and faint lines: no two pages are the same image. Its olmOCR-bench tests are two ``present`` tests of its word,
one on the text's first ``len(word)`` characters and one on its last: the word alone passes both (reward 1),
another word or nothing neither (0), the word with another word before or after it one of the two (0.5: writing
several words gains nothing over one). Train and held-out pages are drawn from different seeds: the held-out images were never
trained on (same distribution, not easier).

The model. The tiny Qwen2.5-VL (``tiny_model``, ``--tokenizer chars``: the word is spelled a byte a token), its
linear weights drawn again at standard deviation 0.1, then supervised steps (page -> word) until it gives the
right first letter a probability of 0.4 on the train pages (chance: 1 in 8): a reader with room to improve.
Measured on four words: at the preset's own 0.02 the image moves the first letter's logits by about 0.01, and 400
supervised steps (batches of 8, learning rates 1e-3 to 5e-3) left the model at chance; at 0.1 it reads held-out
pages after about 60 (all of them after 100). Words at random pixel offsets instead of on the token grid stayed at
chance as well.

The run. ``python -m olmocr_rl.grpo_train`` in-process on the train pages (:data:`GRPO_FLAGS`: 10 steps of 4 pages
x 8 samples, the bench reward alone), then ``olmocr_rl.evaluate`` (the HF backend, model-only) on the held-out
pages before and after: :func:`held_out_reading` is the share of the pages' ``present`` tests that the sampled
transcriptions (4 a page, temperature 1) pass.

The bugs (:data:`MUTATIONS`), each applied to the real code path: the reward's sign flipped (``--reward_bench
-1``), every completion scored against the tests of the next page in its batch, and the advantages handed to the
loss permuted across the batch's completions.

``python tests/learning_guard.py --seeds 0 1 2 --work DIR`` runs the guard and every mutation per seed and prints
each held-out gain (docs/learning_signal.md has a run).
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

#: The words a page shows (distinct first letters: the first letter the model spells decides the word).
WORDS = ("ox", "sun", "jazz", "kettle", "fig", "moth", "yard", "bell")
#: The page's side in pixels: the tiny model's 16-image-token budget (112 x 112), rendered at this size.
SIDE = 112
#: An image token's side in pixels (2 x 2 patches of 14 px), and the words' font size.
CELL, FONT_PX = 28, 24
#: Train and held-out pages (each word in turn: balanced).
TRAIN_PAGES, HELD_OUT_PAGES = 64, 32
#: GRPO's group size (samples of a page) and pages per optimizer step.
G, PAGES_PER_STEP = 8, 4
#: The guard's GRPO run (the rest: the CLI's defaults).
GRPO_FLAGS = ("--reward_bench", "1", "--num_generations", str(G), "--per_device_train_batch_size",
              str(G * PAGES_PER_STEP), "--max_steps", "10", "--learning_rate", "3e-4", "--warmup_steps", "0",
              "--max_completion_length", "8", "--temperature", "1.0", "--target_longest_image_dim", str(SIDE),
              "--logging_steps", "1", "--save_steps", "100000", "--report_to", "none", "--dataloader_num_workers", "0")
#: The held-out measurement: samples a page, at the training temperature.
EVAL_SAMPLES = 4


def page_image(word: str, rng: random.Random):
    """One page: ``word`` starting on an image-token cell in a random row and column, at a random grey, with random
    specks and faint lines (a PIL RGB image)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (SIDE, SIDE), 255)
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(0, 2)):  # faint straight lines across the page
        draw.line([(0, rng.randrange(SIDE)), (SIDE, rng.randrange(SIDE))], fill=rng.randint(190, 230), width=1)
    font = ImageFont.load_default(size=FONT_PX)
    left, top, right, bottom = draw.textbbox((0, 0), word, font=font)
    columns, rows = (SIDE - (right - left) - 4) // CELL, (SIDE - (bottom - top) - 4) // CELL
    x = CELL * rng.randint(0, columns) + 2 - left
    y = CELL * rng.randint(0, rows) + 2 - top
    draw.text((x, y), word, fill=rng.randint(0, 70), font=font)
    pixels = image.load()
    for _ in range(rng.randint(30, 90)):  # specks
        pixels[rng.randrange(SIDE), rng.randrange(SIDE)] = rng.randint(60, 200)
    return image.convert("RGB")


def draw_pages(count: int, seed: int) -> list[tuple[str, object]]:
    """``count`` pages, the words in turn, each image drawn from ``seed``: ``(word, image)`` pairs."""
    rng = random.Random(seed)
    return [(WORDS[i % len(WORDS)], page_image(WORDS[i % len(WORDS)], rng)) for i in range(count)]


def _reference(word: str) -> str:
    """A page's reference transcription: the front matter, then the word (the bench folder's claude_original/)."""
    from olmocr_rl.data.front_matter import PageResponse, format_front_matter

    return format_front_matter(PageResponse(primary_language="en", is_rotation_valid=True, rotation_correction=0,
                                            is_table=False, is_diagram=False, natural_text=word)) + "\n"


def write_bench(folder: Path, pages: Sequence[tuple[str, object]], prefix: str) -> Path:
    """A bench folder of ``pages``: ``pdfs/<prefix>NN.pdf`` (the image as a one-page PDF), ``guard.jsonl`` (each
    page's two ``present`` tests) and ``claude_original/`` (each page's reference)."""
    (folder / "pdfs").mkdir(parents=True, exist_ok=True)
    (folder / "claude_original").mkdir(exist_ok=True)
    lines = []
    for i, (word, image) in enumerate(pages):
        name = f"{prefix}{i:02d}"
        image.save(folder / "pdfs" / f"{name}.pdf", "PDF", resolution=72.0)
        # the word, and nothing else: it opens and it ends the page's text
        lines += [{"pdf": f"{name}.pdf", "page": 1, "id": f"{name}_{end}", "type": "present", "text": word,
                   f"{end}_n": len(word)} for end in ("first", "last")]
        (folder / "claude_original" / f"{name}_page1_pg1_repeat1.md").write_text(_reference(word), encoding="utf-8")
    (folder / "guard.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return folder


def _collate(examples: list[dict]) -> dict:
    """Encoded examples (``olmocr_rl.model.warm_start.encode_examples``) as one right-padded batch."""
    import torch

    width = max(e["input_ids"].shape[1] for e in examples)

    def pad(key: str, value: int):
        return torch.cat([torch.nn.functional.pad(e[key], (0, width - e[key].shape[1]), value=value)
                          for e in examples])

    batch = {"input_ids": pad("input_ids", 0), "attention_mask": pad("attention_mask", 0), "labels": pad("labels", -100),
             "pixel_values": torch.cat([e["pixel_values"] for e in examples]),
             "image_grid_thw": torch.cat([e["image_grid_thw"] for e in examples])}
    if "mm_token_type_ids" in examples[0]:
        batch["mm_token_type_ids"] = pad("mm_token_type_ids", 0)
    return batch


def warm_start(model_dir: Path, bench: Path, *, seed: int, reads: float = 0.4, batch: int = 8,
               learning_rate: float = 1e-3, init_std: float = 0.1, check_every: int = 1,
               max_steps: int = 400) -> dict:
    """Draw the model's linear weights again (standard deviation ``init_std``), then train it in place on
    ``bench``'s pages (page image -> the word, no front matter) until it reads about ``reads`` of them: the mean
    probability it gives the right first letter on the first 16 pages, checked every ``check_every`` steps. Batches
    hold as many pages of each word as they can. Returns the steps taken and that probability."""
    import torch

    from olmocr_rl.data.dataset import OlmOCRBenchDataset
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.model.warm_start import encode_examples

    rng = random.Random(seed)
    torch.manual_seed(seed)
    model, processor = load_model_and_processor(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, init_std)
    dataset = OlmOCRBenchDataset(str(bench), processor, target_longest_image_dim=SIDE)
    items = [dataset[i] for i in range(len(dataset))]
    for item in items:
        item["claude_original"] = item["claude_original"].strip().rsplit("\n", 1)[-1]  # the word
    examples = encode_examples(items, processor)
    by_word: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_word.setdefault(item["claude_original"], []).append(i)

    probe = _collate(examples[:16])
    starts = [int((e["labels"][0] != -100).nonzero()[0]) for e in examples[:16]]
    letters = sorted(int(processor.tokenizer.convert_tokens_to_ids(word[0])) for word in WORDS)

    def reading() -> float:
        model.eval()
        with torch.no_grad():
            logits = model(**{k: v for k, v in probe.items() if k != "labels"}).logits
        model.train()
        right = [logits[i, start - 1, letters].softmax(-1)[letters.index(int(probe["labels"][i, start]))]
                 for i, start in enumerate(starts)]
        return float(sum(right) / len(right))

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    steps, now = 0, reading()
    while now < reads and steps < max_steps:
        for _ in range(check_every):
            chosen = [i for word in WORDS for i in rng.sample(by_word[word], batch // len(WORDS))]
            model(**_collate([examples[i] for i in chosen])).loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
        now = reading()
    model.eval()
    model.save_pretrained(model_dir)
    return {"steps": steps, "reads": now}


@dataclass(frozen=True)
class Task:
    """A built guard task: its bench folders, the warm-started model and what it read held out."""

    train: Path
    held_out: Path
    model: Path
    warm_start: dict
    before: float


def build_task(work: Path, seed: int = 0) -> Task:
    """Pages (train and held out), the tiny model warm-started on the train pages, its held-out reading."""
    from olmocr_rl.tiny_model import build_tiny_model

    train = write_bench(work / "train", draw_pages(TRAIN_PAGES, 1000 + seed), "t")
    held_out = write_bench(work / "held_out", draw_pages(HELD_OUT_PAGES, 2000 + seed), "h")
    model = build_tiny_model(work / "warm", seed=seed, tokenizer="chars")
    info = warm_start(model, train, seed=seed)
    return Task(train, held_out, model, info, held_out_reading(model, held_out, work / "eval_warm"))


def held_out_reading(model: Path, held_out: Path, out: Path) -> float:
    """``olmocr_rl.evaluate`` of ``model`` on the held-out pages (HF backend, :data:`EVAL_SAMPLES` samples a page at
    temperature 1): the share of the ``present`` tests that the transcriptions pass."""
    from olmocr_rl.evaluation.run import evaluate

    result = evaluate(str(model), str(held_out), outputs=str(out), num_samples=EVAL_SAMPLES, temperature=1.0,
                      max_new_tokens=8, batch_size=HELD_OUT_PAGES, seed=0, overwrite=True)
    tests = [t for t in result["tests"].values() if t["type"] == "present"]
    assert len(tests) == 2 * HELD_OUT_PAGES and all(t["repeats"] == EVAL_SAMPLES for t in tests)
    return sum(t["repeat_passes"] for t in tests) / sum(t["repeats"] for t in tests)


def grpo(task: Task, out: Path, seed: int = 0, extra: Sequence[str] = ()) -> list[float]:
    """The guard's GRPO run on the train pages (in-process, the training CLI's ``main``); each step's train reward."""
    from olmocr_rl import grpo_train

    code = grpo_train.main(["--train_bench_data_folder", str(task.train), "--model_name", str(task.model),
                            "--output_dir", str(out), "--seed", str(seed), *GRPO_FLAGS, *extra])
    assert code == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["bench_reward/overall_pass_rate"] for r in records if "bench_reward/overall_pass_rate" in r]


# --- the bugs the guard must catch ---------------------------------------------------------------------------------

@contextlib.contextmanager
def _completions_scored_against_the_next_page() -> Iterator[None]:
    """Every completion scored against the tests of the next page of its batch (its group's columns rolled by G)."""
    from olmocr_rl.rewards.bench_reward import BenchRewardScorer

    original = BenchRewardScorer.rewards

    def rewards(self, completions, **columns):
        for key in ("pdf_path", "jsonl_file", "jsonl_files", "test_ids"):
            if columns.get(key) is not None:
                column = list(columns[key])
                columns[key] = column[G:] + column[:G]
        return original(self, completions, **columns)

    BenchRewardScorer.rewards = rewards
    try:
        yield
    finally:
        BenchRewardScorer.rewards = original


@contextlib.contextmanager
def _advantages_permuted() -> Iterator[None]:
    """The advantages TRL computed, handed to the loss permuted across the batch's completions (a fixed seed)."""
    import torch

    from olmocr_rl.trainer.plain import PlainGRPOTrainer

    original = PlainGRPOTrainer._score_generation_batch
    generator = torch.Generator().manual_seed(0)

    def score(self, inputs):
        output, keep = original(self, inputs)
        advantages = output["advantages"]
        output["advantages"] = advantages[torch.randperm(len(advantages), generator=generator)]
        return output, keep

    PlainGRPOTrainer._score_generation_batch = score
    try:
        yield
    finally:
        PlainGRPOTrainer._score_generation_batch = original


#: name -> (extra GRPO flags, the patch that applies it)
MUTATIONS: dict[str, tuple[tuple[str, ...], Callable[[], contextlib.AbstractContextManager]]] = {
    "reward_sign_flipped": (("--reward_bench", "-1"), contextlib.nullcontext),
    "completions_scored_against_the_wrong_page": ((), _completions_scored_against_the_next_page),
    "advantages_permuted": ((), _advantages_permuted),
}


def run(task: Task, out: Path, mutation: str | None = None, seed: int = 0, flags: Sequence[str] = ()) -> dict:
    """GRPO (with ``mutation`` applied, if any; ``flags`` after the guard's own), then the held-out reading: the gain
    over the warm start."""
    extra, patch = MUTATIONS[mutation] if mutation else ((), contextlib.nullcontext)
    shutil.rmtree(out, ignore_errors=True)
    with patch():
        rewards = grpo(task, out / "run", seed, [*flags, *extra])
    after = held_out_reading(out / "run", task.held_out, out / "eval")
    return {"mutation": mutation or "none", "before": task.before, "after": after, "gain": after - task.before,
            "train_reward_first_last": (rewards[0], rewards[-1])}


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    parser = argparse.ArgumentParser(description="the learning guard per seed: the held-out gain of GRPO and of "
                                                 "each mutation (tests/integration/test_learning_guard.py)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (emptied per seed)")
    parser.add_argument("--mutations", nargs="*", default=list(MUTATIONS), choices=list(MUTATIONS))
    parser.add_argument("--grpo_flags", default="", help="more training flags, after the guard's own (which they "
                                                         "override), e.g. '--max_steps 8 --learning_rate 4e-4'")
    args = parser.parse_args(argv)
    for seed in args.seeds:
        work = args.work / f"seed{seed}"
        shutil.rmtree(work, ignore_errors=True)
        started = time.perf_counter()
        task = build_task(work, seed)
        print(f"seed {seed}: warm start {task.warm_start}, held-out reading {task.before:.3f} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        for mutation in [None, *args.mutations]:
            started = time.perf_counter()
            result = run(task, work / (mutation or "none"), mutation, seed, args.grpo_flags.split())
            print(f"seed {seed} {result['mutation']:>42}: held-out {result['before']:.3f} -> {result['after']:.3f}"
                  f" gain {result['gain']:+.3f} (train reward {result['train_reward_first_last'][0]:.2f} -> "
                  f"{result['train_reward_first_last'][1]:.2f}, {time.perf_counter() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
