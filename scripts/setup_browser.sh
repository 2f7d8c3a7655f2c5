#!/usr/bin/env bash
# What `python -m olmocr_rl.synth` needs besides Python packages (docs/synth.md, "Set-up"):
#   - a headless Chromium and the pinned fonts: Debian's chromium-headless-shell (~306 MB, no recommended
#     packages) and fonts-liberation2 + fonts-dejavu-core, installed with apt when missing (as root);
#   - KaTeX from npm, into a cache outside the repository (default ~/.cache/olmocr_rl/katex; the synth command
#     reads the same place, or OLMOCR_RL_KATEX_DIR).
# Playwright itself is the `synth` extra (pip install -e '.[synth]'; scripts/setup_env.sh installs it).
# Never fatal: a machine where this cannot install gets one line saying what is missing, and the synth command
# and its browser tests print the same line (the tests skip).
#
#   bash scripts/setup_browser.sh
set -uo pipefail

katex_version="0.19.1"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/olmocr_rl/katex"
packages=()
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  packages+=(chromium-headless-shell)
fi
if ! fc-list 2>/dev/null | grep -q "Liberation Serif"; then packages+=(fonts-liberation2); fi
if ! fc-list 2>/dev/null | grep -q "DejaVu Serif"; then packages+=(fonts-dejavu-core); fi
if (( ${#packages[@]} )); then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup-browser] apt-get install ${packages[*]}" >&2
    start=$SECONDS
    if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
          "${packages[@]}") >/dev/null 2>&1; then
      echo "[setup-browser] installed ${packages[*]} in $((SECONDS - start)) s" >&2
    else
      echo "[setup-browser] warning: apt-get could not install ${packages[*]}; python -m olmocr_rl.synth needs them" >&2
    fi
  else
    echo "[setup-browser] warning: missing ${packages[*]}: install them (apt-get install -y --no-install-recommends ${packages[*]}) as root" >&2
  fi
fi
if [[ ! -f "$cache/node_modules/katex/dist/katex.min.js" ]]; then
  if command -v npm >/dev/null 2>&1; then
    start=$SECONDS
    mkdir -p "$cache"
    if npm install --prefix "$cache" --no-audit --no-fund --silent "katex@$katex_version" >/dev/null 2>&1; then
      echo "[setup-browser] KaTeX $katex_version installed in $cache in $((SECONDS - start)) s" >&2
    else
      echo "[setup-browser] warning: npm could not install katex@$katex_version into $cache" >&2
    fi
  else
    echo "[setup-browser] warning: npm is missing: install Node.js and npm, then rerun bash scripts/setup_browser.sh (KaTeX)" >&2
  fi
fi
exit 0
