#!/usr/bin/env bash
# Launch an olmocr_rl GRPO run on Beaker: build/reuse the image, submit the experiment.
#   scripts/grpotrainer-beaker.sh --gpus 8 --vllm-gpus 1 --preemptible --name NAME -- TRAINER_ARGS...
# Options and defaults: scripts/grpotrainer-beaker.sh --help (olmocr_rl/launch/beaker.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z "${PYTHON:-}" && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi  # else python3 on PATH
exec "${PYTHON:-python3}" -m olmocr_rl.launch.beaker "$@"
