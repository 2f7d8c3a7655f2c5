"""The package's shape, as scripts/check/structure.py reports it: no module over 600 lines, no function over 80,
at most 10 modules at the root, no import cycle and no upward import between the layers (function-local imports
count), every private TRL/transformers/vLLM name in trainer/compat.py, one trainer class extended one way (at most
two of ours before GRPOTrainer, each private override once, no instance wraps), the launchers' bash under 150
lines in all. The checker itself is tried on small made-up packages, so a limit it cannot see would show here."""

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


def test_the_root_holds_only_the_front_doors():
    root = structure.root_modules()
    assert len(root) <= structure.MAX_ROOT_MODULES, root
    assert {"grpo_train", "validate_bench", "evaluate", "report", "soup", "tiny_model", "gpu_check"} <= set(root)


def test_every_subpackage_has_a_layer_and_no_import_goes_up():
    assert structure.unlayered() == []
    assert structure.upward_imports() == []


def test_every_private_name_of_the_stack_is_listed_in_compat():
    assert structure.unlisted_private_uses() == []
    assert "_calculate_rewards" in structure.listed_private_names()


def test_one_trainer_class_extended_one_way():
    """At most two of our classes before GRPOTrainer, each private stack method overridden once, and no trainer
    method replaced on an instance."""
    chains = structure.trainer_chains()
    assert chains["OlmoRLGRPOTrainer"] == ["OlmoRLGRPOTrainer", "PlainGRPOTrainer"]
    assert all(len(chain) <= structure.MAX_TRAINER_CLASSES for chain in chains.values()), chains
    overrides = structure.private_overrides()
    assert overrides["_calculate_rewards"] == ["PlainGRPOTrainer"]
    assert {name: owners for name, owners in overrides.items() if len(owners) > 1} == {}
    assert structure.instance_patches() == []


def test_the_checker_finds_a_mixin_stack_a_second_override_and_an_instance_wrap(tmp_path):
    pkg = structure.PACKAGE
    _write(tmp_path, f"{pkg}/__init__.py", "")
    _write(tmp_path, f"{pkg}/trainer/__init__.py", "")
    _write(tmp_path, f"{pkg}/trainer/compat.py",
           "def private_names():\n    return frozenset({'_run_epoch', '_generate'})\n")
    _write(tmp_path, f"{pkg}/trainer/stack.py", """\
        from trl import GRPOTrainer


        class OrderMixin:
            def _run_epoch(self, *args):
                return super()._run_epoch(*args)


        class SamplingMixin:
            def _run_epoch(self, *args):
                return super()._run_epoch(*args)

            def _refill(self):
                return None


        class Trainer(OrderMixin, SamplingMixin, GRPOTrainer):
            pass


        def instrument(trainer):
            trainer._generate = None
            setattr(trainer, "_refill", None)
            trainer.padding_free = True  # a value, not a method
        """)
    assert structure.trainer_chains(tmp_path) == {"Trainer": ["Trainer", "OrderMixin", "SamplingMixin"]}
    assert structure.private_overrides(tmp_path) == {"_run_epoch": ["OrderMixin", "SamplingMixin"]}
    assert structure.instance_patches(tmp_path) == [(f"{pkg}/trainer/stack.py:22", "_generate"),
                                                    (f"{pkg}/trainer/stack.py:23", "_refill")]


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


def test_the_checker_finds_upward_imports_unlayered_packages_and_a_crowded_root(tmp_path):
    pkg = structure.PACKAGE
    _write(tmp_path, f"{pkg}/__init__.py", "")
    _write(tmp_path, f"{pkg}/bench/__init__.py", "")
    _write(tmp_path, f"{pkg}/bench/low.py", "def f():\n    from olmocr_rl.trainer import high  # upward, in a function\n")
    _write(tmp_path, f"{pkg}/trainer/__init__.py", "")
    _write(tmp_path, f"{pkg}/trainer/high.py", "from olmocr_rl.bench import low\nimport olmocr_rl.ranks\n")
    _write(tmp_path, f"{pkg}/ranks.py", "")
    _write(tmp_path, f"{pkg}/cli.py", "from olmocr_rl.trainer import high\n")  # the root may import any layer
    _write(tmp_path, f"{pkg}/newpkg/__init__.py", "")
    assert structure.upward_imports(tmp_path) == [(f"{pkg}.bench.low", f"{pkg}.trainer.high")]
    assert structure.unlayered(tmp_path) == ["newpkg"]
    for i in range(structure.MAX_ROOT_MODULES):
        _write(tmp_path, f"{pkg}/front_{i}.py", "")
    assert len(structure.root_modules(tmp_path)) == structure.MAX_ROOT_MODULES + 2  # cli, ranks and ten more


def test_the_checker_finds_a_private_stack_name_that_compat_does_not_list(tmp_path):
    pkg = structure.PACKAGE
    _write(tmp_path, f"{pkg}/__init__.py", "")
    _write(tmp_path, f"{pkg}/trainer/__init__.py", "")
    _write(tmp_path, f"{pkg}/trainer/compat.py", "def private_names():\n    return frozenset({'_listed'})\n")
    _write(tmp_path, f"{pkg}/trainer/mixin.py", """\
        class Mixin:  # reaches TRL's names on self without importing TRL
            _own_flag = False

            def __init__(self):
                self._own_state = 0

            def _own_helper(self):
                return self._own_state + self._own_flag

            def _wrapped(self, x):  # an override: it calls super()
                return super()._wrapped(x)

            def _entry(self):  # an override whose super() call sits in another method of the class
                return self._own_helper()

            def _real_entry(self):
                return super()._entry()

            def log(self):
                self._listed.append(1)
                return self._unlisted_attr, getattr(self, "_by_string")
        """)
    _write(tmp_path, f"{pkg}/trainer/swap.py", """\
        import vllm._hidden_ops as ops
        from trl.trainer import _hidden_module


        def patch(trainer):
            trainer._own_helper = None  # assigning on another object does not make the name ours
            trainer._olmocr_rl_cache = {}  # ours by its prefix, wherever it is stored
            trainer._generate = None
            ops._flag = False
        """)
    found = structure.unlisted_private_uses(tmp_path)
    names = sorted({name for _, name in found})
    # not: _own_flag, _own_state, _own_helper (ours, even when assigned on another object), _real_entry (ours:
    # no super() call of it), _listed (in compat)
    assert names == ["_by_string", "_entry", "_flag", "_generate", "_hidden_module", "_hidden_ops", "_unlisted_attr",
                     "_wrapped"], found
    assert ("olmocr_rl/trainer/swap.py:8", "_generate") in found
    (tmp_path / pkg / "trainer" / "compat.py").write_text(
        "def private_names():\n    return frozenset({'_listed', '_by_string', '_entry', '_flag', '_generate', "
        "'_hidden_module', '_hidden_ops', '_unlisted_attr', '_wrapped'})\n")
    assert structure.unlisted_private_uses(tmp_path) == []


def test_no_two_test_files_share_a_basename():
    """pytest imports test modules by basename (no __init__.py in tests/): a second tests/*/test_x.py stops the
    collection of a run over several folders."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
