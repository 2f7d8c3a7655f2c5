#!/usr/bin/env bash
# Run on the lent GPU machine (Python 3.12 with torch/transformers/accelerate preinstalled): install the
# carried wheels (trl, datasets, pypdfium2, rapidfuzz, latex2mathml, ...) to /tmp/site, then the GPU check.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers, trl, datasets, pyarrow; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)"
out="${OUT:-/tmp}"
PYTHON=python3 bash scripts/gpu_check.sh --work_dir /tmp/gpu_check --out "$out/gpu_check.json" "$@" 2>&1 | tee "$out/gpu_check.log" | grep -a -v "Warning\|warn\|it/s\]"
