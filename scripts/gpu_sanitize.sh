#!/usr/bin/env bash
# compute-sanitizer over the GPU tests' kernels: memcheck (out-of-bounds and misaligned
# accesses, in every row strategy (the cluster one's distributed shared memory included), the
# column kernels with their split and combine, elementwise kernels over strided, sliced and
# broadcast inputs) and racecheck (shared-memory races in the row and column reductions).
# Tuning is off (each test's forced or heuristic variants run), so the runs stay in minutes.
# Logs go to $OUT (or ./gpu-logs); the last lines say the errors per run.
#   bash scripts/gpu_sanitize.sh [--build DIR] [--tools "memcheck racecheck"]
set -u
cd "$(dirname "$0")/.."
BUILD=build-gpu
TOOLS="memcheck racecheck"
while (( $# )); do
  case "$1" in
    --build) BUILD="$2"; shift ;;
    --tools) TOOLS="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
LOGS="${OUT:-$PWD/gpu-logs}"
mkdir -p "$LOGS"
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export TORCHFUSE_TUNE=0
export TORCHFUSE_CACHE_DIR="${TORCHFUSE_CACHE_DIR:-$PWD/$BUILD/sanitize-cache}"
# binary:gtest filter. memcheck takes every strategy and variant; racecheck, which is slower,
# the tests that force each strategy and variant (the column variants on small shapes).
MEMCHECK=(
  "row_reduction_test:RowReductionTest.EveryStrategyForcedGivesEagersAnswer:RowReductionTest.SpecialValuesPropagateAsInEager:RowReductionTest.ReductionsWithPerRowOutputsAndStridedInputs:RowReductionTest.RowsOfOneElement*"
  "column_reduction_test:*"
  "compiled_module_test:CompiledModuleTest.*"
  "bad_inputs_test:BadInputsTest.EmptyAndOneElementTensorsGiveEagersValues:BadInputsTest.OtherDtypes*"
)
RACECHECK=(
  "row_reduction_test:RowReductionTest.EveryStrategyForcedGivesEagersAnswer"
  "column_reduction_test:ColumnReductionTest.EveryForcedVariantOnSmallShapes"
)
STATUS=0
SUMMARY=()
for tool in $TOOLS; do
  if [[ $tool == memcheck ]]; then RUNS=("${MEMCHECK[@]}"); else RUNS=("${RACECHECK[@]}"); fi
  for run in "${RUNS[@]}"; do
    bin=${run%%:*}
    filter=${run#*:}
    log="$LOGS/sanitize_${tool}_${bin}.log"
    extra=()
    [[ $tool == racecheck ]] && extra=(--racecheck-report all)
    start=$(date +%s)
    "$SANITIZER" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 20 \
      "$BUILD/tests/$bin" --gtest_filter="$filter" > "$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    tests=$(grep -E "^\[  (PASSED|FAILED) " "$log" | tr '\n' ' ')
    SUMMARY+=("compute-sanitizer $tool $bin: ${summary:-no summary} | ${tests:-no gtest summary} | rc=$rc ${secs}s")
    (( rc != 0 )) && STATUS=1
  done
done
printf '%s\n' "${SUMMARY[@]}" | tee "$LOGS/sanitize_summary.txt"
exit $STATUS
