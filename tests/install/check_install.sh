#!/usr/bin/env bash
# Installs the build into a fresh prefix (a virtual environment of the build's Python), then, as
# another project would: builds a consumer with find_package(torchfuse) and runs it, runs the
# installed program, and imports the installed Python package with no PYTHONPATH.
#   check_install.sh BUILD_DIR PYTHON MODEL [CMAKE_ARGS...]
set -euo pipefail
build=$1 python=$2 model=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/tf-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$python" -m venv --without-pip --system-site-packages "$work/prefix"
# torch (a dependency, not under test) may live outside the base interpreter's site-packages
# (a user site, or a virtual environment of its own): a .pth file lets the new environment see it.
torch_site=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
site=$("$work/prefix/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
mkdir -p "$site"
echo "$torch_site" > "$site/_torch_location.pth"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
here=$(cd "$(dirname "$0")" && pwd)
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" "$@" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
out=$(TORCHFUSE_CACHE_DIR="$work/cache" "$work/consumer/consumer" "$model" "f32[64,1024]")
echo "consumer: $out"
[[ "$out" == "kernels: 1" ]]
version=$("$work/prefix/bin/torchfuse" --version)
echo "program: $version"
cd "$work"
py_version=$(env -u PYTHONPATH TORCHFUSE_CACHE_DIR="$work/cache" "$work/prefix/bin/python" -c \
  'import torchfuse, sys; assert torchfuse.__file__.startswith(sys.prefix), torchfuse.__file__; print(torchfuse.__version__)')
echo "python: torchfuse $py_version"
[[ "$version" == "torchfuse $py_version" ]]
echo "install: ok"
