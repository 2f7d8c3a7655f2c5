#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install olmocr_rl with its dev
# extra. Reinstalls only when pyproject.toml changed since the last successful install.
# Usage: source-free; `bash scripts/setup_env.sh` prints the venv's python path on its last line.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${OLMOCR_RL_VENV:-$repo_root/.venv}"
python_bin="${PYTHON:-}"
if [[ -z "$python_bin" ]]; then
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin="$candidate"; break; fi
  done
fi
if [[ -z "$python_bin" ]]; then
  echo "error: no python3 found; install Python >= 3.11 or set PYTHON=/path/to/python" >&2
  exit 1
fi
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: $python_bin is $("$python_bin" --version 2>&1); olmocr_rl needs Python >= 3.11 (set PYTHON=...)" >&2
  exit 1
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "[setup] creating virtual environment in $venv" >&2
  "$python_bin" -m venv "$venv"
fi

stamp="$venv/.olmocr_rl-installed"
want="$(cat "$repo_root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
have="$(cat "$stamp" 2>/dev/null || true)"
if [[ "$want" != "$have" ]]; then
  echo "[setup] installing olmocr_rl[dev] into $venv (pyproject.toml changed or first install)" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  # torch is pinned to 2.13.0: on CPU machines pip takes the CPU wheel; torchvision is never installed here.
  "$venv/bin/python" -m pip install --quiet -e "$repo_root[dev]" >&2
  if "$venv/bin/python" -c 'import torchvision' >/dev/null 2>&1; then
    echo "[setup] warning: torchvision is importable in $venv; on CPU machines it breaks transformers (see DESIGN.md)" >&2
  fi
  echo "$want" > "$stamp"
else
  echo "[setup] reusing $venv (pyproject.toml unchanged)" >&2
fi
echo "$venv/bin/python"
