#!/usr/bin/env bash
# The project's test command: sets up .venv (see scripts/setup_env.sh) and runs the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/test_bench_present.py -x`.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$(bash "$repo_root/scripts/setup_env.sh" | tail -n 1)"
cd "$repo_root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# One BLAS thread: the tiny models gain nothing from more, and idle spinning threads slow a busy machine.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$python" -m pytest "$@"
