"""Structure facts a reviewer can check: module sizes, function lengths, layers and import cycles, the root's
size, TRL's private surface, launcher bash.

    python scripts/check/structure.py            # report; exit 1 when a limit is broken

Limits: a module of the package at most MAX_MODULE_LINES lines; a function (or method) at most
MAX_FUNCTION_LINES lines; the package root at most MAX_ROOT_MODULES modules (the command-line front doors and
tiny shared utilities; the rest lives in subpackages); no import cycle between the package's modules and no
import from a lower layer into a higher one (LAYERS; every import counts, function-local ones too, so neither
can hide in a function); every private name (``._x``) used on TRL, transformers or vLLM listed in
``olmocr_rl/trainer/compat.py``; the launchers' bash at most MAX_LAUNCHER_BASH_LINES lines in all.
tests/unit/test_structure.py runs the same checks.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "olmocr_rl"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_LAUNCHER_BASH_LINES = 150
MAX_ROOT_MODULES = 10
LAUNCHER_BASH = ("scripts/grpotrainer-beaker.sh", "scripts/beaker", "scripts/slurm")

#: The import layers, lowest first: a module may import its own layer and the ones below, never one above.
#: Names are the package's top-level parts; ROOT stands for the other modules at the package root (the CLIs),
#: INIT for the package's own ``__init__`` (every import of a submodule runs it, so it sits lowest).
ROOT, INIT = "<root>", "<__init__>"
LAYERS: tuple[tuple[str, ...], ...] = (
    (INIT, "ranks"),
    # config declares the flags (defaults, choices) that data and model read, so it sits below them; it reads
    # olmorl's settings table (same layer), and imports nothing above itself.
    ("bench", "config", "olmorl", "storage"),
    ("data", "model"),
    # synth makes bench folders from HTML pages: it reuses bench (loading, scoring) and data (references, front
    # matter, the renderer's page size), and nothing above them.
    ("synth",),
    ("rewards",),
    ("telemetry",),
    ("trainer", "launch", "evaluation"),
    # recipe: the CPU reproduction of olmOCR 2's recipe (generated pages on the patch grid, the teacher's faulty
    # transcripts, and the stages above them): it reuses synth, bench and data, and may drive the trainer.
    ("recipe",),
    (ROOT,),
)
#: The libraries whose private names must be listed in COMPAT (olmocr_rl.trainer.compat.private_names()).
STACK = ("trl", "transformers", "vllm")
COMPAT = "olmocr_rl/trainer/compat.py"
#: Our own attributes kept on other libraries' objects carry this prefix (e.g. a cache on a vision tower).
OWN_PREFIX = "_olmocr_rl"
#: TRL's trainer class, and how many of our classes may stand between a trainer and it (the trainer included):
#: one class with every override, and a subclass for an objective.
TRAINER_ROOT = "GRPOTrainer"
MAX_TRAINER_CLASSES = 2
#: The trainer's private stack methods an instance wrap would replace (besides our trainer classes' own methods).
TRAINER_METHOD_NAMES = frozenset({"_generate", "_calculate_rewards", "_get_per_token_logps_and_entropies",
                                  "_generate_and_score_completions", "_generate_single_turn", "_save_checkpoint",
                                  "_load_from_checkpoint", "_load_optimizer_and_scheduler", "_run_epoch",
                                  "_get_train_sampler", "_init_training_state", "_compute_loss"})


#: path -> (text, tree): each module is parsed once per content (the checks read every module several times, and
#: tests run them on folders they write); _NODES: id of a cached tree -> its nodes in ast.walk's order.
_PARSED: dict[Path, tuple[str, ast.Module]] = {}
_NODES: dict[int, tuple[ast.AST, ...]] = {}


def _parse(path: Path) -> ast.Module:
    text = path.read_text()
    cached = _PARSED.get(path)
    if cached is None or cached[0] != text:
        if cached is not None:
            del _NODES[id(cached[1])]
        tree = ast.parse(text)
        _PARSED[path] = (text, tree)
        _NODES[id(tree)] = tuple(ast.walk(tree))
    return _PARSED[path][1]


def _walk(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node of ``tree``, as ast.walk gives them (read from the cache for a parsed module)."""
    return _NODES.get(id(tree)) or ast.walk(tree)


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
        for node in _walk(_parse(path)):
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
        for node in _walk(_parse(path)):
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


def root_modules(repo: Path = REPO) -> list[str]:
    """The modules at the package root (``__init__`` not counted)."""
    return sorted(p.stem for p in (repo / PACKAGE).glob("*.py") if p.name != "__init__.py")


def _rank(repo: Path) -> dict[str, int]:
    ranks = {name: i for i, names in enumerate(LAYERS) for name in names}
    for name in sorted(p.name for p in (repo / PACKAGE).iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        ranks.setdefault(name, -1)  # a subpackage no layer names: reported by unlayered()
    return ranks


def _layer(module: str, repo: Path) -> str:
    """A module's LAYERS name: INIT for the package, a top-level part LAYERS names, else the subpackage or ROOT."""
    parts = module.split(".")
    if len(parts) == 1:
        return INIT
    if any(parts[1] in names for names in LAYERS):
        return parts[1]
    return parts[1] if (repo / PACKAGE / parts[1]).is_dir() else ROOT


def unlayered(repo: Path = REPO) -> list[str]:
    """Subpackages that LAYERS does not place (add them to LAYERS where they belong)."""
    return sorted(name for name, rank in _rank(repo).items() if rank < 0)


def upward_imports(repo: Path = REPO) -> list[tuple[str, str]]:
    """``(importer, imported)`` pairs where a module imports from a higher layer than its own."""
    ranks = _rank(repo)
    found = []
    for module, targets in import_graph(repo).items():
        mine = ranks.get(_layer(module, repo), -1)
        for target in sorted(targets):
            theirs = ranks.get(_layer(target, repo), -1)
            if mine >= 0 and theirs > mine:
                found.append((module, target))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _super_names(cls: ast.ClassDef) -> set[str]:
    """Names reached as ``super().<name>`` anywhere in a class: the inherited methods it wraps."""
    return {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name) and n.value.func.id == "super"}


def own_private_names(trees: dict[str, ast.AST]) -> set[str]:
    """Private names the package defines itself: module-level and class-level names, methods that do not wrap
    an inherited one (no ``super().<name>`` in their class), and attributes assigned on ``self`` / ``cls``."""
    own: set[str] = set()
    for tree in trees.values():
        for node in _walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef)):
                inherited = _super_names(node) if isinstance(node, ast.ClassDef) else set()
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        if _private(item.name) and item.name not in inherited:
                            own.add(item.name)
                    targets = item.targets if isinstance(item, ast.Assign) else (
                        [item.target] if isinstance(item, (ast.AnnAssign, ast.AugAssign)) else [])
                    own.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                own.update(t.attr for t in targets if isinstance(t, ast.Attribute) and _private(t.attr)
                           and isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"))
    return own


def _private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of every private name this module reaches: ``x._y`` (``super()._y`` included),
    ``getattr(x, "_y")`` and its kin, and private parts of an imported stack module's path."""
    uses = []
    for node in _walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            uses.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            uses.append((node.lineno, node.args[1].value))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in STACK:
                    uses += [(node.lineno, part) for part in alias.name.split(".") if _private(part)]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in STACK:
            parts = (node.module or "").split(".") + [alias.name for alias in node.names]
            uses += [(node.lineno, part) for part in parts if _private(part)]
    return uses


def listed_private_names(repo: Path = REPO) -> frozenset[str]:
    """``private_names()`` of the package's COMPAT module (loaded from its file; it imports only the standard
    library), or nothing when it has none."""
    path = repo / COMPAT
    if not path.is_file():
        return frozenset()
    name = f"_structure_compat_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        return frozenset(module.private_names())
    finally:
        del sys.modules[name]


def compat_points(repo: Path = REPO) -> int:
    """The number of ``Point(...)`` entries in COMPAT (counted in its source)."""
    path = repo / COMPAT
    return path.read_text().count("    Point(") if path.is_file() else 0


def unlisted_private_uses(repo: Path = REPO) -> list[tuple[str, str]]:
    """``("file:line", name)`` for each private name a module of the package reaches that the package does not
    define itself (``OWN_PREFIX`` names are ours wherever they are stored) and COMPAT does not list. Every module counts, not only those importing
    TRL: the trainer's helper modules reach TRL's private names on a trainer without importing it (another library's names are listed there too)."""
    trees = {str(path.relative_to(repo)): _parse(path) for path in module_files(repo).values()}
    own = own_private_names(trees)
    listed = listed_private_names(repo)
    found = []
    for rel, tree in trees.items():
        if rel == COMPAT:
            continue
        found += [(f"{rel}:{line}", name) for line, name in sorted(set(_private_uses(tree)))
                  if name not in own and name not in listed and not name.startswith(OWN_PREFIX)]
    return found


def _trees(repo: Path) -> dict[str, ast.AST]:
    return {str(path.relative_to(repo)): _parse(path) for path in module_files(repo).values()}


def _classes(trees: dict[str, ast.AST]) -> dict[str, ast.ClassDef]:
    return {node.name: node for tree in trees.values() for node in _walk(tree) if isinstance(node, ast.ClassDef)}


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases if isinstance(b, (ast.Name, ast.Attribute))]


def trainer_chains(repo: Path = REPO) -> dict[str, list[str]]:
    """Each of our classes with TRL's ``TRAINER_ROOT`` among its ancestors: our classes in its method resolution
    order before that root (itself first, then every base of ours it reaches, mixins included)."""
    classes = _classes(_trees(repo))

    def ours(name: str, seen: tuple[str, ...] = ()) -> list[str]:
        found = [name]
        for base in _base_names(classes[name]):
            if base in classes and base not in seen and base not in found:
                found += [c for c in ours(base, seen + (name,)) if c not in found]
        return found

    def reaches(name: str, seen: tuple[str, ...] = ()) -> bool:
        bases = _base_names(classes[name])
        return TRAINER_ROOT in bases or any(reaches(b, seen + (name,)) for b in bases if b in classes and b not in seen)

    return {name: ours(name) for name in sorted(classes) if reaches(name)}


def _methods(cls: ast.ClassDef) -> list[str]:
    return [item.name for item in cls.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]


def private_overrides(repo: Path = REPO) -> dict[str, list[str]]:
    """Each private stack name COMPAT lists that a class of ours defines as a method: the classes that do."""
    listed = listed_private_names(repo)
    found: dict[str, list[str]] = {}
    for name, cls in sorted(_classes(_trees(repo)).items()):
        for method in _methods(cls):
            if method in listed:
                found.setdefault(method, []).append(name)
    return dict(sorted(found.items()))


def instance_patches(repo: Path = REPO) -> list[tuple[str, str]]:
    """``("file:line", name)`` where product code assigns a trainer method's name on an object (``x.name = ...`` or
    ``setattr(x, "name", ...)``): a trainer's behaviour goes in its class, not onto one instance."""
    trees = _trees(repo)
    classes = _classes(trees)
    ours = {c for chain in trainer_chains(repo).values() for c in chain}
    methods = {m for name in ours for m in _methods(classes[name]) if not m.startswith("__")}
    methods |= {m for m in listed_private_names(repo) if m in TRAINER_METHOD_NAMES}
    found = []
    for rel, tree in trees.items():
        for node in _walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            names = [(node.lineno, t.attr) for t in targets if isinstance(t, ast.Attribute)]
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
                names.append((node.lineno, node.args[1].value))
            found += [(f"{rel}:{line}", name) for line, name in names if name in methods]
    return sorted(found)


def launcher_bash_lines(repo: Path = REPO) -> dict[str, int]:
    out = {}
    for entry in LAUNCHER_BASH:
        path = repo / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in (".sh", ".sbatch"))
        for f in files:
            out[str(f.relative_to(repo))] = len(f.read_text().splitlines())
    return out


def report_trainer_shape() -> int:
    """Print the trainer classes' chains, the private overrides and the instance patches; the problems found."""
    problems = 0
    chains = trainer_chains()
    print(f"trainer classes (ours between a trainer and {TRAINER_ROOT}, limit {MAX_TRAINER_CLASSES}):")
    for name, chain in chains.items():
        print(f"  {len(chain)}  {name}: {' -> '.join(chain)} -> {TRAINER_ROOT}")
        problems += len(chain) > MAX_TRAINER_CLASSES
    overrides = private_overrides()
    twice = {name: owners for name, owners in overrides.items() if len(owners) > 1}
    print(f"private stack methods overridden: {len(overrides)}, more than once: {len(twice)}")
    for name, owners in overrides.items():
        print(f"  {len(owners)}  {name}: {', '.join(owners)}")
    problems += len(twice)
    patches = instance_patches()
    print(f"trainer methods patched on an instance: {len(patches)}")
    for where, name in patches:
        print(f"  {where}: {name} (override it in the trainer class instead)")
    problems += len(patches)
    return problems


def main() -> int:
    problems = 0
    for title, rows in (("modules over %d lines" % MAX_MODULE_LINES, long_modules()),
                        ("functions over %d lines" % MAX_FUNCTION_LINES, long_functions())):
        print(f"{title}: {len(rows)}")
        for name, size in rows:
            print(f"  {size:5d}  {name}")
        problems += len(rows)
    root = root_modules()
    print(f"modules at the package root: {len(root)} (limit {MAX_ROOT_MODULES}): {', '.join(root)}")
    problems += len(root) > MAX_ROOT_MODULES
    cycles = import_cycles()
    print(f"import cycles: {len(cycles)}")
    for group in cycles:
        print("  " + " <-> ".join(group))
    problems += len(cycles)
    print("layers (low -> high): " + " < ".join(", ".join(names) for names in LAYERS))
    missing = unlayered()
    print(f"subpackages in no layer: {len(missing)}" + (f" ({', '.join(missing)}: add them to LAYERS)" if missing else ""))
    upward = upward_imports()
    print(f"upward imports: {len(upward)}")
    for importer, imported in upward:
        print(f"  {importer} -> {imported}")
    problems += len(missing) + len(upward)
    unlisted = unlisted_private_uses()
    print(f"private TRL/transformers/vLLM names used: {len(listed_private_names())} listed in {COMPAT} "
          f"({compat_points()} points), {len(unlisted)} unlisted")
    for where, name in unlisted:
        print(f"  {where}: {name} is not in {COMPAT}; add a Point for it (or, for another library's name, an "
              "OTHER_PRIVATE_NAMES entry)")
    problems += len(unlisted)
    problems += report_trainer_shape()
    bash = launcher_bash_lines()
    total = sum(bash.values())
    print(f"launcher bash: {total} lines (limit {MAX_LAUNCHER_BASH_LINES})")
    for name, size in bash.items():
        print(f"  {size:5d}  {name}")
    problems += total > MAX_LAUNCHER_BASH_LINES
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
