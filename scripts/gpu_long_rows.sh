#!/usr/bin/env bash
# The bound of long-row log_softmax traffic (bench/long_rows_bound.cu: copy, a vectorized cast
# and hand-written row kernels of each shape, no torchfuse build needed), then, with --torchfuse,
# torchfuse's own kernels on the same rows (bench/vocab_rows.py, after scripts/gpu_ensure_build.sh).
# Output to $OUT (or ./gpu-logs) and stdout.
#   bash scripts/gpu_long_rows.sh [--torchfuse] [ROWS [ROW_LENGTH]]
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${OUT:-$PWD/gpu-logs}"
# The torchfuse build links Abseil from the copied prefix (see scripts/gpu_build_test.sh).
ABSL_PREFIX="${ABSL_PREFIX:-$PWD/.deps/absl}"
export LD_LIBRARY_PATH="$ABSL_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$LOGS" build-gpu
TORCHFUSE=0
if [[ "${1:-}" == "--torchfuse" ]]; then TORCHFUSE=1; shift; fi
nvcc -O3 -std=c++17 -arch=sm_90 -o build-gpu/long_rows_bound bench/long_rows_bound.cu || exit 1
build-gpu/long_rows_bound "$@" | tee "$LOGS/long_rows_bound.md"
status=$?
if (( TORCHFUSE )); then
  bash scripts/gpu_ensure_build.sh || exit 1
  PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/build-gpu/python" python3 bench/vocab_rows.py \
    | tee "$LOGS/vocab_rows.txt" || status=1
fi
exit $status
