"""Flags of ``python -m olmocr_rl.grpo_train``: parsing, YAML merge, validation, and the GRPOConfig.

    args = parse_args(argv)       # flags.py: the parser, generated from options.py's declarations, + --config YAML
    cfg = validate(args)          # resolved.py: checks.py's pure checks -> a frozen ResolvedConfig (options.py)
    build_grpo_config(cfg, ...)   # grpo.py: TRL's GRPOConfig (imports trl only when called)

Validation happens before any model loads: a bad combination raises :class:`ConfigError` with one line
that says what to write instead. ``python -m olmocr_rl.config --print KEY [flags]`` prints the value a
flag will take. Each flag is declared once, as a field of ``options.ResolvedConfig`` (the ``--reward_*`` ones as
rows of ``rewards.py``). Importing this package loads argparse and yaml, not torch.
"""

from olmocr_rl.config.checks import default_vllm_max_model_length, max_image_tokens
from olmocr_rl.config.environment import Environment, cuda_available, probe_environment, vllm_available
from olmocr_rl.config.flags import PROMPT_TEXT_TOKENS, ConfigError, build_parser, explicit_flags, parse_args, parse_bool
from olmocr_rl.config.grpo import build_grpo_config
from olmocr_rl.config.resolved import ResolvedConfig, validate

__all__ = [
    "PROMPT_TEXT_TOKENS",
    "ConfigError",
    "Environment",
    "ResolvedConfig",
    "build_grpo_config",
    "build_parser",
    "cuda_available",
    "explicit_flags",
    "default_vllm_max_model_length",
    "max_image_tokens",
    "parse_args",
    "parse_bool",
    "probe_environment",
    "validate",
    "vllm_available",
]
