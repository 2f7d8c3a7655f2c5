"""``python -m olmocr_rl.config --print KEY [trainer flags...]``: the value the trainer will use for KEY.

The command line wins over ``--config`` YAML, which wins over the default, exactly as in
``python -m olmocr_rl.grpo_train``; the value is the parsed one (before validation). ``--print-all``
prints every flag as one JSON object. Strings print bare, everything else as JSON (``null``, ``true``, ``[...]``).
An unknown key or a bad flag or config file: one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from olmocr_rl.config.flags import _OneLineErrorParser, flag_key, flag_values, parse_args


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(
        prog="python -m olmocr_rl.config", allow_abbrev=False,
        description="Print the value `python -m olmocr_rl.grpo_train` will use for a flag: the command line over "
                    "--config YAML over the default. Any trainer flag may follow.",
        epilog="e.g. python -m olmocr_rl.config --print learning_rate --config configs/olmocr2-7b.yaml",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--print", dest="key", metavar="KEY", help="the flag name (without --) whose value to print")
    what.add_argument("--print-all", action="store_true", help="every flag and its value, as one JSON object")
    return parser


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def main(argv: list[str] | None = None) -> int:
    own, trainer_argv = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    values = flag_values(parse_args(trainer_argv))  # a bad flag or --config file exits 2 with one error line
    if own.print_all:
        print(json.dumps(values, indent=2, sort_keys=True))
        return 0
    key = flag_key(own.key)
    if key not in values:
        print(f"error: --print {own.key}: unknown key; `python -m olmocr_rl.grpo_train --help` lists every flag",
              file=sys.stderr)
        return 2
    print(_show(values[key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
