"""The before/after capture for changes to the launchers (olmocr_rl/launch/, scripts/slurm/, scripts/beaker/):
every launcher --dry-run of docs/scaling.md's examples and the test cases, one file each. Capture before the
change, capture after it, and `diff -r` shows exactly which printed commands changed (and nothing else).

    .venv/bin/python scripts/bench/launcher_dryruns.py /tmp/launch_before
    .venv/bin/python scripts/bench/launcher_dryruns.py /tmp/launch_after && diff -r /tmp/launch_before /tmp/launch_after

Every case runs the user-facing script (scripts/grpotrainer-beaker.sh, scripts/slurm/submit.sh,
scripts/slurm/grpo.sbatch with fake Slurm variables) and writes its exit status, stdout and stderr
to OUT/<case>.txt. What changes from commit to commit or from second to second (the git hash in the
image tag, the time in default names and dirty tags, temporary paths) is replaced by a placeholder,
so two captures of unchanged behaviour are byte-identical.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BEAKER = ["bash", "scripts/grpotrainer-beaker.sh", "--dry-run"]
SUBMIT = ["bash", "scripts/slurm/submit.sh", "--dry-run"]
SBATCH = ["bash", "scripts/slurm/grpo.sbatch", "--dry-run"]
CFG = ["--config", "configs/olmocr2-7b.yaml"]

FAKE_SCONTROL = """#!/usr/bin/env bash
# `scontrol show hostnames` for gpu[01-03] or a,b,c; anything else is only logged.
if [[ "$1 $2" == "show hostnames" ]]; then
  exec "{python}" -c '
import re, sys
m = re.fullmatch(r"(\\w+)\\[(\\d+)-(\\d+)\\]", sys.argv[1])
if m:
    for i in range(int(m.group(2)), int(m.group(3)) + 1):
        print(f"{{m.group(1)}}{{i:0{{len(m.group(2))}}d}}")
else:
    print("\\n".join(sys.argv[1].split(",")))' "$3"
fi
"""


def slurm(nodelist: str, nnodes: int, job_id: int = 4242) -> dict[str, str]:
    return {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_NAME": "grpo-test", "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NNODES": str(nnodes)}


def cases(tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Case name -> (argv, extra environment)."""
    config = tmp / "run config.yaml"
    config.write_text("model_name: s3://bucket/sft\nreward_bench: 1.0\n")
    user_args = ["--model_name", "s3://bucket/models/sft 7b", "--train_bench_data_folder", "s3://bucket/mix/bench_data",
                 "--reward_bench", "1.0", "--wandb_run_name", "seed 1 run", "--jsonl_filter", "arxiv math|tables",
                 "--gradient_accumulation_steps", "28"]
    t = ["--beaker-user", "tester"]
    return {
        # docs/scaling.md examples (the readme_ names are kept: captures stay comparable)
        "readme_beaker_1gpu_colocate": ([*BEAKER, "--gpus", "1", "--", *CFG, "--vllm_mode", "colocate"], {}),
        "readme_beaker_8gpu_7_plus_1": ([*BEAKER, "--gpus", "8", "--vllm-gpus", "1", "--preemptible", "--name",
                                         "synthmix-seed1", "--", *CFG, "--model_name", "s3://bucket/sft-checkpoint",
                                         "--train_bench_data_folder", "s3://bucket/olmocr-synthmix-1025/bench_data"], {}),
        "readme_beaker_4_nodes": ([*BEAKER, "--nodes", "4", "--gpus", "8", "--", *CFG, "--vllm_mode", "colocate"], {}),
        "header_beaker_example": ([*BEAKER, "--gpus", "8", "--vllm-gpus", "1", "--preemptible", "--name",
                                   "synthmix-seed1", "--", "--model_name", "s3://bucket/sft-checkpoint",
                                   "--train_bench_data_folder", "s3://bucket/synthmix/bench_data", "--reward_bench",
                                   "1.0", "--reward_front_matter", "1.0", "--reward_eos", "1.0",
                                   "--gradient_accumulation_steps", "28"], {}),
        "readme_submit_1_node": ([*SUBMIT, "--nodes", "1", "--gpus-per-node", "8", "--vllm-gpus", "1", "--partition",
                                  "gpu", "--time", "2-00:00:00", "--", *CFG], {}),
        "readme_submit_5_nodes_vllm_node": ([*SUBMIT, "--nodes", "5", "--gpus-per-node", "8", "--vllm-node",
                                             "--vllm-gpus", "1", "--partition", "gpu", "--", *CFG,
                                             "--gradient_accumulation_steps", "7"], {}),
        "readme_submit_4_nodes_colocate": ([*SUBMIT, "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu",
                                            "--", *CFG, "--vllm_mode", "colocate", "--gradient_accumulation_steps",
                                            "7"], {}),
        "header_sbatch_3_nodes": ([*SBATCH, "--vllm-node", "--", *CFG, "--reward_bench"], slurm("gpu[01-03]", 3)),
        # the cases tests/test_launchers.py used
        "beaker_user_args_spaces": ([*BEAKER, *t, "--name", "run-a", "--preemptible", "--", *user_args], {}),
        "beaker_1gpu_fsdp": ([*BEAKER, *t, "--gpus", "1", "--accelerate-config", "fsdp", "--name", "one", "--",
                              "--model_name", "Qwen/Qwen2.5-VL-7B-Instruct", "--reward_bench"], {}),
        "beaker_4_plus_4": ([*BEAKER, *t, "--gpus", "8", "--vllm-gpus", "4", "--name", "tp", "--", "--reward_bench"], {}),
        "beaker_2_nodes": ([*BEAKER, *t, "--nodes", "2", "--gpus", "8", "--name", "mn", "--", "--reward_bench"], {}),
        "beaker_user_settings_win": ([*BEAKER, *t, "--name", "mine", "--no-auto-resume", "--s3-checkpoints", "", "--",
                                      "--output_dir", "/ckpt/my run", "--s3_save_path=s3://mine/run",
                                      "--reward_bench"], {}),
        "beaker_config_file_model": ([*BEAKER, *t, "--name", "cfg", "--", "--config", str(config)], {}),
        "beaker_cli_flags": ([*BEAKER, *t, "--name", "cli", "--", *CFG, "--model_name", "s3://bucket/sft",
                              "--wandb_project", "my project"], {}),
        "beaker_quotes_and_options": ([*BEAKER, *t, "--name", "q", "--cluster", "ai2/x", "--cluster", "ai2/y",
                                       "--retries", "2", "--hf-token-secret", "HF", "--wandb-secret", "",
                                       "--workspace", "ai2/w", "--budget", "ai2/b", "--priority", "low",
                                       "--accelerate-config", "zero3", "--gpus", "4", "--vllm-gpus", "1", "--",
                                       "--reward_bench", "--wandb_run_name", "it's a \"run\"", "--num_completions",
                                       "8"], {}),
        "beaker_err_all_vllm": ([*BEAKER, *t, "--gpus", "2", "--vllm-gpus", "2", "--", "--reward_bench"], {}),
        "beaker_err_nodes_vllm": ([*BEAKER, *t, "--nodes", "2", "--vllm-gpus", "1", "--", "--reward_bench"], {}),
        "beaker_err_accelerate": ([*BEAKER, *t, "--accelerate-config", "zero9", "--", "--reward_bench"], {}),
        "beaker_err_colocate_conflict": ([*BEAKER, *t, "--vllm-gpus", "1", "--", "--vllm_mode", "colocate"], {}),
        "beaker_err_server_no_gpu": ([*BEAKER, *t, "--gpus", "1", "--", *CFG], {}),
        "beaker_err_gpus_nan": ([*BEAKER, *t, "--gpus", "x"], {}),
        "beaker_async_7_plus_1": ([*BEAKER, *t, "--name", "async", "--gpus", "8", "--vllm-gpus", "1", "--",
                                   "--async_generation", "--max_staleness", "2"], {}),
        "beaker_err_async_colocated": ([*BEAKER, *t, "--gpus", "8", "--vllm-gpus", "0", "--", "--async_generation"],
                                       {}),
        "submit_vllm_node_spaces": ([*SUBMIT, "--nodes", "3", "--gpus-per-node", "8", "--partition", "gpu", "--time",
                                     "2-00:00:00", "--vllm-node", "--", "--reward_bench", "--wandb_run_name", "x y"], {}),
        "submit_options": ([*SUBMIT, "--nodes", "2", "--account", "a", "--qos", "q", "--job-name", "jj",
                            "--sbatch-arg=--constraint=h100", "--sbatch-arg", "--mem=0", "--", "--reward_bench"], {}),
        "submit_err_nodes": ([*SUBMIT, "--nodes", "0", "--", "--reward_bench"], {}),
        "sbatch_single_7_plus_1": ([*SBATCH, "--gpus-per-node", "8", "--vllm-gpus", "1", "--", "--reward_bench",
                                    "--wandb_run_name", "a b"], slurm("gpu01", 1)),
        "sbatch_dedicated_node": ([*SBATCH, "--gpus-per-node", "8", "--vllm-node", "--vllm-gpus", "2",
                                   "--accelerate-config", "zero3", "--", *CFG], slurm("gpu[01-03]", 3)),
        "sbatch_colocate_4_nodes": ([*SBATCH, "--gpus-per-node", "4", "--", "--reward_bench"],
                                    slurm("n1,n2,n3,n4", 4, job_id=77)),
        "sbatch_cli_vllm_node": ([*SBATCH, "--vllm-node", "--", *CFG], slurm("gpu[01-02]", 2)),
        "sbatch_roots_and_ports": ([*SBATCH, "--gpus-per-node", "2", "--vllm-gpus", "1", "--output-root", "/ckpt",
                                    "--data-root", "/d", "--main-process-port", "1234", "--vllm-port", "9000",
                                    "--vllm-gpu-memory-utilization", "0.7", "--vllm-max-model-len", "8192",
                                    "--vllm-health-timeout", "60", "--no-auto-resume", "--", "--model_name",
                                    "s3://b/m", "--config", str(config)], slurm("gpu01", 1)),
        "sbatch_err_vllm_node_1": ([*SBATCH, "--vllm-node", "--", "--reward_bench"], slurm("gpu01", 1)),
        "sbatch_err_vllm_gpus_2_nodes": ([*SBATCH, "--vllm-gpus", "1", "--", "--reward_bench"], slurm("a,b", 2)),
        "sbatch_err_no_train_gpu": ([*SBATCH, "--vllm-gpus", "8", "--gpus-per-node", "8", "--", "--reward_bench"],
                                    slurm("gpu01", 1)),
        "sbatch_err_missing_config": ([*SBATCH, "--", "--config", "configs/x.yaml"], slurm("gpu01", 1)),
        "sbatch_err_accelerate": ([*SBATCH, "--accelerate-config", "zero9"], slurm("gpu01", 1)),
        "sbatch_err_server_no_gpu": ([*SBATCH, "--", "--vllm_mode", "server"], slurm("gpu01", 1)),
        "sbatch_err_colocate_conflict": ([*SBATCH, "--vllm-gpus", "1", "--", "--vllm_mode", "colocate"],
                                         slurm("gpu01", 1)),
        "sbatch_async_7_plus_1": ([*SBATCH, "--gpus-per-node", "8", "--vllm-gpus", "1", "--", "--async_generation",
                                   "--max_staleness", "2"], slurm("gpu01", 1)),
        "sbatch_err_async_colocated": ([*SBATCH, "--", "--async_generation"], slurm("gpu01", 1)),
    }


def normalise(text: str, tmp: Path) -> str:
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True)
    if git.returncode == 0:
        text = text.replace(git.stdout.strip(), "<hash>")
    text = re.sub(r"-dirty-\d{14}", "-dirty-<time>", text)
    text = re.sub(r"\d{8}-\d{6}", "<time>", text)
    return text.replace(str(tmp), "<tmp>").replace(str(REPO), "<repo>")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/launch_dryruns")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "bin").mkdir()
        scontrol = tmp / "bin" / "scontrol"
        scontrol.write_text(FAKE_SCONTROL.format(python=sys.executable))
        scontrol.chmod(0o755)
        for case, (argv, extra) in cases(tmp).items():
            env = {**os.environ, "PYTHON": sys.executable, "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}", **extra}
            r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
            text = f"## {' '.join(argv)}\n## rc={r.returncode}\n## stdout\n{r.stdout}## stderr\n{r.stderr}"
            (out / f"{case}.txt").write_text(normalise(text, tmp))
            print(f"{case}: rc={r.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
