#!/usr/bin/env bash
# Everything a short lease of a GPU machine should bring back, in one command (about 3 minutes when all is
# well, at most about 9): tests/gpu/check.sh on a packed build; the GPU tests that failed or crashed run
# again, the rest after a crash, and those under compute-sanitizer when the machine has it; then timings
# on the GPU: LeNet (3 epochs, with --profile), ResNet-18 (3 x 30 steps; weights filled on the spot by
# tests/gpu/weights.py), ResNet-18 on two replicas of one GPU with --sync-bn, and PyTorch on the same GPU
# (tests/gpu/torch_gpu.py) when the pack holds torch_reference.py and python3 has torch with CUDA.
#
#   tests/gpu/session.sh [PACK] [OUT]    PACK: a folder from tests/gpu/pack.sh (default <repo>/build-gpu);
#                                        OUT: where the logs go (default PACK/session); also OUT/logs.tgz
# Here, before the lease: ARCHIVE=1 TORCH_REF=.../torch_reference.py tests/gpu/pack.sh (about 45 MB with
# the data). Exit status: check.sh's.
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=$(cd "${1:-$root/build-gpu}" && pwd)
O=${2:-$B/session}
L=$O/logs
mkdir -p "$L"
T0=$SECONDS
{ nvidia-smi; nproc; free -g; } > "$L/machine.log" 2>&1
timeout 330 bash "$root/tests/gpu/check.sh" "$B" > "$O/check.log" 2>&1
rc=$?
echo "check.sh exit $rc at $((SECONDS - T0)) s" >> "$O/check.log"
cp "$B"/gpu_tests.log "$O/" 2>/dev/null
cp "$B"/train_*.log "$L/" 2>/dev/null
# check.sh's library path (the pack's libraries, the toolkit's, cuDNN/NCCL wherever it found them).
LD_LIBRARY_PATH=$(grep -h "^using " "$O/check.log" | sed 's/^using //' | xargs -r -n1 dirname | paste -sd: -)
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:${CUDA_HOME:-/usr/local/cuda}/lib64"
export GRAPHRUN_SOURCE_DIR=$root GRAPHRUN_BINARY_DIR=$B
G=$B/graphrun
K=$B/tests/gpu_kernels_test
data=${GRAPHRUN_DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$data" ] || data=$B/fashion-mnist

# A crash ends the test binary: run the rest without the crashed test (three times at most).
log=$B/gpu_tests.log
skip=
crashed=
for i in 1 2 3; do
  [ -f "$log" ] || break
  grep -qE '^\[==========\] [0-9]+ tests? from .* ran' "$log" && break
  c=$(grep -E '^\[ RUN +\]' "$log" | tail -1 | awk '{print $NF}')
  [ -z "$c" ] && break
  crashed="$crashed${crashed:+:}$c"
  skip="$skip:$c"
  echo "== crashed in $c; the rest:" >> "$O/gpu_tests.log"
  CUDA_LAUNCH_BLOCKING=1 timeout 100 "$K" --gtest_filter="-${skip#:}" > "$L/rest_$i.log" 2>&1
  echo "exit $?" >> "$L/rest_$i.log"
  log=$L/rest_$i.log
  grep -vE '^\[ *(RUN|OK) *\]' "$log" | tail -40 >> "$O/gpu_tests.log"
done
failed=$(cat "$B/gpu_tests.log" "$L"/rest_*.log 2>/dev/null | grep -E '^\[  FAILED  \] [A-Za-z]' | awk '{print $4}' |
         sort -u | head -6 | paste -sd: -)
bad="$crashed${crashed:+${failed:+:}}$failed"
if [ -n "$bad" ] && command -v compute-sanitizer > /dev/null; then
  echo "== compute-sanitizer memcheck: $bad" > "$O/sanitizer.log"
  timeout 120 compute-sanitizer --tool memcheck --print-limit 30 "$K" --gtest_filter="$bad" >> "$O/sanitizer.log" 2>&1
  echo "exit $?" >> "$O/sanitizer.log"
fi

P=$O/timings.log
echo "== timings at $((SECONDS - T0)) s" > "$P"
timeout 60 "$G" train "$root/models/lenet.onnx" --gpus 1 --data "$data" --epochs 3 --batch-size 256 --lr 0.2 \
  --profile "$L/lenet_gpu_trace.json" >> "$P" 2>&1
echo "lenet --profile exit $?" >> "$P"
if [ -f "$B/resnet18_noweights.onnx" ] && python3 "$root/tests/gpu/weights.py" fill "$B/resnet18_noweights.onnx" /tmp/resnet18.onnx >> "$P" 2>&1; then
  timeout 120 "$G" train /tmp/resnet18.onnx --gpus 1 --data "$data" --epochs 3 --max-steps 30 --batch-size 256 --lr 0.05 >> "$P" 2>&1
  echo "resnet18 exit $?" >> "$P"
  timeout 60 "$G" train /tmp/resnet18.onnx --devices cuda:0,cuda:0 --sync-bn --data "$data" --epochs 2 --max-steps 20 \
    --batch-size 256 --lr 0.05 >> "$P" 2>&1
  echo "resnet18 cuda:0,cuda:0 --sync-bn exit $?" >> "$P"
fi
if [ -f "$B/torch_reference.py" ]; then
  timeout 90 python3 "$root/tests/gpu/torch_gpu.py" "$B/torch_reference.py" "$data" >> "$P" 2>&1
  echo "torch exit $?" >> "$P"
fi
echo "== done at $((SECONDS - T0)) s" >> "$P"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
tail -3 "$O/check.log"
exit $rc
