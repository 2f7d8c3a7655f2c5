"""The recipe's warm start: a small model learns to read printed lines, then to transcribe pages as a teacher did.

    python -m olmocr_rl.recipe.sft models/base --bench recipe/bench/train --transcripts recipe/teacher/train \\
        --out recipe/models/sft

Two stages on the training pages only (the held-out pages are never opened):

1. **Lines.** Each printed run of a page (:mod:`olmocr_rl.recipe.strips`), cut out of the page image, with the text
   the PDF's text layer holds, then stacks of 2-4 lines. This stands in for the reading a released VLM brings from
   its pretraining (olmOCR 2 starts from Qwen2.5-VL-7B, which reads already); a line is a dozen image tokens.
2. **Pages.** The whole page image, answered with the teacher's transcription (front matter and body), faults
   included (:mod:`olmocr_rl.recipe.teacher`): what olmOCR 2's SFT data was. A share of each batch stays lines.

Two training aids, used only here (the model saved is a plain checkpoint; docs/recipe.md has the measurements
that call for them): a small model learns *where* to read next from the answer alone only slowly, because nothing
in a Qwen2.5-VL image token says where on the page it lies. So

- **guided attention**: one attention head of the last layer is trained to look, before each character, at the
  image token that shows it (the grid and the text layer say which; a transcription is aligned with the printed
  text, and its markup and front matter are left unguided), a cross-entropy on that head's attention weights;
- **glyph targets**: a linear probe on the vision tower's image tokens is trained to name the two characters each
  token shows (or blanks), so the tower learns the glyphs without waiting for the language model. The probe is
  dropped after training.

Every answer starts with the front matter, so a line's answer is the default front matter and the line. The
same seed gives the same weights. The schedule is :class:`Schedule`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Schedule", "warm_start_reader", "main"]


@dataclass(frozen=True)
class Schedule:
    """What the warm start does, step by step."""

    line_steps: int = 2000  # stage 1: batches of printed lines
    page_steps: int = 3000  # stage 2: pages (with line_share of lines); 1,500 read held out present 0.20, 3,000 0.53
    line_batch: int = 16  # lines a stage-1 batch
    page_batch: int = 8  # examples a stage-2 batch
    line_share: float = 0.25  # share of a stage-2 batch that is lines (keeps the reading sharp)
    block_share: float = 0.5  # share of lines that are stacks of 2-4 lines, from halfway through stage 1 on
    learning_rate: float = 2e-3  # peak; linear warm-up, then cosine down to a tenth
    warmup_steps: int = 50
    guide_weight: float = 1.0  # guided attention's loss weight (0: off)
    glyph_weight: float = 1.0  # the glyph probe's loss weight (0: off)
    image_dim: int = 448  # the pages' longest side in pixels, as the GRPO run and the evaluation render them
    seed: int = 0
    log_every: int = 50

    @property
    def steps(self) -> int:
        return self.line_steps + self.page_steps

    def learning_rate_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.learning_rate * (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        return self.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@dataclass
class _Page:
    image: object  # the processed page image (PIL)
    transcript: str  # the teacher's, front matter included
    cells: list  # per character of the transcript, the cell it was read from (None: unguided)
    glyphs: list  # its printed characters (strips.Glyph)
    lines: list  # its printed lines (strips.Strip)
    blocks: list  # its stacks of 2 to 4 lines


def transcript_path(transcripts: str | Path, pdf: str, page: int) -> Path:
    """The teacher's transcription of (pdf, page): laid out as ``claude_original/`` is, under ``transcripts``."""
    from olmocr_rl.data.references import REFERENCE_FOLDER, reference_path

    return Path(transcripts) / reference_path("", pdf, page).relative_to(REFERENCE_FOLDER)


def load_pages(bench: str | Path, transcripts: str | Path, grid: "_Grid", image_dim: int) -> list[_Page]:
    """Every page of ``bench`` with its processed image, the teacher's transcription aligned with its printed text,
    and its printed lines. A page without a transcription is an error naming the file."""
    from olmocr_rl.data.dataset import OlmOCRBenchDataset
    from olmocr_rl.data.front_matter import split_front_matter

    from .strips import align_cells, line_blocks, line_strips, page_glyphs, printed_text, processed_image

    dataset = OlmOCRBenchDataset(str(bench), target_longest_image_dim=image_dim)
    pages = []
    for sample in dataset.samples:
        path = transcript_path(transcripts, sample["pdf"], sample["page"])
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no teacher transcription for {sample['pdf']} page {sample['page']}; "
                                    f"run the teacher on {bench} first (python -m olmocr_rl.recipe.teacher)")
        transcript = path.read_text(encoding="utf-8").strip()
        image = processed_image(sample["pdf_path"], sample["page"], image_dim, grid.min_pixels, grid.max_pixels,
                                factor=grid.row_px)
        glyphs = page_glyphs(sample["pdf_path"], sample["page"], image.size, cell_px=grid.cell_px,
                             row_px=grid.row_px)
        body = split_front_matter(transcript)[1]
        printed, printed_cells = printed_text(glyphs)
        cells = [None] * (len(transcript) - len(body)) + align_cells(body, printed, printed_cells)
        strips = line_strips(glyphs, image.size, cell_px=grid.cell_px, row_px=grid.row_px,
                             min_width_px=grid.min_width_px)
        pages.append(_Page(image, transcript, cells, glyphs, strips, line_blocks(strips)))
    return pages


@dataclass(frozen=True)
class _Grid:
    """The image processor's geometry: a patch (a character cell's width), an image token (a line's height)."""

    cell_px: int
    row_px: int
    min_pixels: int
    max_pixels: int

    @classmethod
    def of(cls, processor) -> "_Grid":
        image_processor = processor.image_processor
        patch = image_processor.patch_size
        size = image_processor.size
        return cls(patch, patch * image_processor.merge_size, size["shortest_edge"], size["longest_edge"])

    @property
    def min_width_px(self) -> int:
        """The narrowest strip one row high that the processor takes as it is."""
        return max(2 * self.row_px, -(-self.min_pixels // self.row_px // self.row_px) * self.row_px)


class _Encoder:
    """(image, answer) -> the model's inputs: labels on the answer and its EOS only; per answer token the image
    token that shows it (guided attention); per image token the ids of the two characters it shows (glyphs)."""

    def __init__(self, processor, grid: _Grid) -> None:
        from olmocr_rl.data.front_matter import PageResponse, format_front_matter
        from olmocr_rl.data.prompts import build_no_anchoring_v4_yaml_prompt

        self.processor, self.grid = processor, grid
        self.tokenizer = processor.tokenizer
        messages = [{"role": "user", "content": [{"type": "text", "text": build_no_anchoring_v4_yaml_prompt()},
                                                 {"type": "image"}]}]
        self.prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        self.line_front_matter = format_front_matter(PageResponse(
            primary_language="en", is_rotation_valid=True, rotation_correction=0, is_table=False, is_diagram=False,
            natural_text=None)).strip() + "\n"
        self._char_ids: dict[str, int | None] = {}
        self.blank = self._char_id(" ")

    def _char_id(self, char: str) -> int | None:
        """The token of a one-token character, else None."""
        if char not in self._char_ids:
            ids = self.tokenizer(char, add_special_tokens=False)["input_ids"]
            self._char_ids[char] = ids[0] if len(ids) == 1 else None
        return self._char_ids[char]

    def __call__(self, image, box, answer: str, cells: list, glyphs: list) -> dict:
        import torch

        from .strips import token_index

        grid = self.grid
        encoded = self.processor(text=[self.prompt], images=[image], return_tensors="pt")
        tokenized = self.tokenizer(answer + self.tokenizer.eos_token, add_special_tokens=False,
                                   return_offsets_mapping=True)
        guide = []
        for start, end in tokenized["offset_mapping"]:
            cell = cells[start] if end == start + 1 and start < len(cells) else None
            where = token_index(cell, box, cell_px=grid.cell_px, row_px=grid.row_px) if cell else None
            guide.append(where[0] if where else -1)
        width, height = (box[2] - box[0]) // grid.row_px, (box[3] - box[1]) // grid.row_px
        glyph_ids = torch.full((width * height, 2), self.blank)
        for glyph in glyphs:
            where = token_index((glyph.row, glyph.col), box, cell_px=grid.cell_px, row_px=grid.row_px)
            if where is not None and glyph.on_grid:
                char_id = self._char_id(glyph.char)
                glyph_ids[where] = -100 if char_id is None else char_id
        example = {"prompt_ids": encoded["input_ids"][0].tolist(), "answer_ids": tokenized["input_ids"],
                   "guide": guide, "glyph_ids": glyph_ids,
                   "pixel_values": encoded["pixel_values"], "image_grid_thw": encoded["image_grid_thw"]}
        if "mm_token_type_ids" in encoded:  # marks image tokens for the 3-D rope positions, as in generation
            example["mm_token_type_ids"] = encoded["mm_token_type_ids"][0].tolist()
        return example

    def line(self, page: _Page, strip) -> dict:
        answer = self.line_front_matter + strip.text
        cells = [None] * len(self.line_front_matter) + list(strip.cells)
        return self(page.image.crop(strip.box), strip.box, answer, cells, page.glyphs)

    def page(self, page: _Page) -> dict:
        box = (0, 0, *page.image.size)
        return self(page.image, box, page.transcript, page.cells, page.glyphs)


def collate(examples: list[dict], pad_id: int, image_pad_id: int) -> tuple[dict, "object", "object"]:
    """Right-padded batch (labels -100 on the prompt and the padding), the guided-attention targets (per position,
    the sequence index of the image token the next token is read from, else -1) and the glyph targets."""
    import torch

    length = max(len(e["prompt_ids"]) + len(e["answer_ids"]) for e in examples)
    input_ids = torch.full((len(examples), length), pad_id)
    labels = torch.full((len(examples), length), -100)
    attention_mask = torch.zeros((len(examples), length), dtype=torch.long)
    types = torch.zeros((len(examples), length), dtype=torch.long)
    guide = torch.full((len(examples), length), -1)
    for row, example in enumerate(examples):
        prompt, answer = example["prompt_ids"], example["answer_ids"]
        ids = prompt + answer
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        labels[row, len(prompt): len(ids)] = torch.tensor(answer)
        first_image_token = prompt.index(image_pad_id)
        for j, target in enumerate(example["guide"]):
            if target >= 0:  # the position before a token is where it is predicted
                guide[row, len(prompt) + j - 1] = first_image_token + target
        if "mm_token_type_ids" in example:
            types[row, : len(example["mm_token_type_ids"])] = torch.tensor(example["mm_token_type_ids"])
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
             "pixel_values": torch.cat([e["pixel_values"] for e in examples]),
             "image_grid_thw": torch.cat([e["image_grid_thw"] for e in examples])}
    if "mm_token_type_ids" in examples[0]:
        batch["mm_token_type_ids"] = types
    return batch, guide, torch.cat([e["glyph_ids"] for e in examples])


def warm_start_reader(model_dir: str | Path, bench: str | Path, transcripts: str | Path, out: str | Path,
                      schedule: Schedule = Schedule(), *, log=print) -> dict:
    """Train the model of ``model_dir`` on ``bench``'s pages and write it (with its processor) to ``out``.

    Returns the summary that is also written to ``out/olmocr_rl_sft.json``.
    """
    import torch

    from olmocr_rl.model.loading import load_model_and_processor

    random.seed(schedule.seed)
    torch.manual_seed(schedule.seed)
    model, processor = load_model_and_processor(str(model_dir), dtype=torch.float32)
    grid = _Grid.of(processor)
    started = time.time()
    pages = load_pages(bench, transcripts, grid, schedule.image_dim)
    lines = [(page, strip) for page in pages for strip in page.lines]
    if not lines:
        raise ValueError(f"{bench}: no printed line on the grid in any page; the recipe's pages print on a grid "
                         "(python -m olmocr_rl.recipe.pages)")
    blocks = [(page, block) for page in pages for block in page.blocks] or lines
    guided = sum(c is not None for page in pages for c in page.cells)
    log(f"[sft] {len(pages)} pages ({guided / max(1, sum(len(p.transcript) for p in pages)):.0%} of the "
        f"transcriptions' characters guided), {len(lines)} printed lines, {len(blocks)} stacks of lines "
        f"({time.time() - started:.0f} s to read them); {schedule.line_steps} line steps x {schedule.line_batch}, "
        f"then {schedule.page_steps} page steps x {schedule.page_batch} ({schedule.line_share:.0%} lines)")
    encode = _Encoder(processor, grid)
    rng = random.Random(schedule.seed)
    probe = torch.nn.Linear(model.config.text_config.hidden_size, 2 * len(processor.tokenizer))  # the glyph probe: dropped after training
    features = {}
    hook = model.model.visual.register_forward_hook(lambda module, args, output: features.update(
        tokens=output.pooler_output))
    if schedule.guide_weight > 0:
        model.set_attn_implementation("eager")  # attention weights, for the guided head
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(probe.parameters()), lr=schedule.learning_rate,
                                  betas=(0.9, 0.98), weight_decay=0.01)
    model.train()
    pad_id = processor.tokenizer.pad_token_id
    image_pad_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    history: dict[str, list[float]] = {"loss": [], "guide": [], "glyphs": []}
    start = time.time()
    for step in range(schedule.steps):
        stage = "lines" if step < schedule.line_steps else "pages"
        block_share = schedule.block_share if step >= schedule.line_steps // 2 else 0.0

        def some_lines(n: int) -> list[dict]:
            return [encode.line(*rng.choice(blocks if rng.random() < block_share else lines)) for _ in range(n)]

        if stage == "lines":
            examples = some_lines(schedule.line_batch)
        else:
            n_lines = round(schedule.page_batch * schedule.line_share)
            examples = [encode.page(rng.choice(pages)) for _ in range(schedule.page_batch - n_lines)]
            examples += some_lines(n_lines)
        for group in optimizer.param_groups:
            group["lr"] = schedule.learning_rate_at(step)
        loss = _loss(model, probe, features, collate(examples, pad_id, image_pad_id), schedule, history)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        if done % schedule.log_every == 0 or done == schedule.steps:
            elapsed = time.time() - start
            means = "  ".join(f"{name} {sum(v[-schedule.log_every:]) / len(v[-schedule.log_every:]):.3f}"
                              for name, v in history.items() if v)
            log(f"[sft] step {done}/{schedule.steps} ({stage}) {means}  lr {schedule.learning_rate_at(step):.2e}  "
                f"{elapsed:.0f} s, {elapsed / done * (schedule.steps - done) / 60:.1f} min left")
    hook.remove()
    model.eval()
    if schedule.guide_weight > 0:
        model.set_attn_implementation("sdpa")
    out = Path(out)
    _save(model, Path(model_dir), out)
    final = {k: round(sum(v[-schedule.log_every:]) / len(v[-schedule.log_every:]), 4) for k, v in history.items() if v}
    summary = {"schedule": asdict(schedule), "pages": len(pages), "printed_lines": len(lines),
               "stacks_of_lines": len(blocks), "guided_characters": guided, "seconds": round(time.time() - start, 1),
               "final": final, "bench": str(bench), "transcripts": str(transcripts), "base_model": str(model_dir)}
    (out / "olmocr_rl_sft.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _loss(model, probe, features: dict, batch: tuple, schedule: Schedule, history: dict):
    """One batch's loss: the answer's cross-entropy, plus the guided head's and the glyph probe's (each logged)."""
    import torch

    inputs, guide, glyph_ids = batch
    output = model(**inputs, output_attentions=schedule.guide_weight > 0)
    loss = output.loss
    history["loss"].append(output.loss.item())
    if schedule.guide_weight > 0:
        weights = output.attentions[-1][:, 0]  # the last layer's first head: (batch, query, key)
        rows, queries = (guide >= 0).nonzero(as_tuple=True)
        guide_loss = -(weights[rows, queries, guide[rows, queries]] + 1e-6).log().mean()
        loss = loss + schedule.guide_weight * guide_loss
        history["guide"].append(guide_loss.item())
    if schedule.glyph_weight > 0:
        logits = probe(features["tokens"]).view(-1, probe.out_features // 2)
        glyph_loss = torch.nn.functional.cross_entropy(logits, glyph_ids.view(-1), ignore_index=-100)
        loss = loss + schedule.glyph_weight * glyph_loss
        history["glyphs"].append(glyph_loss.item())
    return loss


def _save(model, model_dir: Path, out: Path) -> None:
    """The processor's and tokenizer's files from ``model_dir``, then the trained weights and config."""
    out.mkdir(parents=True, exist_ok=True)
    for path in model_dir.iterdir():
        if path.is_file() and not path.name.endswith(".safetensors") and path.name != "config.json":
            shutil.copy2(path, out / path.name)
    model.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    defaults = Schedule()
    parser = argparse.ArgumentParser(prog="python -m olmocr_rl.recipe.sft", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the model folder to start from (python -m olmocr_rl.tiny_model --shape reader)")
    parser.add_argument("--bench", required=True, help="the training bench folder (python -m olmocr_rl.synth)")
    parser.add_argument("--transcripts", required=True,
                        help="the teacher's transcriptions of its pages (python -m olmocr_rl.recipe.teacher)")
    parser.add_argument("--out", required=True, help="where the warm-started model is written")
    for field, help_text in (("line_steps", "stage-1 steps (printed lines)"), ("page_steps", "stage-2 steps (pages)"),
                             ("line_batch", "lines a stage-1 batch"), ("page_batch", "examples a stage-2 batch"),
                             ("image_dim", "the pages' longest side in pixels"), ("seed", "the seed"),
                             ("warmup_steps", "linear warm-up steps"), ("log_every", "steps between progress lines")):
        parser.add_argument(f"--{field}", type=int, default=getattr(defaults, field),
                            help=f"{help_text} (default {getattr(defaults, field)})")
    for field, help_text in (("line_share", "share of a stage-2 batch that is lines"),
                             ("block_share", "share of the lines that are stacks of 2-4 lines, from halfway "
                                             "through stage 1"),
                             ("learning_rate", "peak learning rate"),
                             ("guide_weight", "guided attention's loss weight (0: off)"),
                             ("glyph_weight", "the glyph probe's loss weight (0: off)")):
        parser.add_argument(f"--{field}", type=float, default=getattr(defaults, field),
                            help=f"{help_text} (default {getattr(defaults, field)})")
    args = parser.parse_args(argv)
    schedule = Schedule(**{k: getattr(args, k) for k in asdict(defaults)})
    for flag, path, fix in (("the model folder", Path(args.model) / "config.json",
                             "build one with python -m olmocr_rl.tiny_model OUT --shape reader --tokenizer chars"),
                            ("--bench", Path(args.bench), "pass a folder python -m olmocr_rl.synth wrote"),
                            ("--transcripts", Path(args.transcripts), "run python -m olmocr_rl.recipe.teacher first")):
        if not path.exists():
            parser.error(f"{flag}: {path} does not exist; {fix}")
    from olmocr_rl.model.loading import ModelLoadError

    try:
        summary = warm_start_reader(args.model, args.bench, args.transcripts, args.out, schedule)
    except (FileNotFoundError, ValueError, ModelLoadError) as exc:  # BenchDataError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[sft] wrote {args.out} in {summary['seconds'] / 60:.1f} min; final {summary['final']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
