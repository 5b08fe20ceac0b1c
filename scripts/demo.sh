#!/usr/bin/env bash
# From a fresh machine: set-up, build, and a demo over the example models (hand-written GeLU,
# bias+gelu, a 4-layer MLP of Linear + hand-written GeLU): prints the fusion groups and the
# kernel source of each, and, where a GPU is present, runs them against eager and prints both
# times. Without a GPU it compiles the kernels for sm_90 and says it skipped execution.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${SKIP_SETUP:-0}" != 1 ]]; then bash scripts/setup.sh; fi
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" > /dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target torchfuse
PY="${TORCHFUSE_PYTHON:-}"
if [[ -z "$PY" ]]; then
  for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c "import torch" 2>/dev/null; then PY=$candidate; break; fi
  done
fi
MODELS="$BUILD_DIR/demo_models"
"$PY" models/make_models.py "$MODELS" --hidden 4096 --mlp-hidden 1024 --only gelu,bias_gelu,mlp > /dev/null
TF="$BUILD_DIR/torchfuse"

ARCH=()
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi > /dev/null 2>&1; then
  ARCH=(--arch sm_90)
  echo "no GPU found: kernels are compiled for sm_90 and execution is skipped"
fi
for model in gelu bias_gelu mlp; do
  case $model in
    mlp) spec="f32[4096,1024]" ;;
    *) spec="f32[4096,4096]" ;;
  esac
  echo
  echo "################ $model ($spec)"
  "$TF" inspect "$MODELS/${model}_traced.pt" --input "$spec" "${ARCH[@]}" \
    | sed -n '/^== fusion groups/,$p'
  if (( ${#ARCH[@]} )); then
    echo "skipped execution of $model: no GPU"
  else
    "$TF" run "$MODELS/${model}_traced.pt" --input "$spec"
  fi
done
