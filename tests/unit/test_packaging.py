"""The CPU install: pinned stack, no torchvision and no CUDA torch in the core or dev set; a self-contained repo."""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib

import torch

from conftest import REPO_ROOT


def _project() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def test_pins_and_extras():
    deps = _project()["dependencies"]
    for pin in ("torch==2.13.0", "trl==1.16.0", "transformers==5.17.0", "accelerate==1.15.0", "peft==0.21.2"):
        assert pin in deps
    extras = _project()["optional-dependencies"]
    assert not any(d.startswith("torchvision") for d in deps + extras["dev"])
    assert "torchvision==0.28.0" in extras["gpu"] and "vllm==0.31.0" in extras["gpu"]


def test_environment_has_the_cpu_stack():
    assert md.version("trl") == "1.16.0" and md.version("transformers") == "5.17.0"
    assert md.version("peft") == "0.21.2"
    assert torch.__version__.split("+")[0] == "2.13.0"
    try:
        md.version("torchvision")
    except md.PackageNotFoundError:
        pass
    else:  # a GPU box installs the gpu extra; on CPU machines torchvision breaks transformers
        assert torch.cuda.is_available(), "torchvision is installed in a CPU environment"
    if not torch.cuda.is_available():
        assert torch.version.cuda is None, f"a CUDA build of torch on a machine without a GPU: {torch.__version__}"


def test_the_repository_stands_alone():
    """Product code, scripts, configs and docs never point at design files outside the repository."""
    root = REPO_ROOT
    outside = re.compile(r"shared/spec|DESIGN\.md|olmocr-reference|reference §")
    files = [p for pattern in ("olmocr_rl/**/*.py", "scripts/**/*", "configs/**/*", "docs/**/*.md", "*.md",
                               "pyproject.toml", "Dockerfile")
             for p in root.glob(pattern) if p.is_file() and p.suffix not in (".png", ".pdf")]
    assert len(files) > 50
    offenders = [f"{p.relative_to(root)}:{n}" for p in files
                 for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if outside.search(line)]
    assert not offenders, offenders
