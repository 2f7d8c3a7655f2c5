#!/usr/bin/env bash
# Submit an olmocr_rl GRPO run to Slurm: scripts/slurm/submit.sh --help (olmocr_rl/launch/slurm.py).
#   scripts/slurm/submit.sh --nodes 1 --vllm-gpus 1 -- --config configs/x.yaml   # 7 + 1 GPUs
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [[ -z "${PYTHON:-}" && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi  # else python3 on PATH
exec "${PYTHON:-python3}" -m olmocr_rl.launch.slurm submit "$@"
