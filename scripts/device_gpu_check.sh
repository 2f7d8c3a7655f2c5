#!/usr/bin/env bash
# The one prepared GPU run (a few minutes) for a lent GPU machine (Python 3.12 with torch/transformers/accelerate
# preinstalled, no trl/datasets/pypdfium2/vLLM): install the carried wheels (.whl/, made by
# scripts/device_wheels.sh) to /tmp/site, then `python -m olmocr_rl.gpu_check`:
#   - the table: plain GRPO with the defaults, then the arms no GPU has measured yet (--olmorl and LoRA with the
#     defaults, the vision speed-ups alone), then the defaults but --shared_prefix and every speed-up off (stock),
#     both measured on 2026-12-04, as long as the time budget lasts; an arm that fails is listed and the next one
#     runs;
#   - torch.profiler over the last step of the first all-speed-ups arm, per phase (generate / reward / train):
#     top operators, GPU busy share, launch-bound or compute-bound;
#   - the 7B row (grpo/all) if the budget still allows.
# Writes to $OUT: gpu_check.json, gpu_check.log, and gpu_check.md (docs/gpu_check.md with the new dated section
# appended; copy it over docs/gpu_check.md), rewritten after every arm, so a run stopped at its time limit keeps the
# arms it finished. Override with ARMS=..., STEPS=..., BUDGET_S=... (seconds after
# which no arm starts; an arm of the 3B shape took ~2.5 min on the H200 on 2026-12-04, 75-85 s of it the first step's
# compiling and checks, ~40 s more for the profiled one), WITH_7B=0, PROFILE=0 (no profiled step: every
# step after the first is measured). On a CPU machine (no .whl/, the
# stack importable from PYTHON) the same script runs the tiny shape: tests/integration/test_gpu_check_cpu.py.
set -uo pipefail
python="${PYTHON:-python3}"
wheels="${WHEELS:-.whl}"  # the carried wheels (the CPU test points this at an empty folder)
if compgen -G "$wheels/*.whl" > /dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; fi
"$python" -c "import torch, transformers, trl, datasets, pyarrow; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)" || exit 1
out="${OUT:-/tmp}"
work="${WORK_DIR:-/tmp/gpu_check}"
cp docs/gpu_check.md "$out/gpu_check.md"
extra=()
if [[ "${WITH_7B:-1}" != 0 ]]; then extra+=(--with_7b); fi
if [[ "${PROFILE:-1}" != 0 ]]; then extra+=(--profile); fi
PYTHON="$python" bash scripts/gpu_check.sh --work_dir "$work" --out "$out/gpu_check.json" \
  --arms "${ARMS:-grpo/all,olmorl/all,lora/all,grpo/vision,grpo/noprefix,grpo/stock}" --steps "${STEPS:-3}" \
  --time_budget_s "${BUDGET_S:-300}" --write_docs "$out/gpu_check.md" "${extra[@]}" "$@" 2>&1 \
  | tee "$out/gpu_check.log" | grep -a -v "Warning\|warn\|it/s\]"
exit "${PIPESTATUS[0]}"
