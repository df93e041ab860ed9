#!/usr/bin/env bash
# Installs what graphrun needs (Debian packages) and builds it into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang and its runtime libraries (libFuzzer, sanitizers) serve CI's sanitizer jobs (.ci/sanitize.sh).
packages=(build-essential cmake ccache libonnx-dev libprotobuf-dev protobuf-compiler libeigen3-dev
          libgtest-dev zlib1g-dev libcli11-dev nlohmann-json3-dev libdnnl-dev python3-numpy python3-torch python3-torchvision python3-onnx dataset-fashion-mnist graphviz
          clang libclang-rt-14-dev)
# The data sources: .npz (libzip), PNG and JPEG image folders.
packages+=(libzip-dev libpng-dev libjpeg-dev)
# MPI (mpirun -np K graphrun train; optional at build time, the MPI tests need it).
packages+=(openmpi-bin libopenmpi-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ccache keys on paths relative to the clone, so another clone of the same sources reuses its objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/graphrun"
