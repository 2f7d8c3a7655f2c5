"""The registry's rewards and the telemetry callback inside TRL's GRPOTrainer (tiny model, CPU, one step)."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "bench_data_sample"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_grpo_step_logs_trl_reward_names_and_bench_reward_keys(tiny_model_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    from trl import GRPOConfig, GRPOTrainer

    from olmocr_rl.data import OlmOCRBenchDataset
    from olmocr_rl.model.loading import load_model_and_processor
    from olmocr_rl.rewards import build_reward_functions
    from olmocr_rl.telemetry.pass_rates import DetailedRewardLogger, DetailedRewardLoggingCallback

    model, processor = load_model_and_processor(str(tiny_model_dir))
    pages = OlmOCRBenchDataset(str(SAMPLE), processor, max_samples=1, target_longest_image_dim=64)
    train = datasets.Dataset.from_list([pages[0]] * 4)

    reward_logger = DetailedRewardLogger()
    spec = {"bench": 1.0, "bench_macroavg": 1.0, "front_matter": 1.0, "eos": 1.0}
    funcs, weights, names = build_reward_functions(
        spec, eos_token_id=processor.tokenizer.eos_token_id, reward_logger=reward_logger, workers=2
    )
    config = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1,
        max_completion_length=8, logging_steps=1, report_to="none", use_cpu=True, bf16=False,
        save_strategy="no", reward_weights=weights, remove_unused_columns=False, disable_tqdm=True,
        log_completions=False, seed=0,
    )
    trainer = GRPOTrainer(model=model, args=config, processing_class=processor, train_dataset=train, reward_funcs=funcs)
    DetailedRewardLoggingCallback.attach(trainer, reward_logger, console=False)
    try:
        trainer.train()
    finally:
        funcs[0].scorer.close()

    logged = next(h for h in trainer.state.log_history if "loss" in h)
    for name in names:
        assert f"rewards/{name}/mean" in logged
    # One step = one page x 4 samples; the micro and macro rewards recorded telemetry once between them.
    assert logged["bench_reward/total_completions"] == 4
    # Every completion has the same tests, so the pooled pass rate equals the mean micro reward TRL logged.
    assert logged["bench_reward/overall_pass_rate"] == pytest.approx(logged["rewards/olmocr_bench_reward/mean"], abs=1e-6)
    assert "bench_reward/frac_zero_signal_groups" in logged
    assert any(key.startswith("bench_reward/jsonl_") for key in logged)
