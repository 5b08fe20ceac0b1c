#!/usr/bin/env bash
# Builds (as gpu_build_test.sh does) and runs bench/first_call.py for each model in its own
# process with an empty cache: default settings, then tuning off, then a warm disk cache.
# Logs go to $OUT (or ./gpu-logs).
#
#   bash scripts/gpu_first_call.sh [MODELS]   (default gpt2,llama)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS="${OUT:-$ROOT/gpu-logs}"
mkdir -p "$LOGS"
bash scripts/gpu_build_test.sh --no-tests --no-models --no-bench > "$LOGS/build_script.log" 2>&1 \
  || { tail -20 "$LOGS/build.log"; exit 1; }
ABSL_PREFIX="${ABSL_PREFIX:-$ROOT/.deps/absl}"
export LD_LIBRARY_PATH="$ABSL_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$ROOT/${BUILD_DIR:-build-gpu}/python" PYTHONUNBUFFERED=1
IFS=, read -ra MODELS <<< "${1:-gpt2,llama}"
for m in "${MODELS[@]}"; do
  cache=$(mktemp -d)
  echo "## $m, empty cache" | tee -a "$LOGS/first_call.log"
  TORCHFUSE_CACHE_DIR=$cache python3 bench/first_call.py --models "$m" --warm-imports \
    >> "$LOGS/first_call.log" 2>&1
  echo "## $m, warm disk cache" | tee -a "$LOGS/first_call.log"
  TORCHFUSE_CACHE_DIR=$cache python3 bench/first_call.py --models "$m" --warm-imports \
    >> "$LOGS/first_call.log" 2>&1
  echo "## $m, empty cache, tuning off" | tee -a "$LOGS/first_call.log"
  TORCHFUSE_TUNE=0 TORCHFUSE_CACHE_DIR=$(mktemp -d) python3 bench/first_call.py --models "$m" \
    --warm-imports >> "$LOGS/first_call.log" 2>&1
done
grep -v Warning "$LOGS/first_call.log" | grep -v "^ *warnings.warn" | tail -120
