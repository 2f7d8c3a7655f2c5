"""The package's shape, as scripts/check/structure.py reports it: no module over 600 lines, no function over 80,
no import cycle (function-local imports count), the launchers' bash under 150 lines in all. The checker itself
is tried on a small made-up package, so a limit it cannot see would show here."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("structure_check", REPO_ROOT / "scripts" / "check" / "structure.py")
structure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(structure)


def test_no_module_over_the_line_limit():
    assert structure.long_modules() == []


def test_no_function_over_the_line_limit():
    assert structure.long_functions() == []


def test_the_package_imports_form_no_cycle():
    assert structure.import_cycles() == []


def test_the_launchers_bash_is_small():
    lines = structure.launcher_bash_lines()
    assert lines, "no launcher scripts found"
    assert sum(lines.values()) <= structure.MAX_LAUNCHER_BASH_LINES, lines


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_the_checker_finds_cycles_long_functions_and_long_modules(tmp_path):
    pkg = structure.PACKAGE
    _write(tmp_path, f"{pkg}/__init__.py", "")
    _write(tmp_path, f"{pkg}/sub/__init__.py", "from .a import thing\n")
    _write(tmp_path, f"{pkg}/sub/a.py", "def thing():\n    from . import b  # a cycle hidden in a function\n")
    _write(tmp_path, f"{pkg}/sub/b.py", f"from {pkg}.sub.a import thing\n")
    _write(tmp_path, f"{pkg}/leaf.py", "import os\n")
    body = "".join(f"    x{i} = {i}\n" for i in range(structure.MAX_FUNCTION_LINES))
    _write(tmp_path, f"{pkg}/big.py", "def long():\n" + body + "\n" * structure.MAX_MODULE_LINES)
    assert structure.import_cycles(tmp_path) == [[f"{pkg}.sub.a", f"{pkg}.sub.b"]]
    assert [name for name, _ in structure.long_functions(tmp_path)] == [f"{pkg}.big.long (line 1)"]
    assert structure.long_functions(tmp_path)[0][1] == structure.MAX_FUNCTION_LINES + 1
    assert [name for name, _ in structure.long_modules(tmp_path)] == [f"{pkg}.big"]
    # The package __init__ re-exporting its submodule is not a cycle by itself.
    assert f"{pkg}.sub" not in sum(structure.import_cycles(tmp_path), [])
