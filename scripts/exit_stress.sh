#!/usr/bin/env bash
# Runs one test of a built test binary many times at once, each in a fresh process with its
# own empty cache, and counts how the processes end: a crash or hang at exit (background
# compiles in flight while the process tears down) shows up in a few runs of many. A crashed
# run's log ends with its backtrace (a SIGSEGV/SIGABRT handler preloaded into each process).
#
#   bash scripts/exit_stress.sh BINARY GTEST_FILTER [ROUNDS] [PER_ROUND]
#   e.g. bash scripts/exit_stress.sh build-gpu/tests/compiled_module_test \
#            CompiledModuleTest.MlpIsFourFusedKernelsAndFourMatmuls 6 8
#
# Logs go to $OUT (or ./exit-logs): run_R_J.log per process, rcs.txt (124: the 60 s limit).
# Link the binary with -rdynamic (CMAKE_EXE_LINKER_FLAGS) for its own frames' names.
set -uo pipefail
bin=$1 filter=$2 rounds=${3:-6} per=${4:-8}
logs=${OUT:-$PWD/exit-logs}
mkdir -p "$logs"
: > "$logs/rcs.txt"
tmp=$(mktemp -d)
cat > "$tmp/segv.c" <<'C'
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
static void on_signal(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  static const char msg[] = "\n=== signal backtrace\n";
  write(2, msg, sizeof(msg) - 1);
  backtrace_symbols_fd(frames, n, 2);
  _exit(128 + sig);
}
__attribute__((constructor)) static void install(void) {
  signal(SIGSEGV, on_signal);
  signal(SIGABRT, on_signal);
}
C
cc -shared -fPIC -o "$tmp/segv.so" "$tmp/segv.c" || exit 2
for r in $(seq 1 "$rounds"); do
  for j in $(seq 1 "$per"); do
    ( TORCHFUSE_CACHE_DIR="$tmp/cache_${r}_$j" LD_PRELOAD="$tmp/segv.so" timeout 60 \
        "$bin" --gtest_filter="$filter" > "$logs/run_${r}_$j.log" 2>&1
      echo "${r}_$j $?" >> "$logs/rcs.txt" ) &
  done
  wait
done
echo "exit codes (count code):"
awk '{print $2}' "$logs/rcs.txt" | sort | uniq -c
for f in $(grep -l "signal backtrace" "$logs"/run_*.log | head -2); do
  echo "== $f"
  sed -n '/signal backtrace/,$p' "$f" | c++filt | cut -c1-200 | head -30
done
rm -rf "$tmp"
