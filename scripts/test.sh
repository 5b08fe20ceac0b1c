#!/usr/bin/env bash
# From a fresh machine to the passing test suite: set-up, build, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}"
cmake --build "$BUILD_DIR" -j"$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS"
# The differential fuzzer, seeded: the same 300 random programs each run.
bash scripts/fuzz.sh --cases 300 --seed 1 --build "$BUILD_DIR" --out "$BUILD_DIR/fuzz-cases"
