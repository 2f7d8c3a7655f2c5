#!/usr/bin/env bash
# Fill .whl/ with the wheels scripts/device_gpu_check.sh installs on a lent GPU machine (CPython 3.12, x86_64,
# torch/transformers/accelerate already there): the packages the training CLI imports that such a machine lacks,
# at this repository's versions, no dependencies (they are listed here). Run on a machine with PyPI access;
# the run tool carries .whl/ (ignored by git) with `carry: [".whl"]` (64 MiB in all; pyarrow is ~40 MiB, so
# drop it with NO_PYARROW=1 where the machine has one).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 pypdfium2==5.15.2
          rapidfuzz==3.14.6 latex2mathml==3.81.1 peft==0.21.2)
if [[ -z "${NO_PYARROW:-}" ]]; then packages+=(pyarrow==26.0.1); fi
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$repo_root/.whl" "${packages[@]}"
du -sh "$repo_root/.whl"
