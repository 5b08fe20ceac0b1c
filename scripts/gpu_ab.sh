#!/usr/bin/env bash
# A/B of a change on one GPU machine: the working tree against a base revision, both built
# there, a benchmark command run against each build in turn. For machines that get a copy of
# the working tree but no usable git history, in two steps:
#
#   bash scripts/gpu_ab.sh prepare BASE     # here, in the checkout: BASE's versions of the
#                                           # source files the tree changes go to .ab-base/
#   bash scripts/gpu_ab.sh run [--rounds N] -- COMMAND [ARGS...]
#                                           # there, with .ab-base/ copied along (it is
#                                           # git-ignored: name it in what the copy carries)
#
# `run` builds the tree in build-gpu (scripts/gpu_ensure_build.sh), copies it to /tmp/ab-base
# with .ab-base/ laid over it, builds that copy the same way, then runs COMMAND N times
# (default 2) for each build, alternating, with PYTHONPATH at that build's package and AB set to
# "base" or "new". Both builds are of the Python package alone (BUILD_TARGET, default
# torchfuse_python; empty for everything). Example:
#   bash scripts/gpu_ab.sh run -- python3 bench/row_variants.py "softmax 4096x1024" f32
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
AB_DIR=.ab-base
SOURCES=(codegen_nvrtc runtime autotune fusion graph common frontend_torch python cache
         CMakeLists.txt)

prepare() {
  local base="$1"
  git rev-parse --verify --quiet "$base^{commit}" > /dev/null || { echo "no revision $base" >&2; exit 2; }
  rm -rf "$AB_DIR"
  mkdir -p "$AB_DIR"
  # Files of the tree that BASE has differently (or not at all: listed to be removed there).
  : > "$AB_DIR/.remove"
  while IFS=$'\t' read -r status path; do
    case "$status" in
      A) echo "$path" >> "$AB_DIR/.remove" ;;
      *) mkdir -p "$AB_DIR/$(dirname "$path")"; git show "$base:$path" > "$AB_DIR/$path" ;;
    esac
  done < <(git diff --no-renames --name-status "$base" -- "${SOURCES[@]}")
  echo "$(git rev-parse --short "$base")" > "$AB_DIR/.base"
  echo "base $(cat "$AB_DIR/.base"): $(find "$AB_DIR" -type f ! -name '.*' | wc -l) files, $(wc -l < "$AB_DIR/.remove") to remove"
}

run() {
  local rounds=2
  while (( $# )); do
    case "$1" in
      --rounds) rounds="$2"; shift ;;
      --) shift; break ;;
      *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
    shift
  done
  (( $# )) || { echo "run: no command" >&2; exit 2; }
  [[ -f "$AB_DIR/.base" ]] || { echo "run: no $AB_DIR (run 'prepare BASE' first)" >&2; exit 2; }
  export LD_LIBRARY_PATH="${ABSL_PREFIX:-$ROOT/.deps/absl}/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export BUILD_TARGET="${BUILD_TARGET-torchfuse_python}"
  bash scripts/gpu_ensure_build.sh || exit 1
  local other=/tmp/ab-base
  rm -rf "$other"
  mkdir -p "$other"
  tar --exclude=./build-gpu --exclude=./.git --exclude="./$AB_DIR" -cf - . | tar -xf - -C "$other"
  cp -r "$AB_DIR/." "$other/"
  while read -r path; do [[ -n "$path" ]] && rm -f "$other/$path"; done < "$AB_DIR/.remove"
  # The same build as this tree's (its Abseil prefix is copied along, or ABSL_PREFIX).
  ( cd "$other" && bash scripts/gpu_ensure_build.sh ) || exit 1
  local status=0
  for ((r = 1; r <= rounds; ++r)); do
    for ab in base new; do
      local package="$ROOT/build-gpu/python"
      [[ "$ab" == base ]] && package="$other/build-gpu/python"
      echo "== $ab ($([[ $ab == base ]] && cat "$AB_DIR/.base" || echo "working tree")), round $r"
      AB="$ab" PYTHONPATH="$package" "$@" || status=$?
    done
  done
  return $status
}

case "${1:-}" in
  prepare) [[ $# -eq 2 ]] || { echo "usage: gpu_ab.sh prepare BASE" >&2; exit 2; }; prepare "$2" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
