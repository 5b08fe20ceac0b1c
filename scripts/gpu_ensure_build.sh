#!/usr/bin/env bash
# Builds the GPU tree (build-gpu) unless it is there already, quietly: for runs that follow a
# build on a machine that may have been handed back in between. Logs to /tmp/gpu-build.log.
# BUILD_TARGET (e.g. torchfuse_python) builds that target alone.
set -u
cd "$(dirname "$0")/.."
# The test binaries run at build time (gtest discovery) and need Abseil's libraries.
export LD_LIBRARY_PATH="${ABSL_PREFIX:-$PWD/.deps/absl}/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ ! -d build-gpu/python ]]; then
  mkdir -p /tmp/gl
  OUT=/tmp/gl bash scripts/gpu_build_test.sh --no-tests --no-bench --no-models > /tmp/gpu-build.log 2>&1 \
    || { tail -30 /tmp/gpu-build.log; exit 1; }
else
  cmake --build build-gpu -j16 ${BUILD_TARGET:+--target "$BUILD_TARGET"} > /tmp/gpu-build.log 2>&1 || { tail -30 /tmp/gpu-build.log; exit 1; }
fi
