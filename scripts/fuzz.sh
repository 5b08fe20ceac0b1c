#!/usr/bin/env bash
# The differential fuzzer (tests/fuzz/fuzz.cc): random programs compiled by torchfuse against
# eager and an f64 run. Without --gpu: import, fuse, the fused graph on the reference executor,
# NVRTC for sm_90; with --gpu the kernels run. Failing cases are saved under OUT (default
# fuzz-cases/). Last line: `fuzz: N cases, W wrong, C crashed`; non-zero exit on any.
#   bash scripts/fuzz.sh --seconds N [--seed S] [--gpu] [--build DIR] [--out DIR]
set -u
cd "$(dirname "$0")/.."
BUILD=build
OUT=fuzz-cases
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
if [[ ! -x "$BUILD/tests/torchfuse_fuzz" ]]; then
  cmake --build "$BUILD" --target torchfuse_fuzz > /dev/null || exit 1
fi
mkdir -p "$OUT"
# A cache of its own, so that a run neither reads nor fills the user's.
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
TORCHFUSE_CACHE_DIR="$CACHE" "$BUILD/tests/torchfuse_fuzz" --out "$OUT" "${ARGS[@]}"
