#!/usr/bin/env bash
# The differential fuzzer (tests/fuzz/fuzz.cc): random programs compiled by torchfuse against
# eager and an f64 run. Without --gpu: import, fuse, the fused graph on the reference executor,
# NVRTC for sm_90; with --gpu the kernels run, each case with the heuristic's or forced kernel
# variants. --threads T runs T streams of cases in one process (seeds S .. S+T-1; on a GPU,
# one context); --jobs J runs J such processes (seeds S .. S+J*T-1, --cases split between
# them) sharing one cache. Failing cases are saved under OUT (default fuzz-cases/). Last line:
# `fuzz: N cases, W wrong, C crashed`; non-zero exit on any.
#   bash scripts/fuzz.sh (--seconds N | --cases N) [--seed S] [--jobs J] [--threads T] [--gpu]
#                        [--build DIR] [--out DIR]
#   bash scripts/fuzz.sh --seed S --only NUMBER [--gpu]   (case NUMBER of seed S's stream again)
set -u
cd "$(dirname "$0")/.."
BUILD=build
OUT=fuzz-cases
JOBS=1
THREADS=1
SEED=1
CASES=""
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --jobs) JOBS="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --seed) SEED="$2"; shift ;;
    --cases) CASES="$2"; shift ;;
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
if [[ "$JOBS" -le 1 ]]; then
  [[ -n "$CASES" ]] && ARGS+=(--cases "$CASES")
  TORCHFUSE_CACHE_DIR="$CACHE" "$BUILD/tests/torchfuse_fuzz" --out "$OUT" --seed "$SEED" \
    --threads "$THREADS" "${ARGS[@]}"
  STATUS=$?
  if [[ $STATUS -gt 1 ]]; then cat "$OUT"/running_*.txt >&2 2>/dev/null; fi
  exit $STATUS
fi
PIDS=()
for ((j = 0; j < JOBS; ++j)); do
  EXTRA=()
  [[ -n "$CASES" ]] && EXTRA=(--cases $(( (CASES + JOBS - 1 - j) / JOBS )))
  TORCHFUSE_CACHE_DIR="$CACHE" "$BUILD/tests/torchfuse_fuzz" --out "$OUT" \
    --seed $((SEED + j * THREADS)) --threads "$THREADS" "${EXTRA[@]}" "${ARGS[@]}" \
    > "$OUT/job_$j.log" 2>&1 &
  PIDS+=($!)
done
STATUS=0
for p in "${PIDS[@]}"; do wait "$p" || STATUS=1; done
N=0; W=0; C=0; S=0
for ((j = 0; j < JOBS; ++j)); do
  LAST=$(grep '^fuzz: ' "$OUT/job_$j.log" | tail -1)
  if [[ -z "$LAST" ]]; then
    echo "job $j (seeds from $((SEED + j * THREADS))) ended without its count: the process died" >&2
    tail -5 "$OUT/job_$j.log" >&2
    for ((t = 0; t < THREADS; ++t)); do
      cat "$OUT/running_$((SEED + j * THREADS + t)).txt" >&2 2>/dev/null
    done
    C=$((C + 1)); STATUS=1
    continue
  fi
  grep -v '^fuzz: ' "$OUT/job_$j.log"
  read -r n w c s <<< "$(sed -E 's/^fuzz: ([0-9]+) cases, ([0-9]+) wrong, ([0-9]+) crashed \(([0-9]+) s.*/\1 \2 \3 \4/' <<< "$LAST")"
  N=$((N + n)); W=$((W + w)); C=$((C + c)); (( s > S )) && S=$s
done
MODE=$(grep -h '^fuzz: ' "$OUT/job_0.log" | sed -E 's/.*, (GPU|CPU[^)]*)\)$/\1/')
echo "fuzz: $N cases, $W wrong, $C crashed ($S s, seeds $SEED..$((SEED + JOBS * THREADS - 1)), $JOBS processes of $THREADS threads, $MODE)"
exit $STATUS
