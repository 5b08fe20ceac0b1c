#!/usr/bin/env bash
# The CPU test suite built with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan):
# any report fails the run. LibTorch and Abseil are not instrumented, so container-overflow
# checks (which need both sides of a container instrumented) and UBSan's vptr check (which needs
# LibTorch's type info) are off; the Python and install tests, which load the library into an
# uninstrumented interpreter, do not run here.
#   bash scripts/sanitize.sh [ctest arguments, e.g. -R Fusion]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build-asan}"
JOBS="${JOBS:-$(nproc)}"
FLAGS="-O1 -g1 -fsanitize=address,undefined -fno-sanitize=vptr -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" -DTORCHFUSE_BUILD_PYTHON=OFF \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS_RELEASE="-DNDEBUG" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build "$BUILD_DIR" -j"$JOBS"
export ASAN_OPTIONS="detect_container_overflow=0:detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" -E "python_api|install_consumer" "$@"
