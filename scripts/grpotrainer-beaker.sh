#!/usr/bin/env bash
# Launch an olmocr_rl GRPO run on Beaker: build/reuse the image, submit the experiment.
#   scripts/grpotrainer-beaker.sh --gpus 8 --vllm-gpus 1 --preemptible --name NAME -- TRAINER_ARGS...
# Options and defaults: scripts/grpotrainer-beaker.sh --help (olmocr_rl/launch/beaker.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
exec "$python" -m olmocr_rl.launch.beaker "$@"
