"""The tiny model trains: two steps of TRL's GRPOTrainer on CPU change its parameters and write a checkpoint."""

from __future__ import annotations


import torch
from PIL import Image, ImageDraw

from olmocr_rl.model.loading import load_model_and_processor


def _page(text: str) -> Image.Image:
    image = Image.new("RGB", (180, 240), "white")
    ImageDraw.Draw(image).text((12, 12), text, fill="black")
    return image


def test_two_grpo_steps_change_parameters_and_write_checkpoint(tiny_model_dir, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, processor = load_model_and_processor(str(tiny_model_dir))
    prompt = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    dataset = Dataset.from_list([
        {"prompt": prompt, "image": _page("Page one")},
        {"prompt": prompt, "image": _page("Page two")},
    ])

    def reward_length(completions, **kwargs):
        return [float(len(c[0]["content"])) for c in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
        max_completion_length=8, max_steps=2, save_steps=2, learning_rate=1e-2, report_to="none",
        use_cpu=True, bf16=False, logging_steps=1, seed=0,
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = GRPOTrainer(model=model, args=args, processing_class=processor,
                          reward_funcs=reward_length, train_dataset=dataset)
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "no parameter changed after two GRPO steps"
    assert any("visual" not in n for n in changed)
    assert (tmp_path / "out" / "checkpoint-2" / "model.safetensors").is_file()
    assert trainer.state.global_step == 2
