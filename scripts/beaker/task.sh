#!/usr/bin/env bash
# What one Beaker replica runs inside the olmocr-grpo image (scripts/grpotrainer-beaker.sh puts this
# command in the experiment spec; nobody needs to call it by hand):
#
#   1. sync s3:// inputs (--model_name, --train/eval_bench_data_folder) to --data-root;
#   2. fill in what the trainer needs on Beaker, unless the user set it (command line or --config):
#      --output_dir, --s3_save_path, --wandb_run_name, --resume_from_checkpoint (the trainer resumes
#      from the newest checkpoint in the output dir or on S3, and starts fresh when there is none,
#      so passing it on every start is what makes a preempted and restarted job resume);
#   3. on GPUs TRAIN..TRAIN+VLLM-1 start `trl vllm-serve`, wait until /health answers (bounded,
#      failing clearly), and stop it on exit;
#   4. on GPUs 0..TRAIN-1 run `accelerate launch ... -m olmocr_rl.grpo_train <trainer args>`.
#
# Usage: task.sh --train-gpus M --vllm-gpus K --nodes N --accelerate-config FILE --output-dir DIR
#          --s3-save-path URI|"" --data-root DIR --run-name NAME --main-process-port P
#          --vllm-port P --vllm-gpu-memory-utilization U --vllm-max-model-len L
#          --vllm-health-timeout S [--no-auto-resume] -- TRAINER_ARGS...
# With GRPO_DRY_RUN=1 it prints each command (`[label] command`) instead of running it; for N > 1
# it then prints the training command of every replica rank.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/lib/grpo_launch.sh
source "$repo_root/scripts/lib/grpo_launch.sh"
cd "$repo_root"

# The trainer's own default model; used only to make trainer and vLLM server agree on one model
# when neither the command line nor --config names one.
readonly TRAINER_DEFAULT_MODEL="Qwen/Qwen2.5-VL-7B-Instruct"

train_gpus="" vllm_gpus="" nodes="" accelerate_config="" output_dir="" s3_save_path="__unset__"
data_root="" run_name="" main_port="" vllm_port="" vllm_mem="" vllm_max_len="" health_timeout=""
auto_resume=1
while (($# > 0)); do
  case "$1" in
    --train-gpus) train_gpus="$2"; shift 2 ;;
    --vllm-gpus) vllm_gpus="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --accelerate-config) accelerate_config="$2"; shift 2 ;;
    --output-dir) output_dir="$2"; shift 2 ;;
    --s3-save-path) s3_save_path="$2"; shift 2 ;;
    --data-root) data_root="$2"; shift 2 ;;
    --run-name) run_name="$2"; shift 2 ;;
    --main-process-port) main_port="$2"; shift 2 ;;
    --vllm-port) vllm_port="$2"; shift 2 ;;
    --vllm-gpu-memory-utilization) vllm_mem="$2"; shift 2 ;;
    --vllm-max-model-len) vllm_max_len="$2"; shift 2 ;;
    --vllm-health-timeout) health_timeout="$2"; shift 2 ;;
    --no-auto-resume) auto_resume=0; shift ;;
    --) shift; break ;;
    *) grpo_die "task.sh: unknown option '$1' (trainer arguments go after --)" ;;
  esac
done
for required in train_gpus vllm_gpus nodes accelerate_config output_dir data_root run_name \
  main_port vllm_port vllm_mem vllm_max_len health_timeout; do
  [[ -n "${!required}" ]] || grpo_die "task.sh: --${required//_/-} is required"
done
[[ "$s3_save_path" != "__unset__" ]] || grpo_die "task.sh: --s3-save-path is required (\"\" for none)"
trainer_args=("$@")

if config="$(grpo_flag_value --config "${trainer_args[@]}")" && [[ ! -f "$config" ]]; then
  grpo_die "--config $config: no such file in the image (paths are relative to $repo_root)"
fi

# ---- 1. inputs on local disk -------------------------------------------------------------------
grpo_localize_s3_inputs trainer_args "$data_root"

# ---- 2. what Beaker needs, where the user did not say ------------------------------------------
grpo_setting output_dir "${trainer_args[@]}" >/dev/null || grpo_set_flag trainer_args --output_dir "$output_dir"
if [[ -n "$s3_save_path" ]] && ! grpo_setting s3_save_path "${trainer_args[@]}" >/dev/null; then
  grpo_set_flag trainer_args --s3_save_path "$s3_save_path"
fi
grpo_setting wandb_run_name "${trainer_args[@]}" >/dev/null ||
  grpo_set_flag trainer_args --wandb_run_name "$run_name"
if ((auto_resume)) && ! grpo_has_flag --resume_from_checkpoint "${trainer_args[@]}"; then
  trainer_args+=(--resume_from_checkpoint)
fi

if ((vllm_gpus > 0)); then
  user_mode="$(grpo_setting vllm_mode "${trainer_args[@]}")" || user_mode=server
  [[ "$user_mode" == server || "$user_mode" == auto ]] ||
    grpo_die "--vllm-gpus $vllm_gpus reserves GPUs for a vLLM server, but the trainer is set to --vllm_mode $user_mode; use --vllm-gpus 0 for $user_mode"
  model="$(grpo_setting model_name "${trainer_args[@]}")" || model="$TRAINER_DEFAULT_MODEL"
  grpo_set_flag trainer_args --model_name "$model"
  grpo_set_flag trainer_args --vllm_mode server
  grpo_set_flag trainer_args --vllm_server_host 127.0.0.1
  grpo_set_flag trainer_args --vllm_server_port "$vllm_port"
elif [[ "$(grpo_setting vllm_mode "${trainer_args[@]}")" == server ]] &&
  ! grpo_setting vllm_server_host "${trainer_args[@]}" >/dev/null; then
  grpo_die "the trainer is set to --vllm_mode server but no GPU runs a server: add --vllm-gpus K to the launcher, or pass --vllm_mode colocate"
fi

# ---- 3. vLLM server on the last K GPUs ---------------------------------------------------------
# shellcheck disable=SC2329  # invoked by the EXIT trap
on_exit() {
  local status=$?
  grpo_stop_vllm
  grpo_is_dry_run || grpo_log "task exiting with status $status"
}
trap on_exit EXIT
vllm_cmd=() train_cmd=()
if ((vllm_gpus > 0)); then
  grpo_vllm_cmd vllm_cmd "$model" "$vllm_port" "$vllm_gpus" "$vllm_mem" "$vllm_max_len"
  grpo_start_vllm "$output_dir/vllm-server.log" \
    env CUDA_VISIBLE_DEVICES="$(grpo_gpu_range "$train_gpus" "$vllm_gpus")" "${vllm_cmd[@]}"
  grpo_wait_vllm_healthy "http://127.0.0.1:$vllm_port" "$health_timeout" \
    "$output_dir/vllm-server.log" "$GRPO_VLLM_PID"
fi

# ---- 4. training on the first M GPUs -----------------------------------------------------------
train_visible="$(grpo_gpu_range 0 "$train_gpus")"
main_ip="${BEAKER_LEADER_REPLICA_HOSTNAME:-127.0.0.1}"
if grpo_is_dry_run && ((nodes > 1)); then
  # Show every replica's command; BEAKER_* values are only known inside the running job.
  for ((rank = 0; rank < nodes; rank++)); do
    grpo_accelerate_cmd train_cmd "$accelerate_config" $((train_gpus * nodes)) "$nodes" "$rank" \
      "${BEAKER_LEADER_REPLICA_HOSTNAME:-\$BEAKER_LEADER_REPLICA_HOSTNAME}" "$main_port" "${trainer_args[@]}"
    grpo_show "train rank $rank" env CUDA_VISIBLE_DEVICES="$train_visible" "${train_cmd[@]}"
  done
  exit 0
fi
grpo_accelerate_cmd train_cmd "$accelerate_config" $((train_gpus * nodes)) "$nodes" \
  "${BEAKER_REPLICA_RANK:-0}" "$main_ip" "$main_port" "${trainer_args[@]}"
grpo_run "train rank ${BEAKER_REPLICA_RANK:-0}" env CUDA_VISIBLE_DEVICES="$train_visible" "${train_cmd[@]}"
