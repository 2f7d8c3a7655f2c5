"""A full fine-tune through the command line never loads peft (grpo_train.cli): start-up pays for LoRA only in a
LoRA run. The LoRA runs through the command line (test_lora_training.py, test_lora_resume.py) show peft still loads
where it is needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_full_fine_tune_trains_and_saves_without_loading_peft(tiny_model_dir, tmp_path):
    flags = ["--train_bench_data_folder", str(REPO / "bench_data_sample"), "--model_name", str(tiny_model_dir),
             "--output_dir", str(tmp_path / "run"), "--reward_bench", "--max_steps", "2", "--save_steps", "1",
             "--num_generations", "2", "--per_device_train_batch_size", "2", "--max_completion_length", "4",
             "--target_longest_image_dim", "224", "--report_to", "none", "--vllm_mode", "none"]
    code = ("import sys\nfrom olmocr_rl.grpo_train import cli\nstatus = cli(sys.argv[1:])\n"
            "loaded = sorted(name for name, module in sys.modules.items() if name.split('.')[0] == 'peft' and module)\n"
            "print('peft modules loaded:', loaded)\nsys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, *flags], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "peft modules loaded: []" in done.stdout
    assert (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").is_file()
    assert (tmp_path / "run" / "model.safetensors").is_file()
