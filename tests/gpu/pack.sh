#!/usr/bin/env bash
# Prepares the device check on a machine without a GPU: builds graphrun and gpu_kernels_test (Release,
# CUDA on) and packs what tests/gpu/check.sh needs into one folder that can travel to a GPU machine
# lacking graphrun's build dependencies: the two binaries, the shared libraries they need that are
# neither CUDA's nor the C/C++ runtime's (ONNX, protobuf, OpenMP, zlib), and Fashion-MNIST.
#
#   tests/gpu/pack.sh [OUT]     OUT defaults to <repo>/build-gpu (ignored by git); prints its size
#   BUILD_DIR=DIR               where to build (default <repo>/build-pack); JOBS=N parallel jobs (default 2)
#   PACK_MARCH=ARCH             the CPU the binaries may assume (default x86-64-v3: AVX2 and FMA). The
#                               GPU machine's CPU is not this one, so the packed build is never -march=native
#   GRAPHRUN_DATA=DIR           Fashion-MNIST to pack (default /usr/share/datasets/fashion-mnist); NO_DATA=1 packs none
#   ARCHIVE=1                   the binaries and libraries as one gzipped tar, OUT/pack.tgz (about a third of their
#                               size: for transfers with a size limit); check.sh unpacks it in place
#   TORCH_REF=FILE              also pack the PyTorch yardstick (torch_reference.py) for tests/gpu/session.sh
# On the GPU machine: SKIP_BUILD=1 tests/gpu/check.sh OUT (check.sh also skips the build by itself
# when OUT holds the PACKED marker this script writes).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/build-gpu}
build=${BUILD_DIR:-$root/build-pack}
march=${PACK_MARCH:-x86-64-v3}
jobs=${JOBS:-2}

# GRAPHRUN_ONEDNN=OFF: oneDNN's 38 MB shared library would not fit the pack's size limit (Eigen's GEMM instead).
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGRAPHRUN_CUDA=ON -DGRAPHRUN_NATIVE=OFF -DGRAPHRUN_ONEDNN=OFF \
      -DCMAKE_CXX_FLAGS="-march=$march" > /dev/null
cmake --build "$build" -j "$jobs" --target graphrun gpu_kernels_test > /dev/null
# ResNet-18 (models/resnet18.onnx, exported at build time where /usr/bin/python3 has torch and onnx).
cmake --build "$build" -j "$jobs" --target generated_models > /dev/null 2>&1 || true

rm -rf "$out"
mkdir -p "$out/tests" "$out/lib"
cp "$build/graphrun" "$out/graphrun"
cp "$build/tests/gpu_kernels_test" "$out/tests/gpu_kernels_test"
strip --strip-unneeded "$out/graphrun" "$out/tests/gpu_kernels_test"

# Shared libraries to carry: everything ldd resolves except CUDA's (the GPU machine has its own
# toolkit and driver) and the C/C++ runtime (glibc, libstdc++, libgcc: the machine's own).
for bin in "$out/graphrun" "$out/tests/gpu_kernels_test"; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libcuda*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|\
    libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
    *) cp -L "$path" "$out/lib/$name" ;;
  esac
done

data=${GRAPHRUN_DATA:-/usr/share/datasets/fashion-mnist}
if [ "${NO_DATA:-0}" != 1 ] && [ -d "$data" ]; then
  mkdir -p "$out/fashion-mnist"
  cp "$data"/*-ubyte* "$out/fashion-mnist/"
fi

if [ -n "${TORCH_REF:-}" ]; then cp "$TORCH_REF" "$out/torch_reference.py"; fi
# ResNet-18 travels as its graph with the float weights left out (44 MB of random numbers): session.sh
# fills them with seeded normals on the GPU machine (tests/gpu/weights.py).
if [ -f "$build/models/resnet18.onnx" ] && command -v /usr/bin/python3 > /dev/null; then
  /usr/bin/python3 "$root/tests/gpu/weights.py" strip "$build/models/resnet18.onnx" "$out/resnet18_noweights.onnx" > /dev/null || true
fi
if [ "${ARCHIVE:-0}" = 1 ]; then
  tar -czf "$out/pack.tgz" -C "$out" graphrun tests lib
  rm -rf "$out/graphrun" "$out/tests" "$out/lib"
fi

{
  echo "packed by tests/gpu/pack.sh from $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') for -march=$march"
  echo "libraries: $( (ls "$out/lib" 2>/dev/null || tar -tzf "$out/pack.tgz" | sed -n 's|^lib/\(.\)|\1|p') | tr '\n' ' ')"
} > "$out/PACKED"
echo "pack: $out holds $(du -sh "$out" | cut -f1) ($(du -sb "$out" | cut -f1) bytes): $(sed -n 's/^libraries: //p' "$out/PACKED")"
