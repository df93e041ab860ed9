#!/usr/bin/env bash
# The CUDA backend's device check (issue 5), for a machine with an NVIDIA GPU, in under five minutes:
# build (or take a packed build), run the GPU tests, then train LeNet for 2 epochs on --gpus 1 (and
# evaluate the saved model again with --eval-only), on --devices cuda:0,cuda:0 and, with two GPUs, on
# --gpus 2 with the AllReduce overlap on and off, printing sec/epoch and test accuracy of each and one
# PASS/FAIL line.
#
#   tests/gpu/check.sh [BUILD_DIR]        run from anywhere; BUILD_DIR defaults to <repo>/build-gpu
#   SKIP_BUILD=1                          use BUILD_DIR as it is (built elsewhere and carried); implied
#                                         when BUILD_DIR holds the PACKED marker of tests/gpu/pack.sh
#   GRAPHRUN_DATA=DIR                     Fashion-MNIST (IDX files, gzipped or not); default
#                                         /usr/share/datasets/fashion-mnist, else BUILD_DIR/fashion-mnist,
#                                         else <repo>/fashion-mnist
#   CMAKE_ARGS="..."                      extra configure arguments, e.g. where cuDNN/NCCL live:
#                                         -DGRAPHRUN_CUDNN_LIBRARY=... -DGRAPHRUN_CUDNN_INCLUDE=... (same for NCCL)
#   JOBS=N                                parallel build jobs (default: all cores)
# cuDNN, NCCL and cuBLAS missing from the toolkit's folder and the loader's cache are looked for under
# /usr and /opt (Python packages such as nvidia-cudnn-cu13 carry them) and added to LD_LIBRARY_PATH.
# A machine without graphrun's build dependencies (ONNX, protobuf, Eigen, GoogleTest) runs a build
# packed elsewhere: tests/gpu/pack.sh there (binaries, their non-CUDA shared libraries, the data),
# then this script here with that folder. It needs the CUDA toolkit's libraries (cuDNN, cuBLAS,
# NCCL) and the driver.
# Exit status: 0 (the last line says "check: PASS") when the GPU tests pass, both trainings finish
# and the saved model scores on --eval-only what training printed; 1 ("check: FAIL: <what failed>")
# otherwise. Timeouts add up to under five minutes (120 + 70 + 30 + 70 s).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-gpu}
build=$(mkdir -p "$build" && cd "$build" && pwd)
jobs=${JOBS:-$(nproc)}
failed=()
step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }
finish() {
  step "done"
  grep -h "^RESULT" "$build"/train_*.log.result 2>/dev/null
  if [ ${#failed[@]} -eq 0 ]; then echo "check: PASS (${SECONDS}s)"; exit 0; fi
  local what
  what=$(printf '%s; ' "${failed[@]}")
  echo "check: FAIL: ${what%; } (${SECONDS}s)"
  exit 1
}

step "GPU"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: not available"

if [ "${SKIP_BUILD:-0}" != 1 ] && [ ! -f "$build/PACKED" ]; then
  step "configure + build (Release, GRAPHRUN_CUDA=ON, -j$jobs)"
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
  if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGRAPHRUN_CUDA=ON ${CMAKE_ARGS:-} > "$build/configure.log" 2>&1; then
    tail -20 "$build/configure.log"; failed+=("configure"); finish
  fi
  grep "graphrun: CUDA" "$build/configure.log"
  if ! cmake --build "$build" -j "$jobs" --target graphrun gpu_kernels_test > "$build/build.log" 2>&1; then
    grep -E "error|Error" "$build/build.log" | head -30; failed+=("build"); finish
  fi
  echo "built graphrun and gpu_kernels_test"
else
  step "packed build in $build"
  cat "$build/PACKED" 2>/dev/null
  # ARCHIVE=1 packs: the binaries and libraries travel as one archive.
  if [ -f "$build/pack.tgz" ] && [ ! -x "$build/graphrun" ]; then tar -xzf "$build/pack.tgz" -C "$build"; fi
  # The carried shared libraries (ONNX, protobuf, ...) come first; CUDA's are the machine's.
  [ -d "$build/lib" ] && export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The binaries' RUNPATH names the toolkit's lib/ where they were built; the toolkit here may keep
  # its libraries in lib64/ instead.
  cuda_home=${CUDA_HOME:-/usr/local/cuda}
  for d in "$cuda_home/lib64" "$cuda_home/lib"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
  done
fi
# cuDNN, NCCL and cuBLAS where the toolkit and the loader's cache lack them: a machine may have them from
# Python packages only (site-packages/nvidia/*/lib).
for lib in libcudnn.so.9 libnccl.so.2 libcublas.so.13 libcublasLt.so.13; do
  ldconfig -p 2>/dev/null | grep -q "$lib" && continue
  found=
  for d in ${LD_LIBRARY_PATH//:/ } "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/lib"; do
    [ -e "$d/$lib" ] && found=1 && break
  done
  [ -n "$found" ] && continue
  p=$(find /usr /opt -name "$lib" -path "*nvidia*" 2>/dev/null | head -1)
  [ -z "$p" ] && p=$(find /usr /opt -name "$lib" 2>/dev/null | head -1)
  if [ -n "$p" ]; then
    echo "using $p"
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$p")"
  fi
done
for bin in "$build/graphrun" "$build/tests/gpu_kernels_test"; do
  if [ ! -x "$bin" ]; then echo "check: $bin is missing"; failed+=("missing $(basename "$bin")"); finish; fi
  missing=$(ldd "$bin" 2>/dev/null | grep "not found")
  if [ -n "$missing" ]; then
    echo "check: $(basename "$bin") cannot load:"; echo "$missing"; failed+=("shared libraries of $(basename "$bin")"); finish
  fi
done

# Line-buffered output: what a process printed before a timeout kills it stays in its log.
linebuf=()
command -v stdbuf > /dev/null && linebuf=(stdbuf -oL -eL)

step "GPU tests"
data=${GRAPHRUN_DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$data" ] || data="$build/fashion-mnist"
[ -d "$data" ] || data="$root/fashion-mnist"
# The test binary finds the models in this checkout and the build, wherever it was built, and the data
# of its trainer tests in GRAPHRUN_DATA.
export GRAPHRUN_SOURCE_DIR="$root" GRAPHRUN_BINARY_DIR="$build" GRAPHRUN_DATA="$data"
# Blocking launches: a kernel that faults is reported at its own launch (with its node's name), not
# at some later synchronising call. The tests are small; the trainings below run at full speed.
CUDA_LAUNCH_BLOCKING=1 timeout 120 "${linebuf[@]}" "$build/tests/gpu_kernels_test" > "$build/gpu_tests.log" 2>&1
rc=$?
grep -vE '^\[ *(RUN|OK) *\]' "$build/gpu_tests.log" | grep -vE '^$' | tail -60
summary=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$build/gpu_tests.log" | sed 's/, listed below://' | tr '\n' ' ')
echo "GPU tests: ${summary:-no summary (exit $rc)}"
if [ $rc -eq 124 ]; then failed+=("GPU tests timed out (120 s)")
elif [ $rc -ne 0 ] || ! grep -q "PASSED" "$build/gpu_tests.log"; then failed+=("GPU tests (exit $rc)"); fi
if grep -q "needs a CUDA GPU" "$build/gpu_tests.log"; then
  echo "check: GPU tests were skipped: no usable GPU"; failed+=("no usable GPU")
fi

model="$root/models/lenet.onnx"
train() {  # train <label> <device flags...>
  local label=$1; shift
  step "train LeNet, 2 epochs, $label"
  local log="$build/train_${label//[^a-z0-9]/_}.log"
  rm -f "$log.result"
  # No progress bar (not a terminal); 70 s is ten times what 2 LeNet epochs should take on one GPU.
  timeout 70 "${linebuf[@]}" "$build/graphrun" train "$model" "$@" --data "$data" --epochs 2 --batch-size 256 --lr 0.2 > "$log" 2>&1
  local rc=$?
  tail -5 "$log"
  if [ $rc -eq 124 ]; then echo "check: training on $label timed out (70 s)"; failed+=("training $label timed out"); return; fi
  if [ $rc -ne 0 ]; then echo "check: training on $label failed (exit $rc)"; failed+=("training $label (exit $rc)"); return; fi
  # The closing line: "test acc: 0.84, 5.1 sec/epoch on [cuda:0]".
  local closing
  closing=$(grep -E "sec/epoch" "$log" | tail -1)
  echo "RESULT $label: ${closing:-no closing line}" | tee "$log.result"
}
if [ ! -f "$model" ]; then
  echo "check: $model is missing: training skipped"; failed+=("no model")
elif [ ! -d "$data" ]; then
  echo "check: no Fashion-MNIST at $data (set GRAPHRUN_DATA): training skipped"; failed+=("no data")
else
  saved="$build/lenet_gpus1.onnx"
  rm -f "$saved"
  train "gpus-1" --gpus 1 --save "$saved"
  if [ -f "$saved" ]; then
    # The saved model evaluated again on the GPU (--eval-only) must score what the last epoch printed.
    step "evaluate the saved model on the GPU (--eval-only)"
    ev=$(timeout 30 "$build/graphrun" train "$saved" --eval-only --gpus 1 --data "$data" 2>&1)
    rc=$?
    echo "$ev" | tail -3
    acc_eval=$(echo "$ev" | sed -n 's/^test acc: \([0-9.e-]*\),.*/\1/p' | tail -1)
    acc_train=$(grep -oE "test acc [0-9.]+" "$build/train_gpus_1.log" | tail -1 | cut -d' ' -f3)
    if [ $rc -ne 0 ] || [ -z "$acc_eval" ] || [ -z "$acc_train" ]; then
      failed+=("eval-only (exit $rc)")
    elif ! awk -v a="$acc_eval" -v b="$acc_train" 'BEGIN { d = a - b; exit !(d < 0.0015 && d > -0.0015) }'; then
      echo "check: the saved model scores $acc_eval on --eval-only, the last epoch printed $acc_train"
      failed+=("eval-only accuracy $acc_eval != $acc_train")
    else
      echo "RESULT eval-only: test acc $acc_eval (the last epoch printed $acc_train)" | tee "$build/train_eval_only.log.result"
    fi
  fi
  train "cuda0x2" --devices cuda:0,cuda:0
  # NCCL with AllReduce overlapping the backward pass (the default on GPUs) and without, when there are two GPUs.
  if [ "$(nvidia-smi --list-gpus 2>/dev/null | wc -l)" -ge 2 ]; then
    train "gpus-2-overlap-on" --gpus 2 --overlap-allreduce on
    train "gpus-2-overlap-off" --gpus 2 --overlap-allreduce off
  fi
fi
finish
