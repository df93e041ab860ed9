#!/usr/bin/env bash
# The CUDA backend's device check (issue 5), for a machine with an NVIDIA GPU, in under five minutes:
# configure and build (Release, CUDA on), run the GPU tests, then train LeNet for 2 epochs on
# --gpus 1 and on --devices cuda:0,cuda:0 (and with two GPUs on --gpus 2, AllReduce overlap on and
# off), printing sec/epoch and test accuracy of each.
#
#   tests/gpu/check.sh [BUILD_DIR]        run from anywhere; BUILD_DIR defaults to <repo>/build-gpu
#   GRAPHRUN_DATA=DIR                     Fashion-MNIST (IDX files, gzipped or not); default
#                                         /usr/share/datasets/fashion-mnist, else <repo>/fashion-mnist
#   SKIP_BUILD=1                          use BUILD_DIR as it is (built elsewhere and carried)
#   CMAKE_ARGS="..."                      extra configure arguments, e.g. where cuDNN/NCCL live:
#                                         -DGRAPHRUN_CUDNN_LIBRARY=... -DGRAPHRUN_CUDNN_INCLUDE=... (same for NCCL)
# The machine needs graphrun's build dependencies (DESIGN.md: ONNX, protobuf, Eigen, GoogleTest, CUDA
# toolkit with cuDNN and NCCL) unless SKIP_BUILD=1 is given a build whose shared libraries it has.
# Exit status: 0 when the build, the GPU tests and both trainings succeed; 1 otherwise.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-gpu}
jobs=${JOBS:-16}
status=0
step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

step "GPU"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: not available"

mkdir -p "$build"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  step "configure + build (Release, GRAPHRUN_CUDA=ON, -j$jobs)"
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
  if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGRAPHRUN_CUDA=ON ${CMAKE_ARGS:-} > "$build/configure.log" 2>&1; then
    tail -20 "$build/configure.log"; echo "check: configure failed"; exit 1
  fi
  grep "graphrun: CUDA" "$build/configure.log"
  if ! cmake --build "$build" -j "$jobs" --target graphrun gpu_kernels_test > "$build/build.log" 2>&1; then
    grep -E "error|Error" "$build/build.log" | head -30; echo "check: build failed"; exit 1
  fi
  echo "built graphrun and gpu_kernels_test"
fi

step "GPU tests"
timeout 200 "$build/tests/gpu_kernels_test" 2>&1 | tee "$build/gpu_tests.log" | grep -vE '^\[ *(RUN|OK) *\]' | tail -40
if ! grep -q "PASSED" "$build/gpu_tests.log" || grep -q "FAILED" "$build/gpu_tests.log"; then status=1; fi
if grep -q "needs a CUDA GPU" "$build/gpu_tests.log"; then echo "check: GPU tests were skipped: no usable GPU"; status=1; fi

data=${GRAPHRUN_DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$data" ] || data="$root/fashion-mnist"
model="$root/models/lenet.onnx"
train() {  # train <label> <device flags...>
  local label=$1; shift
  step "train LeNet, 2 epochs, $label"
  local log="$build/train_${label//[^a-z0-9]/_}.log"
  timeout 150 "$build/graphrun" train "$model" "$@" --data "$data" --epochs 2 --batch-size 256 --lr 0.2 > "$log" 2>&1
  local rc=$?
  tail -4 "$log"
  if [ $rc -ne 0 ]; then echo "check: training on $label failed (exit $rc)"; status=1; return; fi
  grep -E "sec/epoch" "$log" | tail -1 | sed "s/^/RESULT $label: /"
}
if [ ! -f "$model" ]; then
  echo "check: $model is missing: training skipped"; status=1
elif [ ! -d "$data" ]; then
  echo "check: no Fashion-MNIST at $data (set GRAPHRUN_DATA): training skipped"; status=1
else
  train "gpus-1" --gpus 1
  train "cuda0x2" --devices cuda:0,cuda:0
  # NCCL with AllReduce overlapping the backward pass (the default on GPUs) and without, when there are two GPUs.
  if [ "$(nvidia-smi --list-gpus 2>/dev/null | wc -l)" -ge 2 ]; then
    train "gpus-2-overlap-on" --gpus 2 --overlap-allreduce on
    train "gpus-2-overlap-off" --gpus 2 --overlap-allreduce off
  fi
fi

step "done"
[ $status -eq 0 ] && echo "check: OK" || echo "check: FAILED"
exit $status
