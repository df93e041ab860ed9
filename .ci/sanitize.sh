#!/usr/bin/env bash
# CI's sanitizer jobs, after the normal build and suite (.ci/run): each builds into its own folder and
# fails on any finding.
#   asan  the suite with AddressSanitizer + UndefinedBehaviorSanitizer (RelWithDebInfo, build-asan/),
#         every test but the longest end-to-end ones (ASAN_EXCLUDE below)
#   tsan  ThreadSanitizer (build-tsan/) over the communicator, async-executor and trainer hand-off tests
#   fuzz  the libFuzzer targets (clang, build-fuzz/): each over its corpus, then FUZZ_SECONDS of new inputs
# Each job first runs a planted bug (tests/sanitize/canary.cc) and fails unless the sanitizer catches
# it, so a job that silently built without instrumentation cannot pass.
#   bash .ci/sanitize.sh [asan] [tsan] [fuzz]     (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: paths relative to the clone, and RelWithDebInfo's -g objects not keyed by the build folder, so a
# fresh clone in another folder (CI's) reuses what an earlier build of the same sources compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
JOBS="${JOBS:-$(nproc)}"
FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
# Left out of the ASan job: the mpirun tests (LeakSanitizer reports Open MPI's own allocations at
# MPI_Init as leaks; the MPI code runs unsanitized in the normal job) and, for time (together a third
# of the normal suite's test time), ResNet-18 end to end and the simulated-device trainer comparisons.
# They run unsanitized in the normal job, and the code they reach is covered by the tests that remain
# (LeNet/SimpleCNN training, the simulated device's own suite, conformance, the hostile-input corpus
# through the sanitized CLI).
ASAN_EXCLUDE='^mpi_|ResNet18|resnet18|^SimDevice\.TrainerOnCudaEqualsCpuReplicas$|^SimTrainer\.(SteadyState|EqualsCpuReplicas)'
TSAN_TESTS='^(CpuComm|AsyncExec)\.|^Trainer\.(OneTwoAndThreeReplicasHoldTheSameParameters|OverlappedAllReduceGivesBitwiseTheBlockingParameters)$|^TrainerStop\.(TwoReplicasStopTogether|AStopMidEpoch)'

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

step() { echo "sanitize: $*"; }
elapsed() { echo "sanitize: $1 took $(( $(date +%s) - $2 )) s"; }

# The planted bug `mode` of `binary` must be reported with `pattern`.
expect_caught() {
  local binary=$1 mode=$2 pattern=$3 log
  log=$(mktemp)
  if "$binary" "$mode" >"$log" 2>&1; then
    cat "$log"; echo "sanitize: FAIL: the planted '$mode' bug ran clean: $binary is not instrumented"; exit 1
  fi
  if ! grep -q "$pattern" "$log"; then
    cat "$log"; echo "sanitize: FAIL: the planted '$mode' bug was not reported as '$pattern'"; exit 1
  fi
  step "planted '$mode' bug caught ($pattern)"
  rm -f "$log"
}

# The libraries are shared objects here (GRAPHRUN_SHARED_LIBS): instrumented with debug information,
# a static link would copy about 0.33 GB of library into each of the 61 test binaries, 20 GB in all
# (which filled a CI machine's disk); shared, build-asan/ holds about 2.1 GB.
configure() {  # folder, sanitizer flags
  local dir=$1 flags=$2
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAPHRUN_CUDA=OFF -DGRAPHRUN_SANITIZER_CANARY=ON \
    -DGRAPHRUN_SHARED_LIBS=ON \
    -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
}

asan() {
  local t0; t0=$(date +%s)
  configure build-asan "-fsanitize=address,undefined -fno-sanitize-recover=all"
  cmake --build build-asan -j"$JOBS"
  expect_caught build-asan/tests/sanitizer_canary oob "heap-buffer-overflow"
  expect_caught build-asan/tests/sanitizer_canary ub "runtime error: signed integer overflow"
  ( cd build-asan && ctest -j"$JOBS" --timeout 1800 --output-on-failure -E "$ASAN_EXCLUDE" )
  elapsed asan "$t0"
}

tsan() {
  local t0; t0=$(date +%s)
  configure build-tsan "-fsanitize=thread"
  cmake --build build-tsan -j"$JOBS" --target sanitizer_canary cpu_comm_test async_exec_test trainer_test trainer_stop_test
  expect_caught build-tsan/tests/sanitizer_canary race "ThreadSanitizer: data race"
  # libgomp is not instrumented: one OpenMP thread (OMP_THREAD_LIMIT also caps the kernels that ask
  # for several with num_threads), so every thread TSan sees is graphrun's own.
  ( cd build-tsan && OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1 ctest -j"$JOBS" --timeout 1800 --output-on-failure -R "$TSAN_TESTS" )
  elapsed tsan "$t0"
}

fuzz() {
  local t0; t0=$(date +%s)
  cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DFUZZ_SECONDS="$FUZZ_SECONDS" >/dev/null
  cmake --build build-fuzz -j"$JOBS"
  ( cd build-fuzz && ctest -j"$JOBS" --timeout 900 --output-on-failure )
  elapsed fuzz "$t0"
}

jobs=("$@")
[ ${#jobs[@]} -eq 0 ] && jobs=(asan tsan fuzz)
for j in "${jobs[@]}"; do
  case "$j" in
    asan|tsan|fuzz) step "$j"; "$j" ;;
    *) echo "usage: bash .ci/sanitize.sh [asan] [tsan] [fuzz]"; exit 2 ;;
  esac
done
step "PASS (${jobs[*]})"
