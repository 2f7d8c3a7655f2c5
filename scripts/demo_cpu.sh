#!/usr/bin/env bash
# The CPU demo: set up .venv (shared with the test command), build + warm-start the tiny model if
# absent, then run the training CLI on bench_data_sample/ with configs/tiny-cpu.yaml.
# Extra arguments go to the CLI and override the config, e.g. `bash scripts/demo_cpu.sh --olmorl`.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$(bash "$repo_root/scripts/setup_env.sh" | tail -n 1)"
cd "$repo_root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export WANDB_MODE="${WANDB_MODE:-offline}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
model_dir="${OLMOCR_RL_DEMO_MODEL:-models/tiny-sft}"
if [[ ! -f "$model_dir/config.json" ]]; then
  echo "[demo] building the tiny model in $model_dir (random weights + supervised warm start on bench_data_sample)"
  "$python" -m olmocr_rl.tiny_model "$model_dir" --sft bench_data_sample --sft_pages simple_lines --sft_steps 40
fi
exec "$python" -m olmocr_rl.grpo_train --config configs/tiny-cpu.yaml --model_name "$model_dir" "$@"
