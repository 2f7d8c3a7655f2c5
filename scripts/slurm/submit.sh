#!/usr/bin/env bash
# Submit an olmocr_rl GRPO run to Slurm (scripts/slurm/grpo.sbatch does the work on the nodes).
#
#   scripts/slurm/submit.sh [submit options] [grpo.sbatch options] [--] TRAINER_ARGS...
#
# Submit options (the allocation):
#   --nodes N            nodes (default 1)
#   --gpus-per-node G    GPUs per node (default 8)
#   --partition P  --account A  --qos Q  --time T  --job-name NAME
#   --sbatch-arg ARG     one extra raw sbatch argument, repeatable (e.g. --sbatch-arg=--constraint=h100)
#   --dry-run            print the sbatch command, then every command the job would run on each
#                        node (with placeholder hosts node-0, node-1, ...); submits nothing
# grpo.sbatch options (--vllm-gpus K, --vllm-node, --accelerate-config C, --output-root DIR, ...;
# see its header) and the trainer's own flags are passed through unchanged.
#
# Examples:
#   scripts/slurm/submit.sh --nodes 1 --vllm-gpus 1 -- --config configs/x.yaml          # 7 + 1 GPUs
#   scripts/slurm/submit.sh --nodes 5 --vllm-node --vllm-gpus 1 -- --config configs/x.yaml  # 4 x 8 train
#   scripts/slurm/submit.sh --nodes 4 -- --config configs/x.yaml --vllm_mode colocate   # 32 GPUs, colocated
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/lib/grpo_launch.sh
source "$repo_root/scripts/lib/grpo_launch.sh"

nodes=1 gpus_per_node=8 job_name=olmocr-grpo dry_run=0
sbatch_args=()
job_args=()
while (($# > 0)); do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --gpus-per-node) gpus_per_node="$2"; shift 2 ;;
    --partition | --account | --qos | --time) sbatch_args+=("$1=$2"); shift 2 ;;
    --job-name) job_name="$2"; shift 2 ;;
    --sbatch-arg) sbatch_args+=("$2"); shift 2 ;;
    --sbatch-arg=*) sbatch_args+=("${1#--sbatch-arg=}"); shift ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    --) job_args+=("$@"); break ;;
    *) job_args+=("$1"); shift ;;
  esac
done
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || grpo_die "--nodes '$nodes' is not a positive number"
[[ "$gpus_per_node" =~ ^[1-9][0-9]*$ ]] || grpo_die "--gpus-per-node '$gpus_per_node' is not a positive number"

# shellcheck disable=SC2054  # the commas belong to --export's value
sbatch_cmd=(sbatch --nodes="$nodes" --gpus-per-node="$gpus_per_node" --job-name="$job_name"
  --chdir="$repo_root" --output="$repo_root/logs/%x-%j.out" --export=ALL,GRPO_REPO_ROOT="$repo_root"
  "${sbatch_args[@]}" "$repo_root/scripts/slurm/grpo.sbatch" --gpus-per-node "$gpus_per_node" "${job_args[@]}")

if ((dry_run)); then
  echo "# dry run: would submit"
  grpo_show sbatch "${sbatch_cmd[@]}"
  echo "# and the job would run (placeholder hosts, job id 0):"
  placeholder_hosts="$(for ((i = 0; i < nodes; i++)); do printf 'node-%d,' "$i"; done)"
  exec env SLURM_JOB_ID=0 SLURM_JOB_NAME="$job_name" SLURM_NNODES="$nodes" \
    SLURM_JOB_NODELIST="${placeholder_hosts%,}" SLURM_SUBMIT_DIR="$repo_root" GRPO_REPO_ROOT="$repo_root" \
    bash "$repo_root/scripts/slurm/grpo.sbatch" --dry-run --gpus-per-node "$gpus_per_node" "${job_args[@]}"
fi
command -v sbatch >/dev/null 2>&1 || grpo_die "sbatch not found: run this on a Slurm login node (or use --dry-run)"
mkdir -p "$repo_root/logs"
"${sbatch_cmd[@]}"
