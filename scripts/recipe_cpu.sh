#!/usr/bin/env bash
# olmOCR 2's recipe on a CPU, one command: generated pages -> synth -> the teacher's faulty transcripts -> a small
# reading model built and warm-started -> GRPO on the unit tests (plain and --olmorl, over seeds, and a sign-flipped
# control) -> evaluation on held-out pages -> paired comparisons -> soups -> outputs/recipe/report.md.
# Resumable: run it again after a stop and finished stages are kept (python -m olmocr_rl.recipe --list).
# Extra arguments go to python -m olmocr_rl.recipe, e.g. `bash scripts/recipe_cpu.sh --until sft` (docs/recipe.md).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$(bash "$repo_root/scripts/setup_env.sh" | tail -n 1)"
cd "$repo_root"
if ! "$python" -c "import olmocr_rl.synth.render as r; r.check_setup()" 2>/dev/null; then
  echo "[recipe] setting up the browser and KaTeX for synth (bash scripts/setup_browser.sh)"
  bash scripts/setup_browser.sh
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export WANDB_MODE="${WANDB_MODE:-offline}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # GRPO and evaluation: one thread; the warm start: every core (--sft_threads)
exec "$python" -m olmocr_rl.recipe "$@"
