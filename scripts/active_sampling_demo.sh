#!/usr/bin/env bash
# OlmoRL with and without --active_sampling from the same warm start (CPU, a few minutes; numbers and plot in
# docs/olmorl.md). The tiny model is warm-started on all pages of bench_data_sample, so some pages give groups
# with signal and some do not; both runs train 60 steps of one page x 16 samples, then each final model is
# evaluated (16 samples per page, 2 seeds) and docs/img/active_sampling.png is drawn from the two metrics.jsonl.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$(bash "$repo_root/scripts/setup_env.sh" | tail -n 1)"
cd "$repo_root"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
model=models/tiny-sft-all out=outputs/active-sampling
[[ -f $model/config.json ]] || "$python" -m olmocr_rl.tiny_model "$model" --sft bench_data_sample --sft_steps 120
for mode in off on; do
  extra=(); [[ $mode == on ]] && extra=(--active_sampling)
  "$python" -m olmocr_rl.grpo_train --config configs/tiny-cpu.yaml --model_name "$model" --pages . --olmorl \
    "${extra[@]}" --max_steps 60 --save_steps 1000 --output_dir "$out/$mode"
done
for run in "$model" "$out/off" "$out/on"; do
  name="$(basename "$run")"
  for seed in 0 1; do
    "$python" -m olmocr_rl.evaluate --model "$run" --bench bench_data_sample --num_samples 16 --temperature 1.0 \
      --max_new_tokens 64 --seed "$seed" --outputs "$out/eval/$name-$seed" --overwrite --json > "$out/eval-$name-$seed.json"
  done
done
"$python" scripts/active_sampling_plot.py "$out" "$model"
