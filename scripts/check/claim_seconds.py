"""The claims the suite proves, the tests that prove them, and their seconds in a run of the test command.

    python scripts/check/claim_seconds.py [LOG_DIR]      # default logs/test (scripts/test.sh's lane logs)

Reads pytest's ``--durations`` lines (setup + call + teardown of each test) from the lanes' logs, ``main.log``,
``main2.log`` (the main lane's second slice) and ``vllm.log``, and prints the markdown table of docs/testing.md
("What the suite proves"): each claim, its tests, their seconds in that run. A test of the list that the logs do not name (it did not run, or took less than
the lane's ``--durations-min``) reads "-". Exits 1 when a listed test does not exist in tests/ any more, so the table
cannot go on naming a test that was renamed or removed.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: (claim, [test node ids, a parametrized test by its function name for all its cases]); the order of docs/testing.md.
CLAIMS: list[tuple[str, list[str]]] = [
    ("GRPO raises the bench pass rate; the sign-flipped control does not (also LoRA, the frozen tower)",
     ["tests/integration/test_learning_signal.py::test_grpo_raises_the_bench_pass_rate_and_the_flipped_sign_does_not",
      "tests/integration/test_learning_signal.py::test_lora_raises_the_bench_pass_rate",
      "tests/integration/test_learning_signal.py::test_a_frozen_vision_tower_learns_and_stays_bit_identical"]),
    ("GRPO makes the model read held-out pages better; a flipped reward sign, completions scored against the wrong "
     "page and permuted advantages do not",
     ["tests/integration/test_learning_guard.py::test_grpo_makes_the_model_read_held_out_pages_better",
      "tests/integration/test_learning_guard.py::test_each_learning_bug_fails_the_guard"]),
    ("bit-exact resume, local: a SIGTERM mid-run saves that step and the resume equals the uninterrupted run",
     ["tests/integration/test_fault_runs.py::test_sigterm_mid_run_saves_that_step_and_the_resumed_run_equals_the_uninterrupted_one",
      "tests/integration/test_preemption.py::test_resume_in_the_second_epoch_sees_that_epochs_page_order"]),
    ("bit-exact resume from S3 after a SIGKILL (full and LoRA), and on a fresh machine",
     ["tests/integration/test_preemption.py::test_sigkill_after_checkpoint_4_then_resume_from_s3_continues_exactly",
      "tests/integration/test_lora_resume.py::test_lora_run_killed_after_checkpoint_4_resumes_from_s3_exactly",
      "tests/integration/test_cli_s3.py::test_model_from_s3_checkpoints_mirrored_then_resumed_on_a_fresh_machine"]),
    ("two machines without a shared disk resume from S3 with every rank's files",
     ["tests/integration/test_preemption.py::test_two_machines_without_shared_disk_resume_from_s3_with_every_rank_file"]),
    ("sharded checkpoints: FSDP2 and ZeRO-3 on two processes match one process; S3 resume and SIGTERM under FSDP2",
     ["tests/integration/test_sharded_cpu.py::test_fsdp2_on_two_processes_matches_one_process",
      "tests/integration/test_sharded_cpu.py::test_zero3_on_two_processes_matches_one_process"]),
    ("SIGTERM under torchrun saves every rank's step and the resume equals the uninterrupted run",
     ["tests/integration/test_fault_runs.py::test_sigterm_to_torchrun_saves_every_ranks_step_and_the_resume_equals_the_uninterrupted_run"]),
    ("SIGUSR1 and Ctrl-C save, upload and stop in one line; a SIGTERM before training is one line",
     ["tests/integration/test_fault_runs.py::test_usr1_and_ctrl_c_save_upload_and_stop_in_one_line",
      "tests/integration/test_fault_runs.py::test_sigterm_before_training_began_is_one_line"]),
    ("damaged checkpoints are skipped, replaced from S3, or refused in one line",
     ["tests/integration/test_fault_runs.py::test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before",
      "tests/integration/test_fault_runs.py::test_a_good_copy_on_s3_replaces_a_damaged_local_checkpoint",
      "tests/integration/test_fault_runs.py::test_an_explicit_damaged_checkpoint_is_one_error_line"]),
    ("an S3 outage mid-run finishes training and exits 74; unreachable S3 stops before the model loads",
     ["tests/integration/test_cli_s3.py::test_training_finishes_when_the_s3_server_goes_away_mid_run_and_exits_74",
      "tests/integration/test_cli_s3.py::test_resume_from_an_unreachable_s3_stops_before_the_model_loads"]),
    ("the S3 lease: one writer a prefix; a run that loses it stops writing (status 77)",
     ["tests/unit/test_s3_only_copy.py::test_a_live_lease_of_another_run_stops_a_start_in_one_line_and_a_dead_ones_is_taken_over",
      "tests/integration/test_lease_loss_cli.py::test_a_run_whose_lease_is_taken_over_stops_writing_and_exits_77_in_one_line"]),
    ("colocated vLLM samples from the trainer's prompt: log-probs paired at every step (Qwen2.5-VL plain/OlmoRL/LoRA)",
     ["tests/vllm_lane/test_vllm_colocate.py::test_warm_model_vllm_logprobs_equal_the_trainers_at_every_step",
      "tests/vllm_lane/test_vllm_colocate.py::test_lora_colocate_run_sends_the_merged_weights_at_every_step",
      "tests/vllm_lane/test_vllm_colocate.py::test_a_pad_heavy_policy_never_samples_image_tokens"]),
    ("the same pairing for Qwen3-VL dense and MoE, and under FSDP2 (full, LoRA, MoE)",
     ["tests/vllm_lane/test_vllm_qwen3_vl.py::test_qwen3_vl_vllm_logprobs_equal_the_trainers_at_every_step",
      "tests/vllm_lane/test_vllm_qwen3_vl.py::test_qwen3_vl_moe_release_folder_vllm_logprobs_equal_the_trainers",
      "tests/vllm_lane/test_vllm_fsdp2.py::test_fsdp2_colocated_vllm_logprobs_equal_the_trainers_at_every_step",
      "tests/vllm_lane/test_vllm_fsdp2.py::test_fsdp2_colocated_vllm_moe_logprobs_equal_the_trainers_at_every_step"]),
    ("server mode with the gloo push (plain, OlmoRL, LoRA, MoE): weights arrive at every step",
     ["tests/vllm_lane/test_vllm_server.py::test_server_mode_trains_with_the_gloo_push",
      "tests/vllm_lane/test_vllm_server.py::test_server_mode_trains_a_tiny_moe"]),
    ("async generation: batches sampled ahead pair with the trainer's prompts; SIGTERM and resume",
     ["tests/vllm_lane/test_vllm_server.py::test_async_generation_samples_ahead_with_the_prompts_the_trainer_scores",
      "tests/vllm_lane/test_vllm_server.py::test_async_generation_sigterm_saves_the_step_and_the_resume_regenerates_the_batch_in_flight"]),
    ("no orphans: every process of a pytest session dies with it, even when pytest is SIGKILLed",
     ["tests/integration/test_no_orphans.py::test_every_process_of_a_killed_pytest_session_dies_with_it"]),
]

DURATION = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S+)")


def read_seconds(log_dir: Path) -> dict[str, float]:
    """Node id (parameters included) -> setup + call + teardown seconds, from the lanes' --durations lines."""
    seconds: dict[str, float] = defaultdict(float)
    for name in ("main.log", "main2.log", "vllm.log"):  # main2.log: the main lane's second slice (scripts/test.sh)
        path = log_dir / name
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                match = DURATION.match(line)
                if match:
                    seconds[match.group(3)] += float(match.group(1))
    return dict(seconds)


def test_exists(node: str) -> bool:
    path, _, name = node.partition("::")
    file = REPO / path
    return file.is_file() and re.search(rf"^def {re.escape(name)}\(", file.read_text(), re.MULTILINE) is not None


def main(argv: list[str]) -> int:
    log_dir = Path(argv[0]) if argv else REPO / "logs" / "test"
    seconds = read_seconds(log_dir)
    missing = [node for _, nodes in CLAIMS for node in nodes if not test_exists(node)]
    print("| claim | proved by | seconds |")
    print("|---|---|---|")
    for claim, nodes in CLAIMS:
        names, times = [], []
        for node in nodes:
            cases = {k: v for k, v in seconds.items() if k == node or k.startswith(node + "[")}
            path, _, name = node.partition("::")
            names.append(f"`{Path(path).name}::{name}`" + (f" ({len(cases)} cases)" if len(cases) > 1 else ""))
            times.append(f"{sum(cases.values()):.0f}" if cases else "-")
        print(f"| {claim} | {'<br>'.join(names)} | {' + '.join(times)} |")
    if missing:
        print("\nno such test any more: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
