"""Supervised warm start of a (tiny) model on a bench folder's reference transcriptions.

    python -m olmocr_rl.tiny_model models/tiny-sft --sft bench_data_sample

GRPO only learns where a group's samples differ in reward. A random policy never passes a test, so
every group is zero-signal; a policy trained to convergence passes everything, so again no signal.
This module trains the tiny model briefly on (page image -> ``claude_original`` markdown, front matter
included) so that its *sampled* transcriptions pass some tests but not all: a policy with room to
improve. The same seed gives the same weights.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path

logger = logging.getLogger(__name__)


def encode_examples(dataset, processor) -> list[dict]:
    """Tokenise (prompt + image -> reference) pairs; labels cover only the answer and its EOS.

    The answer is tokenised on its own and appended to the prompt's ids, exactly as generation sees it
    (tokenising prompt + answer as one string would let BPE merge across the boundary, e.g. "\n---").
    """
    import torch

    examples = []
    for i in range(len(dataset)):
        item = dataset[i]
        reference = item.get("claude_original")
        if not reference:
            continue
        prompt_text = processor.apply_chat_template(item["prompt"], add_generation_prompt=True, tokenize=False)
        encoded = processor(text=[prompt_text], images=[item["image"]], return_tensors="pt")
        answer = processor.tokenizer(reference.strip() + processor.tokenizer.eos_token, add_special_tokens=False,
                                     return_tensors="pt")["input_ids"]
        prompt_ids = encoded["input_ids"]
        encoded["input_ids"] = torch.cat([prompt_ids, answer], dim=1)
        encoded["attention_mask"] = torch.ones_like(encoded["input_ids"])
        if "mm_token_type_ids" in encoded:  # marks image tokens for the 3-D rope positions, as in generation
            types = encoded["mm_token_type_ids"]
            encoded["mm_token_type_ids"] = torch.cat([types, torch.zeros_like(answer)], dim=1)
        labels = encoded["input_ids"].clone()
        labels[:, : prompt_ids.shape[1]] = -100
        encoded["labels"] = labels
        examples.append(dict(encoded))
    return examples


def warm_start(model_dir: str | Path, bench_dir: str | Path, *, seed: int = 0, steps: int = 120,
               learning_rate: float = 2e-3, image_dim: int = 448, pages: str | None = None,
               log_every: int = 20) -> dict:
    """Fine-tune the model in ``model_dir`` in place on ``bench_dir``'s references; returns a summary.

    ``image_dim`` is the rendered page size; use the one the GRPO run will use (configs/tiny-cpu.yaml: 448).
    ``pages`` is a page-name regex (as ``--pages`` of the training CLI) restricting what is learned.
    """
    import torch

    from olmocr_rl.data.dataset import OlmOCRBenchDataset
    from olmocr_rl.model.loading import load_model_and_processor

    random.seed(seed)
    torch.manual_seed(seed)
    model, processor = load_model_and_processor(str(model_dir), dtype=torch.float32)
    dataset = OlmOCRBenchDataset(str(bench_dir), processor, target_longest_image_dim=image_dim, pages=pages)
    examples = encode_examples(dataset, processor)
    if not examples:
        raise ValueError(f"{bench_dir}: no page has a claude_original/ reference to learn from")

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
    order: list[int] = []
    start, losses = time.time(), []
    for step in range(steps):
        if not order:
            order = list(range(len(examples)))
            random.shuffle(order)
        batch = examples[order.pop()]
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % log_every == 0 or step + 1 == steps:
            recent = losses[-log_every:]
            print(f"[sft] step {step + 1}/{steps} loss {sum(recent) / len(recent):.3f} ({time.time() - start:.0f}s)")
    model.eval()
    model.save_pretrained(model_dir)
    summary = {"sft_bench": str(bench_dir), "sft_page_regex": pages, "sft_steps": steps, "sft_seed": seed,
               "sft_learning_rate": learning_rate, "sft_pages": len(examples),
               "sft_final_loss": sum(losses[-log_every:]) / len(losses[-log_every:])}
    info_file = Path(model_dir) / "olmocr_rl_tiny_model.json"
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    info.update(summary)
    info_file.write_text(json.dumps(info, indent=2) + "\n")
    return summary
