#!/usr/bin/env bash
# One-command check of the training path with its numbers (see olmocr_rl/gpu_check.py).
# On a CUDA machine: real Qwen2.5-VL-3B shape, bf16, 1288 px, G=8, 256 tokens, plain GRPO + OlmoRL.
# On CPU: tiny model and sizes, under a minute. Extra arguments go to `python -m olmocr_rl.gpu_check`.
# Uses .venv when it exists (CPU machines); otherwise the current python3 (GPU images with the stack
# preinstalled; set PYTHON=... to choose).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=offline
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m olmocr_rl.gpu_check "$@"
