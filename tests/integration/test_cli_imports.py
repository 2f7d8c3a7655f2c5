"""The training command line keeps peft out of a run without --use_peft (grpo_train.keep_peft_out): transformers and
TRL import peft whenever it is installed, so only this decision, taken before they load, spares a full fine-tune
the cost. Each case runs in a fresh interpreter, as the command line does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _after_decision(flags: list[str], before: str = "") -> str:
    """After keep_peft_out(flags) in a fresh interpreter: ``peft`` in sys.modules (absent / blocked / loaded), whether
    the check transformers' is_peft_available() makes (importlib.util.find_spec) finds it, and whether transformers
    is loaded. (Importing peft itself would load torch: seconds each.)"""
    code = (f"import importlib.util, sys\n{before}\nfrom olmocr_rl.grpo_train import keep_peft_out\n"
            f"keep_peft_out({flags!r})\n"
            "state = 'absent' if 'peft' not in sys.modules else ('blocked' if sys.modules['peft'] is None else 'loaded')\n"
            "found = 'found' if importlib.util.find_spec('peft') is not None else 'not found'\n"
            "if found == 'not found':\n    try:\n        import peft\n        found = 'imports anyway'\n"
            "    except ImportError:\n        pass\n"
            "print(state, found, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_run_without_use_peft_marks_peft_absent_before_transformers_loads():
    assert _after_decision(["--model_name", "m", "--train_bench_data_folder", "b"]) == "blocked not found False"


def test_a_lora_run_keeps_peft_importable():
    assert _after_decision(["--model_name", "m", "--use_peft"]) == "absent found False"


def test_use_peft_from_the_yaml_config_counts(tmp_path):
    config = tmp_path / "lora.yaml"
    config.write_text("use_peft: true\nlora_r: 4\n")
    assert _after_decision(["--config", str(config), "--model_name", "m"]) == "absent found False"


def test_a_process_that_already_loaded_transformers_is_left_alone():
    # transformers' own modules may hold peft's names already; marking it absent now would split the process.
    stand_in = "sys.modules['transformers'] = type(sys)('transformers')"  # loaded, as far as the decision can see
    assert _after_decision(["--model_name", "m"], before=stand_in) == "absent found True"


def test_a_bad_flag_exits_as_the_command_line_does():
    code = "from olmocr_rl.grpo_train import cli\ncli(['--no_such_flag'])"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--no_such_flag" in done.stderr and "Traceback" not in done.stderr


def _engines_after(flags: list[str], env: dict[str, str], then: str = "") -> str:
    """After keep_engines_out(flags) in a fresh interpreter with ``env`` added: each of deepspeed and wandb
    absent / blocked / loaded, after running ``then``."""
    code = (f"import sys\nfrom olmocr_rl.grpo_train import keep_engines_out\nkeep_engines_out({flags!r})\n{then}\n"
            "print(*('absent' if n not in sys.modules else ('blocked' if sys.modules[n] is None else 'loaded')"
            " for n in ('deepspeed', 'wandb')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ACCELERATE_USE_DEEPSPEED": "false", **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_plain_run_does_not_import_deepspeed_or_an_unused_wandb():
    # What building the trainer does: transformers' Trainer unwraps the model through accelerate, which imports
    # DeepSpeed whenever it is installed (accelerate.utils.other.extract_model_from_parallel). transformers' and
    # TRL's is_wandb_available() import wandb when importlib.util.find_spec finds it (importing TRL's trainer
    # here would cost 10 s of CPU, so the test stops at the check they make).
    then = ("import importlib.util, torch\nfrom accelerate.utils import extract_model_from_parallel\n"
            "extract_model_from_parallel(torch.nn.Linear(1, 1))\nassert importlib.util.find_spec('wandb') is None")
    assert _engines_after(["--model_name", "m", "--report_to", "none"], {}, then) == "blocked blocked"


def test_deepspeed_and_wandb_stay_importable_when_the_run_uses_them():
    # accelerate launch with a DeepSpeed config sets ACCELERATE_USE_DEEPSPEED=true; --report_to wandb is the default
    assert _engines_after(["--model_name", "m"], {"ACCELERATE_USE_DEEPSPEED": "true"}) == "absent absent"
    assert _engines_after(["--model_name", "m", "--report_to", "tensorboard,wandb"], {}) == "blocked absent"
    assert _engines_after(["--model_name", "m", "--report_to", "all"], {}) == "blocked absent"  # main reports it
