#!/usr/bin/env bash
# What one Beaker replica runs inside the olmocr-grpo image (the experiment spec's command):
# syncs s3:// inputs, starts and health-checks the vLLM server, runs `accelerate launch`.
# Options: olmocr_rl/launch/beaker_task.py. GRPO_DRY_RUN=1 prints the commands instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [[ -z "${PYTHON:-}" && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi  # else python3 on PATH
exec "${PYTHON:-python3}" -m olmocr_rl.launch.beaker_task "$@"
