#!/usr/bin/env bash
# Builds only the Python package (build-gpu, against the machine's torch) and runs
# scripts/distributed_train.py under torchrun on every GPU of the machine: DDP and FSDP,
# eager against torchfuse and Inductor. Needs the Abseil copy of scripts/gpu_build_test.sh.
#   bash scripts/gpu_distributed.sh [distributed_train.py arguments...]
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
ABSL_PREFIX="${ABSL_PREFIX:-$ROOT/.deps/absl}"
export LD_LIBRARY_PATH="$ABSL_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=python3
TORCH_PREFIX=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -Dabsl_DIR="$ABSL_PREFIX/lib/x86_64-linux-gnu/cmake/absl" -DTORCHFUSE_PYTHON="$(command -v $PY)" \
  > /tmp/dist-configure.log 2>&1 || { tail -20 /tmp/dist-configure.log; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target torchfuse_python > /tmp/dist-build.log 2>&1 \
  || { tail -30 /tmp/dist-build.log; exit 1; }
GPUS=$(nvidia-smi -L | wc -l)
echo "== $GPUS GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT/build-gpu/python" \
  $PY -m torch.distributed.run --nproc_per_node="$GPUS" scripts/distributed_train.py "$@"
