"""Structure facts a reviewer can check: module sizes, function lengths, import cycles, launcher bash.

    python scripts/check/structure.py            # report; exit 1 when a limit is broken

Limits: a module of the package at most MAX_MODULE_LINES lines; a function (or method) at most
MAX_FUNCTION_LINES lines; no import cycle between the package's modules (every import counts,
function-local ones too, so a cycle cannot hide in a function); the launchers' bash at most
MAX_LAUNCHER_BASH_LINES lines in all. tests/unit/test_structure.py runs the same checks.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "olmocr_rl"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_LAUNCHER_BASH_LINES = 150
LAUNCHER_BASH = ("scripts/grpotrainer-beaker.sh", "scripts/beaker", "scripts/slurm")


def module_files(repo: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted((repo / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(repo).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def long_modules(repo: Path = REPO) -> list[tuple[str, int]]:
    sizes = [(name, len(path.read_text().splitlines())) for name, path in module_files(repo).items()]
    return sorted(((n, s) for n, s in sizes if s > MAX_MODULE_LINES), key=lambda x: -x[1])


def long_functions(repo: Path = REPO) -> list[tuple[str, int]]:
    found = []
    for name, path in module_files(repo).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append((f"{name}.{node.name} (line {node.lineno})", length))
    return sorted(found, key=lambda x: -x[1])


def _targets(node: ast.AST, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """The package modules an import statement loads (the most specific existing module per name)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    out = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE) and name != module:
            out.append(name)
    return out


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    files = module_files(repo)
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_targets(node, name, path.name == "__init__.py", modules))
        graph[name] = edges
    return graph


def import_cycles(repo: Path = REPO) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    graph = import_graph(repo)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def launcher_bash_lines(repo: Path = REPO) -> dict[str, int]:
    out = {}
    for entry in LAUNCHER_BASH:
        path = repo / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in (".sh", ".sbatch"))
        for f in files:
            out[str(f.relative_to(repo))] = len(f.read_text().splitlines())
    return out


def main() -> int:
    problems = 0
    for title, rows in (("modules over %d lines" % MAX_MODULE_LINES, long_modules()),
                        ("functions over %d lines" % MAX_FUNCTION_LINES, long_functions())):
        print(f"{title}: {len(rows)}")
        for name, size in rows:
            print(f"  {size:5d}  {name}")
        problems += len(rows)
    cycles = import_cycles()
    print(f"import cycles: {len(cycles)}")
    for group in cycles:
        print("  " + " <-> ".join(group))
    problems += len(cycles)
    bash = launcher_bash_lines()
    total = sum(bash.values())
    print(f"launcher bash: {total} lines (limit {MAX_LAUNCHER_BASH_LINES})")
    for name, size in bash.items():
        print(f"  {size:5d}  {name}")
    problems += total > MAX_LAUNCHER_BASH_LINES
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
