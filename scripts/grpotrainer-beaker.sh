#!/usr/bin/env bash
# Launch an olmocr_rl GRPO run on Beaker.
#
#   scripts/grpotrainer-beaker.sh [launcher options] [--] TRAINER_ARGS...
#
# Builds (or reuses) the image olmocr-grpo-<version>-<git hash> from ./Dockerfile, uploads it to
# Beaker, and submits one experiment whose task (scripts/beaker/task.sh inside the image) syncs
# s3:// inputs to local disk, starts `trl vllm-serve` on the last --vllm-gpus GPUs, and runs
# `accelerate launch -m olmocr_rl.grpo_train TRAINER_ARGS...` on the others. Checkpoints mirror to
# <--s3-checkpoints>/<name>; a preempted job that Beaker restarts resumes from there.
#
# Launcher options use dashes; every other argument (the trainer's flags use underscores) is
# forwarded to the trainer unchanged, spaces and all. `--` ends the launcher options.
#
#   --gpus N                GPUs per node                                   (default below)
#   --vllm-gpus K           of those, GPUs for the vLLM server; 0 = vLLM colocated in the trainer
#                           (default: 1 when --gpus > 1, else 0)
#   --nodes N               Beaker replicas, one node each (N > 1 needs --vllm-gpus 0)
#   --accelerate-config C   zero2 | zero3 | fsdp | path to an accelerate YAML
#   --name NAME             experiment and run name (default: olmocr-grpo-<hash>-<time>)
#   --preemptible           allow Beaker to preempt (and restart) the job
#   --cluster C             repeatable; --workspace W --budget B --priority P --retries N
#   --s3-checkpoints URI    S3 prefix for checkpoint mirrors ("" = no mirror, no resume)
#   --aws-access-key-secret NAME --aws-secret-key-secret NAME --wandb-secret NAME
#   --hf-token-secret NAME  Beaker secret names ("" leaves one out)
#   --beaker-user USER      owner of the image (default: `beaker account whoami`)
#   --skip-docker-build     use the image tag as is (it must already be on Beaker)
#   --no-auto-resume        do not pass --resume_from_checkpoint to the trainer
#   --dry-run               print the image commands, the experiment spec and each GPU group's
#                           command; touches neither Docker nor Beaker
#
# Example (olmOCR 2's setup: 8 GPUs = 7 training + 1 vLLM):
#   scripts/grpotrainer-beaker.sh --gpus 8 --vllm-gpus 1 --preemptible --name synthmix-seed1 -- \
#     --model_name s3://bucket/sft-checkpoint --train_bench_data_folder s3://bucket/synthmix/bench_data \
#     --reward_bench 1.0 --reward_front_matter 1.0 --reward_eos 1.0 --gradient_accumulation_steps 28
set -euo pipefail

# ---- defaults: the one place to change them ----------------------------------------------------
GPUS=8
VLLM_GPUS=""                       # "" = 1 when GPUS > 1, else 0
NODES=1
ACCELERATE_CONFIG=zero2
CLUSTERS=(ai2/jupiter ai2/augusta)
WORKSPACE=ai2/olmocr
BUDGET=ai2/oe-base
PRIORITY=high
RETRIES=0
SHARED_MEMORY=10GiB
S3_CHECKPOINTS=s3://ai2-oe-data/olmocr-grpo-checkpoints
CHECKPOINT_DIR=/tmp/checkpoints    # local disk inside the job; S3 holds the durable copy
DATA_ROOT=/data                    # s3:// inputs are synced to DATA_ROOT/<bucket>/<key>
AWS_ACCESS_KEY_SECRET=AWS_ACCESS_KEY_ID
AWS_SECRET_KEY_SECRET=AWS_SECRET_ACCESS_KEY
WANDB_SECRET=WANDB_API_KEY
HF_TOKEN_SECRET=""
MAIN_PROCESS_PORT=29500
VLLM_PORT=8000
VLLM_GPU_MEMORY_UTILIZATION=0.5    # olmOCR's production value; leaves room for NCCL weight sync
VLLM_MAX_MODEL_LEN=16384           # 3,000 prompt + 8,000 completion tokens fit
VLLM_HEALTH_TIMEOUT=900            # seconds; model download + load + CUDA graphs
# ------------------------------------------------------------------------------------------------

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/grpo_launch.sh
source "$repo_root/scripts/lib/grpo_launch.sh"

usage() { sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

name="" preemptible=0 skip_build=0 dry_run=0 auto_resume=1 beaker_user="" clusters_given=0
trainer_args=()
while (($# > 0)); do
  case "$1" in
    --gpus) GPUS="$2"; shift 2 ;;
    --vllm-gpus) VLLM_GPUS="$2"; shift 2 ;;
    --nodes) NODES="$2"; shift 2 ;;
    --accelerate-config) ACCELERATE_CONFIG="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --preemptible) preemptible=1; shift ;;
    --cluster)
      ((clusters_given)) || CLUSTERS=()
      clusters_given=1
      CLUSTERS+=("$2")
      shift 2
      ;;
    --workspace) WORKSPACE="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --priority) PRIORITY="$2"; shift 2 ;;
    --retries) RETRIES="$2"; shift 2 ;;
    --s3-checkpoints) S3_CHECKPOINTS="$2"; shift 2 ;;
    --aws-access-key-secret) AWS_ACCESS_KEY_SECRET="$2"; shift 2 ;;
    --aws-secret-key-secret) AWS_SECRET_KEY_SECRET="$2"; shift 2 ;;
    --wandb-secret) WANDB_SECRET="$2"; shift 2 ;;
    --hf-token-secret) HF_TOKEN_SECRET="$2"; shift 2 ;;
    --beaker-user) beaker_user="$2"; shift 2 ;;
    --skip-docker-build) skip_build=1; shift ;;
    --no-auto-resume) auto_resume=0; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; trainer_args+=("$@"); break ;;
    *) trainer_args+=("$1"); shift ;;
  esac
done

[[ "$GPUS" =~ ^[0-9]+$ ]] || grpo_die "--gpus '$GPUS' is not a number"
if [[ -z "$VLLM_GPUS" ]]; then
  if ((GPUS > 1 && NODES == 1)); then VLLM_GPUS=1; else VLLM_GPUS=0; fi
fi
case "$ACCELERATE_CONFIG" in
  zero2 | zero3 | fsdp) ACCELERATE_CONFIG="configs/accelerate/$ACCELERATE_CONFIG.yaml" ;;
esac
[[ -f "$repo_root/$ACCELERATE_CONFIG" ]] ||
  grpo_die "--accelerate-config $ACCELERATE_CONFIG: no such file in the repository (use zero2, zero3, fsdp or a path relative to $repo_root)"

# ---- image tag: olmocr-grpo-<version>-<git hash> ------------------------------------------------
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo_root/.venv/bin/python" ]]; then python="$repo_root/.venv/bin/python"; else python=python3; fi
fi
export PYTHON="$python"  # the spec builder and the task's dry run read YAML with it (needs pyyaml)
version="$(cd "$repo_root" && "$python" -c 'import olmocr_rl; print(olmocr_rl.__version__)' 2>/dev/null)" ||
  version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$repo_root/pyproject.toml" | head -n 1)"
[[ -n "$version" ]] || grpo_die "cannot find the package version (olmocr_rl.__version__ or pyproject.toml)"
git_hash="$(git -C "$repo_root" rev-parse --short=10 HEAD 2>/dev/null)" || git_hash=nogit
image_tag="olmocr-grpo-$version-$git_hash"
if [[ -n "$(git -C "$repo_root" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  # The image holds the working tree, not the commit: never reuse a tag for uncommitted changes.
  image_tag="$image_tag-dirty-$(date +%Y%m%d%H%M%S)"
  grpo_log "warning: uncommitted changes; building a one-off image $image_tag"
fi
[[ -n "$name" ]] || name="olmocr-grpo-$git_hash-$(date +%Y%m%d-%H%M%S)"

if [[ -z "$beaker_user" ]]; then
  if ((dry_run)); then
    beaker_user="<beaker-user>"
  else
    beaker_user="$(beaker account whoami --format json | jq -r '.[0].name')" ||
      grpo_die "cannot ask Beaker who you are; install and log in to the beaker CLI, or pass --beaker-user"
  fi
fi

spec_args=(
  --name "$name" --image-tag "$image_tag" --beaker-user "$beaker_user"
  --workspace "$WORKSPACE" --budget "$BUDGET" --priority "$PRIORITY" --retries "$RETRIES"
  --gpus "$GPUS" --vllm-gpus "$VLLM_GPUS" --nodes "$NODES" --shared-memory "$SHARED_MEMORY"
  --accelerate-config "$ACCELERATE_CONFIG" --checkpoint-dir "$CHECKPOINT_DIR"
  --s3-checkpoint-root "$S3_CHECKPOINTS" --data-root "$DATA_ROOT"
  --main-process-port "$MAIN_PROCESS_PORT" --vllm-port "$VLLM_PORT"
  --vllm-gpu-memory-utilization "$VLLM_GPU_MEMORY_UTILIZATION"
  --vllm-max-model-len "$VLLM_MAX_MODEL_LEN" --vllm-health-timeout "$VLLM_HEALTH_TIMEOUT"
  --aws-access-key-secret "$AWS_ACCESS_KEY_SECRET" --aws-secret-key-secret "$AWS_SECRET_KEY_SECRET"
  --wandb-secret "$WANDB_SECRET" --hf-token-secret "$HF_TOKEN_SECRET"
)
for cluster in "${CLUSTERS[@]}"; do spec_args+=(--cluster "$cluster"); done
((preemptible)) && spec_args+=(--preemptible)
((auto_resume)) || spec_args+=(--no-auto-resume)
spec_builder=("$python" "$repo_root/scripts/beaker/experiment_spec.py")

# Refuse bad options before spending minutes on an image build.
"${spec_builder[@]}" --check "${spec_args[@]}" -- "${trainer_args[@]}"

# ---- build or reuse the image -------------------------------------------------------------------
docker_build=(docker build --platform linux/amd64 -f "$repo_root/Dockerfile" -t "$image_tag" "$repo_root")
beaker_upload=(beaker image create --workspace "$WORKSPACE" --name "$image_tag" "$image_tag")
if ((dry_run)); then
  echo "# image (dry run: not built, not uploaded)"
  grpo_show docker "${docker_build[@]}"
  grpo_show beaker "${beaker_upload[@]}"
  exec "${spec_builder[@]}" --dry-run "${spec_args[@]}" -- "${trainer_args[@]}"
fi
if ((skip_build)); then
  grpo_log "skipping the image build; using $beaker_user/$image_tag"
elif beaker image get "$beaker_user/$image_tag" >/dev/null 2>&1; then
  grpo_log "reusing image $beaker_user/$image_tag (already on Beaker)"
else
  "${docker_build[@]}"
  upload_log="$(mktemp)"
  if ! "${beaker_upload[@]}" 2>&1 | tee "$upload_log"; then
    grep -qi "already exists" "$upload_log" || grpo_die "beaker image create failed (see above)"
    grpo_log "image $image_tag already on Beaker; reusing it"
  fi
  rm -f "$upload_log"
fi

# ---- submit --------------------------------------------------------------------------------------
exec "${spec_builder[@]}" "${spec_args[@]}" -- "${trainer_args[@]}"
