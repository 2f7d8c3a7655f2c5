"""Print, one per line, the uv arguments that make ``uv pip install`` look where this machine's pip looks.

uv reads no pip configuration: a machine whose pip.conf (or PIP_* variables) adds a local wheel folder, extra
indexes or a constraints file would resolve differently under uv, or download what pip takes from disk. This
reads ``python -m pip config list`` (the same files and variables pip itself reads; a variable wins over a file)
and prints the matching uv flags: index-url, extra-index-url, find-links, constraint and no-index. Used by
scripts/setup_env.sh; stdlib only, so any Python runs it.
"""

from __future__ import annotations

import ast
import subprocess
import sys

# pip option -> uv flag; every value may hold several space-separated entries (pip's own rule for these)
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}


def pip_config(listing: str) -> dict[str, str]:
    """``{option: value}`` from ``pip config list`` output (``global.find-links='/opt/wheels'``, ``:env:.x='y'``);
    the sections pip install reads: ``global``, ``install`` (which wins over global) and the environment
    (``:env:``, which wins over both)."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or "." not in key:
            continue
        section, option = key.rsplit(".", 1)
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip().strip("'\"")
        rank = {"global": 0, "install": 1, ":env:": 2}.get(section)
        if rank is None:  # another command's section (download, wheel, ...)
            continue
        if option not in found or rank >= found[option][0]:
            found[option] = (rank, str(value))
    return {option: value for option, (_rank, value) in found.items()}


def uv_args(config: dict[str, str]) -> list[str]:
    """The uv flags for the options uv has a match for."""
    args: list[str] = []
    for option, flag in FLAGS.items():
        for entry in config.get(option, "").split():
            args += [flag, entry]
    if config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    return args


def main() -> int:
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             check=False).stdout
    print("\n".join(uv_args(pip_config(listing))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
