"""The flags of ``python -m olmocr_rl.grpo_train``: the parser, generated from the declarations, and the
``--config`` YAML merge.

Every flag of olmOCR's trainer keeps its name, type, default and meaning, with the fixes listed in
docs/design.md ("Where olmocr_rl differs"): booleans can be switched off (``--no-X`` or ``--X false``),
``exo`` is not a loss, ``--lr_schedule constant`` changes only the scheduler, evaluation runs when ``--eval_steps`` asks.
``--config FILE.yaml`` supplies flag values (keys = flag names); the command line overrides the file.
Each flag is declared once, as a field of ``options.ResolvedConfig`` (the ``--reward_*`` ones as rows of the
reward table); this module turns those declarations into argparse arguments. Light: no torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from olmocr_rl.config import options
from olmocr_rl.config.options import REWARDS, TRL_KNOBS, Flag, declared
from olmocr_rl.config.rewards import flag_value, reward_table
from olmocr_rl.config.values import (  # noqa: F401  (re-exported: the names other modules import from here)
    LORA_TARGET_MODULES,
    LOSS_TYPES,
    PROMPT_TEXT_TOKENS,
    BoolFlag,
    ConfigError,
    parse_bool,
)

#: The GRPOConfig fields exposed under their own names (the TRL_KNOBS group); the flag's default is TRL 1.16's
#: (olmOCR sets none of them), so a run that gives none of them builds the GRPOConfig it built before they existed.
TRL_KNOB_FLAGS = tuple(name for name, _, spec in declared() if spec.group == TRL_KNOBS)
#: The argparse type of a flag whose ``Flag.parse`` follows its annotation (None: the value as written).
_ANNOTATION_TYPES: dict[str, Any] = {"int": int, "float": float}


def _reward_type(key: str) -> Callable[[Any], float | str | None]:
    """argparse ``type`` of ``--reward_<key>``: the value's form (config.rewards.flag_value); validation parses it."""

    def reward_value(value: Any) -> float | str | None:
        try:
            return flag_value(key, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    reward_value.__name__ = f"reward_{key}"
    return reward_value


class _OneLineErrorParser(argparse.ArgumentParser):
    """A parse error is one ``error: ...`` line (exit 2), not argparse's usage block above it; ``error_prefix`` goes
    before it (e.g. the command's name)."""

    error_prefix = ""

    def error(self, message: str):
        hint = f" ({self.prog} --help lists every flag)" if "unrecognized" in message else ""
        self.exit(2, f"{self.error_prefix}error: {message}{hint}\n")


def declared_parser(config_class: type, *, prog: str, description: str, epilog: str | None = None,
                    error_prefix: str = "", group_hooks: dict[str, Callable[[Any], None]] | None = None
                    ) -> argparse.ArgumentParser:
    """A parser with one argument per flag field of ``config_class`` (``options.flag``), in its group, defaults shown
    in ``--help``; ``group_hooks[group]`` adds arguments of its own to a group when it is created. The parser knows
    its declarations (``--config`` YAML values are converted by them)."""
    parser = _OneLineErrorParser(prog=prog, description=description, epilog=epilog,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.error_prefix = error_prefix
    parser.declared_class = config_class
    groups: dict[str, Any] = {}
    for name, annotation, spec in declared(config_class):
        if spec.group not in groups:
            groups[spec.group] = parser.add_argument_group(spec.group)
            if group_hooks and spec.group in group_hooks:
                group_hooks[spec.group](groups[spec.group])
        names, kwargs = _argument(name, annotation, spec)
        groups[spec.group].add_argument(*names, **kwargs)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The trainer's parser: one argument per declared flag (``options.ResolvedConfig``), in its group."""
    return declared_parser(
        options.ResolvedConfig,
        prog="python -m olmocr_rl.grpo_train",
        description=(
            "GRPO fine-tuning of a vision-language OCR model (Qwen2.5-VL, Qwen3-VL dense or MoE, Qwen2-VL) on an "
            "olmOCR-bench folder, "
            "rewarded by the unit tests of each page. Flags follow olmOCR's trainer; --config FILE.yaml "
            "supplies any of them (the command line wins)."
        ),
        epilog=(
            "The value a flag will take (command line over --config YAML over default): "
            "python -m olmocr_rl.config --print KEY [these flags], or --print-all for every flag as JSON."
        ),
        group_hooks={REWARDS: _add_reward_flags},
    )


def _argument(name: str, annotation: str, spec: Flag) -> tuple[list[str], dict[str, Any]]:
    """``add_argument``'s names and keywords for one declared flag."""
    kwargs: dict[str, Any] = {"default": list(spec.default) if isinstance(spec.default, list) else spec.default}
    if spec.aliases:
        kwargs["dest"] = name
    base = annotation.replace(" | None", "")
    if spec.action is not None:
        kwargs["action"] = spec.action
    elif base == "bool":
        kwargs["action"] = BoolFlag
    if "action" not in kwargs or kwargs["action"] == "append":
        parse = _ANNOTATION_TYPES.get(base) if spec.parse is options.FROM_TYPE else spec.parse
        if parse is not None:
            kwargs["type"] = parse
    for key in ("choices", "nargs", "const", "metavar"):
        if getattr(spec, key) is not None:
            kwargs[key] = getattr(spec, key)
    return ["--" + name, *spec.aliases], {**kwargs, "help": spec.help}


def _aliases() -> dict[str, str]:
    """Flag aliases (another name for the same value), accepted on the command line and as YAML keys."""
    return {alias.lstrip("-"): name for name, _, spec in declared() for alias in spec.aliases}


#: The aliases of the declared flags (alias -> flag name).
ALIASES = _aliases()


def _takes_list(action: argparse.Action, config_class: type | None = None) -> bool:
    """A flag that takes one or more values, given as a YAML list or a single string in --config files."""
    return any(name == action.dest and (spec.nargs == "+" or isinstance(spec.nargs, int) or spec.action == "append")
               for name, _, spec in declared(config_class))


def _takes_mapping(action: argparse.Action, config_class: type | None = None) -> bool:
    """A flag whose value is a mapping (a JSON object on the command line, a YAML mapping in --config files)."""
    return any(name == action.dest and annotation.startswith("Mapping") for name, annotation, _ in declared(config_class))


def _add_reward_flags(group) -> None:
    """One ``--reward_<key>`` flag per row of the reward table (olmocr_rl.config.rewards)."""
    for entry in reward_table():
        group.add_argument(entry.flag, nargs="?", const=1.0, default=None, type=_reward_type(entry.key),
                           metavar="W", help=entry.help)


def flag_key(name: str) -> str:
    """The attribute a flag or YAML key names: ``--num-completions`` -> ``num_generations``."""
    dest = str(name).lstrip("-").replace("-", "_")
    return _aliases().get(dest, dest)


def _yaml_value(action: argparse.Action, value: Any, config_class: type | None = None) -> Any:
    """A YAML value converted as the command line converts it. Raises ArgumentTypeError or ValueError."""
    if isinstance(value, list) and not _takes_list(action, config_class):
        raise argparse.ArgumentTypeError(f"expected a single value, got a list {value!r}")
    if isinstance(value, dict):
        if not _takes_mapping(action, config_class):
            raise argparse.ArgumentTypeError(f"expected a single value, got a mapping {value!r}")
        return value
    if isinstance(action, BoolFlag):
        value = action.type(value)
    elif action.type is int and isinstance(value, float):
        value = action.type(str(value))  # 1.5 is refused as on the command line, not truncated to 1
    elif action.type is not None and value is not None and not isinstance(value, list):
        value = action.type(value)
    if action.choices and value is not None and value not in action.choices:
        raise argparse.ArgumentTypeError(f"choose one of {', '.join(map(str, action.choices))}")
    if _takes_list(action, config_class) and isinstance(value, str):
        value = [value]
    wrong_count = not isinstance(value, list) or len(value) != action.nargs
    if isinstance(action.nargs, int) and value is not None and wrong_count:
        raise argparse.ArgumentTypeError(f"expected a list of {action.nargs} values, got {value!r}")
    return value


def yaml_defaults(parser: argparse.ArgumentParser, path: str) -> dict[str, Any]:
    """The flag values in a ``--config`` YAML file, converted like the command line. Raises ConfigError."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--config {path}: file not found")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values")
    known = {a.dest: a for a in parser._actions}
    out = {}
    for key, value in data.items():
        dest = flag_key(key)
        if dest not in known or dest in ("help", "config"):
            close = [k for k in known if k.startswith(dest[:6])][:3]
            raise ConfigError(f"--config {path}: unknown key {key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        try:
            out[dest] = _yaml_value(known[dest], value, getattr(parser, "declared_class", None))
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise ConfigError(f"--config {path}: key {key!r}: {exc}") from None
    return out


#: Attribute ``parse_args`` adds to its Namespace (not a flag): the flags the user chose.
CHOSEN = "_chosen"
#: Attribute ``parse_args`` adds to its Namespace (not a flag): the flags whose value is the ``--config`` file's
#: (keys of the file that the command line does not give again), so that a message can say where a value came from.
FROM_CONFIG_FILE = "_from_config_file"


def parse_args(argv: list[str] | None = None, build: Callable[[], argparse.ArgumentParser] | None = None
               ) -> argparse.Namespace:
    """Parse flags (YAML first, command line on top). A bad flag or file: one ``error:`` line, SystemExit(2).

    ``build`` makes the parser (default: the trainer's, :func:`build_parser`; another command's comes from
    :func:`declared_parser`). The Namespace also holds, as ``CHOSEN``, the flags the user chose: given on the command
    line or as keys of the ``--config`` file, whatever their value (a flag set to its default value is still chosen),
    and, as ``FROM_CONFIG_FILE``, those whose value is the file's (the command line does not give them again).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    build = build or build_parser
    parser = build()
    pre, _ = parser.parse_known_args(argv)
    from_file: dict[str, Any] = {}
    if pre.config:
        try:
            from_file = yaml_defaults(parser, pre.config)
        except ConfigError as exc:
            parser.error(str(exc))
        parser.set_defaults(**from_file)
    args = parser.parse_args(argv)
    on_command_line = _given_on_command_line(argv, build)
    setattr(args, CHOSEN, frozenset(from_file) | on_command_line)
    setattr(args, FROM_CONFIG_FILE, frozenset(from_file) - on_command_line)
    return args


def _given_on_command_line(argv: list[str], build: Callable[[], argparse.ArgumentParser] | None = None) -> set[str]:
    """The flags (dest names) written in ``argv`` (already parsed once, so it parses)."""
    parser = (build or build_parser)()
    for action in parser._actions:  # a flag without a default is in the Namespace only when it was given
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"config", "help"}


def explicit_flags(argv: list[str]) -> set[str]:
    """The flags (dest names) the user chose in ``argv`` (see parse_args). Raises SystemExit(2) as parse_args."""
    return set(getattr(parse_args(argv), CHOSEN))


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """Every flag's value in ``args`` (without what parse_args adds that is not a flag)."""
    return {name: value for name, value in vars(args).items() if not name.startswith("_")}
