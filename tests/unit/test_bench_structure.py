"""The bench package's shape: its imports form a DAG, and no product module is named like a test."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).parents[2] / "olmocr_rl" / "bench"


def _module_name(path: Path) -> str:
    parts = path.relative_to(BENCH.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the bench modules it imports (relative imports, resolved)."""
    modules = {_module_name(path): path for path in BENCH.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
                candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
                targets |= {c for c in candidates if c in modules and c != name}
        graph[name] = targets
    return graph


def test_bench_imports_form_a_dag():
    graph = _imports()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join(path + (name,))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + (name,))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_no_function_local_imports_of_bench_modules():
    for path in BENCH.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local = [sub for sub in ast.walk(node) if isinstance(sub, ast.ImportFrom) and sub.level]
                assert not local, f"{path.name}:{node.name} imports {ast.unparse(local[0])}"


def test_no_product_module_is_named_like_a_test():
    named = [p.name for p in BENCH.rglob("*.py") if p.name.startswith("test_") or p.stem.endswith(("_test", "_tests"))]
    assert named == []
