#!/usr/bin/env bash
# Builds and tests torchfuse on a GPU machine that has CUDA, PyTorch (whose LibTorch we build
# against) and CMake/ninja but no package access. Abseil comes from a copied prefix
# (default .deps/absl: include/absl, lib/x86_64-linux-gnu/libabsl_*, .../cmake/absl).
# Then runs the Python package's tests and the side-by-side bench (eager, torch.compile and
# torchfuse in one process: bench/side_by_side.py); --cpp-bench also runs the C++ bench
# (torchfuse_bench, compile_baseline.py, report.py). Logs go to $OUT (or ./gpu-logs); a summary
# is printed last.
#
# bench/models.py runs the real models (GPT-2, LLaMA-style) against Inductor unless --no-models.
#
#   bash scripts/gpu_build_test.sh [--no-bench] [--no-tests] [--no-ctest] [--no-python]
#                                  [--no-models] [--cpp-bench] [--bench-args "..."]
#                                  [--models-args "..."]
#
# The whole suite takes longer than some machines lend a command (ctest about 7 minutes on
# an H100 at -j4, 6 on an H200 at CTEST_JOBS=6 after a 76 s build on 16 cores, the Python
# tests about 3): --no-python and --no-ctest split it in two calls. CTEST_JOBS sets ctest's
# -j (default 4; GPU tests share the one GPU).
# --models-args passes arguments to bench/models.py, split at spaces ("--models gpt2,llama
# --train=": those two models, no training step).
#
# BUILD_TARGET="torchfuse_python" builds the Python package alone (no tests, no C++ bench), for
# benchmark-only runs; BUILD_TARGET names one or more targets, separated by spaces.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS="${OUT:-$ROOT/gpu-logs}"
mkdir -p "$LOGS"
ABSL_PREFIX="${ABSL_PREFIX:-$ROOT/.deps/absl}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
RUN_BENCH=1
RUN_TESTS=1
RUN_MODELS=1
RUN_CTEST=1
RUN_PYTHON=1
CPP_BENCH=0
BENCH_ARGS=""
MODELS_ARGS=""
while (( $# )); do
  case "$1" in
    --no-bench) RUN_BENCH=0 ;;
    --no-tests) RUN_TESTS=0 ;;
    --no-models) RUN_MODELS=0 ;;
    --no-ctest) RUN_CTEST=0 ;;
    --no-python) RUN_PYTHON=0 ;;
    --models-args) MODELS_ARGS="$2"; shift ;;
    --cpp-bench) CPP_BENCH=1 ;;
    --bench-args) BENCH_ARGS="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# RUNPATH covers direct dependencies only; Abseil's own libraries find each other through this.
export LD_LIBRARY_PATH="$ABSL_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=python3
TORCH_PREFIX=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')
{
  echo "== device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  echo "== torch"; $PY -c 'import torch;print(torch.__version__, torch.version.cuda)'
  echo "== commit"; echo "${TORCHFUSE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} > "$LOGS/env.txt" 2>&1

status_build=0
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -Dabsl_DIR="$ABSL_PREFIX/lib/x86_64-linux-gnu/cmake/absl" \
  -DTORCHFUSE_PYTHON="$(command -v $PY)" > "$LOGS/configure.log" 2>&1 || status_build=$?
if (( status_build == 0 )); then
  cmake --build "$BUILD_DIR" -j"$(nproc)" ${BUILD_TARGET:+--target $BUILD_TARGET} \
    > "$LOGS/build.log" 2>&1 || status_build=$?
fi
status_test=-1
status_python=-1
status_distributed=-1
if (( status_build == 0 && RUN_TESTS && RUN_CTEST )); then
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-4}" -E python_api \
    > "$LOGS/ctest.log" 2>&1
  status_test=$?
fi
if (( status_build == 0 && RUN_TESTS && RUN_PYTHON )); then
  # The Python tests print per-workload kernel counts: keep their whole output. A crash prints
  # every thread's Python stack there (faulthandler).
  PYTHONPATH="$ROOT/$BUILD_DIR/python" TORCHFUSE_CACHE_DIR="$ROOT/$BUILD_DIR/test-cache" \
    $PY -X faulthandler -m unittest discover -s tests/python -v > "$LOGS/python.log" 2>&1
  status_python=$?
  # DDP and FSDP in their one-GPU form (one process, NCCL); scripts/distributed_train.py with
  # torchrun --nproc_per_node=N runs them on N GPUs.
  TORCHFUSE_CACHE_DIR="$ROOT/$BUILD_DIR/dist-cache" PYTHONPATH="$ROOT/$BUILD_DIR/python" \
    $PY -m torch.distributed.run --nproc_per_node=1 scripts/distributed_train.py --steps 8 \
    --backends eager,torchfuse > "$LOGS/distributed.log" 2>&1
  status_distributed=$?
fi
status_models=-1
if (( status_build == 0 && RUN_MODELS )); then
  PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT/$BUILD_DIR/python" TORCHFUSE_CACHE_DIR="$ROOT/$BUILD_DIR/model-cache" \
    $PY bench/models.py "$LOGS" $MODELS_ARGS > "$LOGS/models.log" 2>&1
  status_models=$?
fi
status_side=-1
if (( status_build == 0 && RUN_BENCH )); then
  PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT/$BUILD_DIR/python" $PY bench/side_by_side.py "$LOGS" \
    > "$LOGS/side_by_side.log" 2>&1
  status_side=$?
fi
status_bench=-1
if (( status_build == 0 && RUN_BENCH && CPP_BENCH )) && [[ -x "$BUILD_DIR/bench/torchfuse_bench" ]]; then
  BENCH_MODELS="$BUILD_DIR/bench_models"
  $PY models/make_models.py "$BENCH_MODELS" --hidden 4096 --only gelu,bias_gelu,softmax,layernorm,rmsnorm > /dev/null
  # shellcheck disable=SC2086
  "$BUILD_DIR/bench/torchfuse_bench" "$BENCH_MODELS" --csv "$LOGS/torchfuse_bench.csv" $BENCH_ARGS \
    > "$LOGS/bench.log" 2>&1
  status_bench=$?
  SKIP_SETUP=1 BUILD_DIR="$BUILD_DIR" TORCHFUSE_PYTHON="$(command -v $PY)" bash scripts/demo.sh \
    > "$LOGS/demo.log" 2>&1 || echo "demo failed: see demo.log" >> "$LOGS/bench.log"
  PYTHONUNBUFFERED=1 $PY bench/compile_baseline.py "$LOGS/baseline.csv" > "$LOGS/baseline.log" 2>&1
  if [[ -f "$LOGS/torchfuse_bench.csv" && -f "$LOGS/baseline.csv" ]]; then
    $PY bench/report.py "$LOGS/torchfuse_bench.csv" "$LOGS/baseline.csv" > "$LOGS/report.md" 2>&1
  fi
fi

echo "==================== summary"
cat "$LOGS/env.txt"
if (( status_build != 0 )); then
  echo "BUILD FAILED ($status_build)"; tail -40 "$LOGS/configure.log" "$LOGS/build.log" 2>/dev/null
  exit 1
fi
if (( status_test >= 0 )); then
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$LOGS/ctest.log" | tail -30
  echo "skipped: $(grep -cE '^[[:space:]]+[0-9]+ - .*\(Skipped\)' "$LOGS/ctest.log" || true)"
fi
if (( status_python >= 0 )); then
  echo "== python tests (exit $status_python)"
  grep -E "kernel\(s\), eager|^Ran |^OK|^FAILED|Error|FAIL:|ERROR:" "$LOGS/python.log" | tail -60
  echo "== distributed, one GPU (exit $status_distributed)"
  grep -E "^(ddp|fsdp) |^tuning runs|^distributed:" "$LOGS/distributed.log" | tail -10
fi
if (( status_side >= 0 )); then
  echo "== side-by-side bench (exit $status_side)"; tail -30 "$LOGS/side_by_side.log"
fi
if (( status_models >= 0 )); then
  echo "== real models (exit $status_models)"; grep -vE "^\{" "$LOGS/models.log" | tail -25
fi
if (( status_bench >= 0 )); then
  echo "== bench (exit $status_bench)"; cat "$LOGS/bench.log"
  echo "== torch.compile baseline"; tail -5 "$LOGS/baseline.log"
  [[ -f "$LOGS/report.md" ]] && { echo "== report"; cat "$LOGS/report.md"; }
fi
exit $(( status_test > 0 || status_python > 0 ? 1 : 0 ))
