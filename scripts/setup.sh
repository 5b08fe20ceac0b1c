#!/usr/bin/env bash
# Installs what torchfuse needs on a Debian machine, only when missing, and checks the CUDA
# toolkit (NVRTC and headers; no GPU or driver needed to build and test).
set -euo pipefail

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
if [[ ! -f "$CUDA_HOME/include/nvrtc.h" || ! -e "$CUDA_HOME/lib64/libnvrtc.so" ]]; then
  echo "error: the CUDA toolkit was not found at $CUDA_HOME (need include/nvrtc.h and" \
       "lib64/libnvrtc.so); install it or set CUDA_HOME" >&2
  exit 1
fi

packages=(cmake ninja-build g++ libtorch-dev python3-torch python3-dev python3-venv pybind11-dev libabsl-dev nlohmann-json3-dev
          libgtest-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
