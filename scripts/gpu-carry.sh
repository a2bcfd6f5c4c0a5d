#!/usr/bin/env bash
# scripts/gpu-carry.sh [--onednn]: fills .gpudeps/ (git-ignored) with what a lent GPU machine
# lacks and scripts/gpu-check.sh needs: the header-only nlohmann-json and CLI11 with their CMake
# packages, GoogleTest's sources, and SLEEF (2 MB; without it the CPU attention that the GPU
# tests compare against runs its scalar kernels); with --onednn also oneDNN (38 MB of the device
# tool's 64 MiB). Name .gpudeps in the call's `carry` and run there:
#   export CMAKE_PREFIX_PATH=$PWD/.gpudeps OCTET_GTEST_SOURCE_DIR=$PWD/.gpudeps/googletest
#   PATH=/usr/local/cuda/bin:$PATH scripts/gpu-check.sh OUT tests
# Reads this Debian machine's packages (nlohmann-json3-dev, libcli11-dev, googletest,
# libsleef-dev, libdnnl-dev: scripts/setup.sh installs them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.gpudeps
lib=/usr/lib/x86_64-linux-gnu
rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib" "$dest/share/cmake"
cp -r /usr/include/nlohmann /usr/include/CLI "$dest/include/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$dest/share/cmake/"
cp -r /usr/src/googletest "$dest/googletest"
cp /usr/include/x86_64-linux-gnu/sleef.h "$dest/include/"
cp -P "$lib"/libsleef.so* "$dest/lib/"
if [[ ${1:-} == --onednn ]]; then
  cp -r /usr/include/dnnl*.h* /usr/include/oneapi "$dest/include/"
  cp -P "$lib"/libdnnl.so* "$dest/lib/"
fi
du -sh "$dest"
