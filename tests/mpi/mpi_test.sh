#!/bin/bash
# The MPI suite (ctest runs each case under mpirun with a TIMEOUT, so a hang fails):
#   mpi_test.sh GRAPHRUN MPIRUN MODEL CASE   with CASE one of
#   equal2 / equal3 / equal4  -np K --devices cpu:1 saves the same weights, bitwise, as --devices cpu:K,
#                    and prints the same --log-every and epoch figures (equal4: the chain pipelined in 4 KiB segments)
#   overlap          -np 3 with --overlap-allreduce on (16 KB buckets) saves bitwise the weights of cpu:3
#   uneven           rank 0 with cpu:1 and rank 1 with cpu:2 saves bitwise the weights of cpu:3
#   voice            only rank 0 prints and writes --metrics; the closing line lists every replica; an error
#                    every rank hits is one line, rank 0's
#   killed           kill -9 of rank 1 mid-epoch: mpirun exits non-zero, rank 0 names its step
#   hung             a stopped rank 1: rank 0 fails after --comm-timeout, naming rank 1 and the step
#   hung3            the same with 3 ranks and the chain in 4 KiB segments (ended within 30 s, the step named)
#   badinput         a bad --data on rank 1 only: the job exits 2 with rank 1's one-line error
#   mismatch         another --batch-size, or another model, on rank 1: exit 2, the difference named
#   resume           a checkpoint of -np 2 resumes on -np 3 (and on cpu:3): the weights of cpu:2's run; the
#                    resumed runs print the same --log-every and epoch figures (a block spanning the resume
#                    too), and the uninterrupted run's
#   syncbn           --sync-bn on a BatchNorm CNN across ranks (1 + 2 replicas, batch 10: shards 4+3+3) saves bitwise
#                    the weights and running statistics of --sync-bn on cpu:3
#   stop             SIGUSR1 to mpirun mid-run: every rank stops at one step, one checkpoint, exit 138; --resume
#                    then saves bitwise the weights of an uninterrupted cpu:2 run
#   syncbn64         the same CNN in float64 (--float64), 20 SGD steps: --sync-bn over 2 ranks x cpu:1 (5+5) and
#                    1 + 2 replicas (4+3+3) within 1e-10 (relative) of 1 replica on the whole batch, and bitwise
#                    cpu:2 / cpu:3; without --sync-bn over 2 ranks more than 1e-3 away
#   ownloss          --loss output (LeNet computing its own cross-entropy): 1 + 2 replicas over 2 ranks save bitwise
#                    the weights of cpu:3 and print its test loss
#   evalbatch        rank 1 alone with little memory: every rank evaluates in rank 1's (smaller) batch, and the
#                    figures are those of both ranks tight
set -u
FAULT_ENV=()
G=$1 MPIRUN=$2 MODEL=$3 CASE=$4
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
# As root, more ranks than cores, shared memory that works in containers.
M=("$MPIRUN" --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
T=(train "$MODEL" --epochs 1 --threads 1)
fail() { echo "FAIL ($CASE): $*"; for f in *.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
# The figures a run prints: its --log-every lines and its epoch lines without their times.
figures() { grep -E '^(step|epoch) ' "$1" | sed -E 's/  [0-9.]+ sec .*//'; }

# The pid of rank R among mpirun's children.
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}

# Starts a long run, lets it train, then does $1 to rank 1; the job must end within $2 seconds.
fault() {
  # 50 epochs: the fault must come while it trains (one LeNet epoch can take under 5 s).
  "${M[@]}" "${FAULT_ENV[@]}" -np "${FAULT_NP:-2}" "$G" train "$MODEL" --epochs 50 --threads 1 --devices cpu:1 --comm-timeout 5 > job.out 2>&1 &
  local mp=$! p=""
  for _ in $(seq 100); do
    sleep 0.5
    grep -q '^training' job.out 2>/dev/null && p=$(rank_pid $mp 1) && [ -n "$p" ] && break
  done
  [ -n "$p" ] || { kill $mp; fail "rank 1 did not start"; }
  sleep 4  # some steps
  local t0=$SECONDS
  kill -"$1" "$p"
  local waited=0
  while kill -0 $mp 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    [ $waited -le "$2" ] || { kill -9 $mp; fail "the job still runs $2 s after the fault"; }
  done
  wait $mp
  RC=$?
  echo "job ended $((SECONDS - t0)) s after the fault, exit $RC"
}

case "$CASE" in
  equal2|equal3|equal4)
    K=${CASE#equal}
    # -np 4: the chain in segments of 4 KiB, so that each of LeNet's buckets is pipelined in many.
    SEG=(); [ "$K" = 4 ] && SEG=(-x GRAPHRUN_MPI_SEGMENT_KB=4)
    "${M[@]}" "${SEG[@]}" -np "$K" "$G" "${T[@]}" --devices cpu:1 --max-steps 50 --log-every 7 --save mpi.onnx > mpi.out 2>&1 ||
      fail "mpirun failed"
    "$G" "${T[@]}" --devices cpu:$K --max-steps 50 --log-every 7 --save local.onnx > local.out 2>&1 || fail "cpu:$K failed"
    cmp mpi.onnx local.onnx || fail "-np $K --devices cpu:1 and --devices cpu:$K saved different weights"
    [ "$(figures mpi.out | grep -c '^step ')" = 8 ] || fail "-np $K: not 8 --log-every lines"
    [ "$(figures mpi.out)" = "$(figures local.out)" ] || fail "-np $K and cpu:$K printed different figures"
    echo "-np $K x cpu:1 == cpu:$K bitwise after 50 steps ${SEG[*]}"
    ;;
  syncbn|syncbn64)
    # A small BatchNorm CNN, written with onnx.helper as a user would.
    /usr/bin/python3 - <<'PY' || fail "could not write the BatchNorm model"
import numpy as np, onnx
from onnx import helper as h, numpy_helper as nh, TensorProto as T
r = np.random.default_rng(0)
w = lambda n, *s: nh.from_array((r.standard_normal(s) * 0.1).astype(np.float32), n)
inits = [w('conv.w', 4, 1, 5, 5), w('conv.b', 4), nh.from_array(np.ones(4, np.float32), 'bn.scale'), w('bn.bias', 4),
         nh.from_array(np.zeros(4, np.float32), 'bn.mean'), nh.from_array(np.ones(4, np.float32), 'bn.var'),
         w('fc.w', 10, 576), w('fc.b', 10), nh.from_array(np.array([0, -1], np.int64), 'flat')]
nodes = [h.make_node('Conv', ['image', 'conv.w', 'conv.b'], ['c']),
         h.make_node('BatchNormalization', ['c', 'bn.scale', 'bn.bias', 'bn.mean', 'bn.var'], ['n']),
         h.make_node('Relu', ['n'], ['r']), h.make_node('MaxPool', ['r'], ['p'], kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node('Reshape', ['p', 'flat'], ['f']), h.make_node('Gemm', ['f', 'fc.w', 'fc.b'], ['logits'], transB=1)]
g = h.make_graph(nodes, 'bncnn', [h.make_tensor_value_info('image', T.FLOAT, ['N', 1, 28, 28])],
                 [h.make_tensor_value_info('logits', T.FLOAT, ['N', 10])], inits)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), 'bncnn.onnx')
# (syncbn64) 200 training and 20 test examples: float64 evaluates a whole test set slowly.
np.savez('small.npz', image=r.random((220, 1, 28, 28), dtype=np.float32), labels=r.integers(0, 10, 220))
PY
    if [ "$CASE" = syncbn64 ]; then
      S=(train bncnn.onnx --epochs 1 --threads 1 --max-steps 20 --batch-size 10 --lr 0.05 --float64 --data small.npz
         --val-split 0.09)
      "$G" "${S[@]}" --devices cpu:1 --save ref.onnx > ref.out 2>&1 || fail "cpu:1 failed"
      for d in 2 3; do
        "$G" "${S[@]}" --devices cpu:$d --sync-bn --save local$d.onnx > local$d.out 2>&1 || fail "cpu:$d failed"
      done
      "${M[@]}" -np 2 "$G" "${S[@]}" --devices cpu:1 --sync-bn --save mpi2.onnx > mpi2.out 2>&1 || fail "mpirun failed"
      "${M[@]}" -np 1 "$G" "${S[@]}" --devices cpu:1 --sync-bn --save mpi3.onnx : -np 1 "$G" "${S[@]}" --devices cpu:2 \
        --sync-bn > mpi3.out 2>&1 || fail "mpirun (1 + 2 replicas) failed"
      "${M[@]}" -np 2 "$G" "${S[@]}" --devices cpu:1 --save plain.onnx > plain.out 2>&1 || fail "mpirun without --sync-bn failed"
      cmp mpi2.onnx local2.onnx || fail "--sync-bn over 2 ranks and on cpu:2 saved different weights"
      cmp mpi3.onnx local3.onnx || fail "--sync-bn over rank0 cpu:1 + rank1 cpu:2 and on cpu:3 saved different weights"
      /usr/bin/python3 - <<'PY' || fail "float64 --sync-bn does not match 1 replica on the whole batch"
import numpy as np, onnx
from onnx import numpy_helper as nh
def load(f): return {t.name: nh.to_array(t) for t in onnx.load(f).graph.initializer}
ref = load('ref.onnx')
def worst(f):
    m = load(f)
    return max(float(np.max(np.abs(m[k] - v))) / max(1.0, float(np.max(np.abs(v))))
               for k, v in ref.items() if np.issubdtype(v.dtype, np.floating))
assert all(v.dtype == np.float64 for k, v in ref.items() if np.issubdtype(v.dtype, np.floating)), 'not saved as f64'
ok = True
for f, sync in (('mpi2.onnx', True), ('mpi3.onnx', True), ('plain.onnx', False)):
    w = worst(f)
    good = w <= 1e-10 if sync else w > 1e-3
    print(f'{f}: max relative difference {w:.2e} ({"--sync-bn, <= 1e-10" if sync else "no --sync-bn, > 1e-3"}):',
          'ok' if good else 'FAILED')
    ok &= good
raise SystemExit(0 if ok else 1)
PY
      echo "--sync-bn in float64: 2 ranks and 1 + 2 replicas equal 1 replica on the whole batch (and cpu:2 / cpu:3 bitwise)"
      exit 0
    fi
    S=(train bncnn.onnx --epochs 1 --threads 1 --max-steps 20 --batch-size 10 --lr 0.05 --sync-bn)
    "${M[@]}" -np 1 "$G" "${S[@]}" --devices cpu:1 --save mpi.onnx : -np 1 "$G" "${S[@]}" --devices cpu:2 \
      > mpi.out 2>&1 || fail "mpirun failed"
    "$G" "${S[@]}" --devices cpu:3 --save local.onnx > local.out 2>&1 || fail "cpu:3 failed"
    cmp mpi.onnx local.onnx || fail "--sync-bn over 2 ranks and on cpu:3 saved different weights"
    echo "--sync-bn: rank0 cpu:1 + rank1 cpu:2 == cpu:3 bitwise after 20 steps"
    ;;
  overlap)
    # --overlap-allreduce on, 16 KB buckets (several AllReduces, each summed on a communication thread
    # while the backward pass goes on) over the pipelined chain: the weights of cpu:3 without overlap.
    "${M[@]}" -np 3 "$G" "${T[@]}" --devices cpu:1 --max-steps 20 --bucket-mb 0.016 --overlap-allreduce on \
      --profile trace.json --save mpi.onnx > mpi.out 2>&1 || fail "mpirun failed"
    grep -q '"AllReduce wait"' trace.json || fail "no AllReduce finished asynchronously (no 'AllReduce wait' in rank 0's trace)"
    "$G" "${T[@]}" --devices cpu:3 --max-steps 20 --bucket-mb 0.016 --save local.onnx > local.out 2>&1 || fail "cpu:3 failed"
    cmp mpi.onnx local.onnx || fail "-np 3 with --overlap-allreduce on and cpu:3 saved different weights"
    echo "-np 3 x cpu:1 --overlap-allreduce on == cpu:3 bitwise after 20 steps (16 KB buckets)"
    ;;
  uneven)
    "${M[@]}" -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 20 --save mpi.onnx : -np 1 "$G" "${T[@]}" --devices cpu:2 \
      --max-steps 20 > mpi.out 2>&1 || fail "mpirun failed"
    grep -q 'on \[rank0:cpu:0, rank1:cpu:0, rank1:cpu:1\]$' mpi.out || fail "the closing line does not list the 3 replicas"
    "$G" "${T[@]}" --devices cpu:3 --max-steps 20 --save local.onnx > local.out 2>&1 || fail "cpu:3 failed"
    cmp mpi.onnx local.onnx || fail "1 + 2 replicas over 2 ranks and cpu:3 saved different weights"
    echo "rank0 cpu:1 + rank1 cpu:2 == cpu:3 bitwise after 20 steps"
    # Evaluation is split over the job's 3 replicas either way (each its share, the totals added in
    # replica order): the same test accuracy and loss, to every printed digit (of a model trained
    # past chance, so that the figures depend on every share).
    "$G" train "$MODEL" --devices cpu:1 --threads 1 --epochs 1 --max-steps 30 --optimizer adam --lr 2e-3 \
      --save trained.onnx > trained.out 2>&1 || fail "training a model to evaluate failed"
    E=(train trained.onnx --eval-only --threads 1)
    "${M[@]}" -np 1 "$G" "${E[@]}" --devices cpu:1 : -np 1 "$G" "${E[@]}" --devices cpu:2 > mpi_eval.out 2>&1 \
      || fail "mpirun --eval-only failed"
    "$G" "${E[@]}" --devices cpu:3 > local_eval.out 2>&1 || fail "cpu:3 --eval-only failed"
    want=$(grep '^test acc:' local_eval.out)
    [ -n "$want" ] || fail "cpu:3 --eval-only printed no test figures"
    [ "$(grep -c '^test acc:' mpi_eval.out)" = 1 ] || fail "the ranks printed the test figures other than once"
    [ "$(grep '^test acc:' mpi_eval.out)" = "$want" ] || fail "evaluation over 2 ranks: $(grep '^test acc:' mpi_eval.out); cpu:3: $want"
    echo "--eval-only over rank0 cpu:1 + rank1 cpu:2 == cpu:3: $want"
    ;;
  voice)
    "${M[@]}" -np 2 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 --metrics run.jsonl --save m.onnx \
      --checkpoint-dir ck --dump-after attach_loss > voice.out 2>&1 || fail "mpirun failed"
    [ "$(grep -c '^# graph after pass attach_loss' voice.out)" = 1 ] || fail "--dump-after is not printed once"
    [ "$(grep -c '^training ' voice.out)" = 1 ] || fail "the start line is not printed once"
    [ "$(grep -c '^epoch 1/1' voice.out)" = 1 ] || fail "the epoch line is not printed once"
    grep -q 'sec/epoch on \[rank0:cpu:0, rank1:cpu:0\]$' voice.out || fail "the closing line does not list every replica"
    [ "$(wc -l < run.jsonl)" = 1 ] || fail "--metrics has not one line"
    grep -q '"devices":"\[rank0:cpu:0, rank1:cpu:0\]"' run.jsonl || fail "--metrics does not name every replica"
    [ "$(ls ck | wc -l)" = 1 ] && [ -s m.onnx ] || fail "expected one checkpoint and the saved model"
    "${M[@]}" -np 2 "$G" show "$MODEL" > show.out 2>&1 || fail "show failed"
    "$G" show "$MODEL" > show1.out 2>&1
    cmp show.out show1.out || fail "-np 2 show prints other than one show"
    [ "$("${M[@]}" -np 2 "$G" train --help 2>&1 | grep -c '^usage: graphrun train')" = 1 ] || fail "-np 2 train --help is not printed once"
    # An error every rank hits (a usage error) is one line, rank 0's, not one per rank.
    "${M[@]}" -np 3 "$G" "${T[@]}" --devices cpu:1 --batch-size 0 > usage.out 2>&1
    RC=$?
    [ "$RC" = 2 ] || fail "a usage error on every rank: exit $RC, not 2"
    [ "$(grep -c 'error:' usage.out)" = 1 ] || fail "a usage error every rank hits is not printed once"
    grep -q '^graphrun train: error: rank 0: --batch-size must be at least 1' usage.out || fail "rank 0 does not report the usage error"
    grep -q 'stopped before the first step' usage.out && fail "a rank that failed too says it was stopped"
    echo "one voice: rank 0 printed and wrote once"
    ;;
  killed)
    fault 9 30
    [ "$RC" != 0 ] || fail "exit code 0 after a rank was killed"
    grep -q 'rank 1 .*exited on signal 9' job.out || fail "mpirun does not name rank 1"
    grep -Eq '^graphrun: rank 0: stopped at step [0-9]+' job.out || fail "rank 0 does not name its step"
    ;;
  hung)
    fault STOP 30
    [ "$RC" != 0 ] || fail "exit code 0 after a rank hung"
    # (At an allreduce, or, when rank 1 stopped while evaluating, at the exchange of the test figures or of the
    # evaluation batch size, which the ranks agree on as an epoch's evaluation starts.)
    grep -Eq 'rank 0: .*(allreduce|evaluation|evaluation batch) at step [0-9]+: rank 1 did not answer within 5 s' job.out || fail "rank 0 does not name rank 1 and the step"
    ;;
  hung3)
    # Three ranks, the chain pipelined in 4 KiB segments: a stopped rank 1 is named by the rank that
    # waits for it inside a transfer, or it is "not every rank" at the allreduce's barrier (or, stopped while
    # evaluating, at the exchange of the test figures or of the evaluation batch size, as in hung).
    FAULT_NP=3 FAULT_ENV=(-x GRAPHRUN_MPI_SEGMENT_KB=4)
    fault STOP 30
    [ "$RC" != 0 ] || fail "exit code 0 after a rank hung"
    grep -Eq 'rank [02]: .*(allreduce|evaluation|evaluation batch) at step [0-9]+: (rank 1( \(or a rank it waits for\))? did not answer|not every rank arrived) within 5 s' job.out \
      || fail "no rank names the allreduce, the step and the missing rank"
    ;;
  badinput)
    "${M[@]}" -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 : -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 \
      --data "$W/none" > bad.out 2>&1
    RC=$?
    [ "$RC" = 2 ] || fail "exit $RC, not 2"
    grep -q "^graphrun train: error: rank 1: data '.*none' does not exist" bad.out || fail "no one-line error from rank 1"
    ;;
  mismatch)
    # Ranks that disagree on a setting or on the model: every rank fails at start naming the first that
    # differs and how, instead of training on inconsistent shards (or exchanging buffers of other sizes).
    "${M[@]}" -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 : -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 \
      --batch-size 64 > flag.out 2>&1
    RC=$?
    [ "$RC" = 2 ] || fail "exit $RC, not 2, with another --batch-size on rank 1"
    grep -q "rank 1 does not run what rank 0 runs: --batch-size 64 against rank 0's --batch-size 256" flag.out ||
      fail "no line naming rank 1's --batch-size"
    "${M[@]}" -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 : -np 1 "$G" train "$(dirname "$MODEL")/simplecnn.onnx" \
      "${T[@]:2}" --devices cpu:1 --max-steps 5 > model.out 2>&1
    RC=$?
    [ "$RC" = 2 ] || fail "exit $RC, not 2, with another model on rank 1"
    grep -q "rank 1 does not run what rank 0 runs: model simplecnn [0-9a-f]* against rank 0's model lenet [0-9a-f]*" model.out ||
      fail "no line naming rank 1's model"
    # Every setting that changes the update is compared, switches and floats as given: --freeze on one
    # rank failed mid-step inside MPI, and another --clip-grad-norm trained the replicas apart.
    "${M[@]}" -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 --freeze conv1 --momentum 0.9 --clip-grad-norm 1 : \
      -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 --freeze conv1 --momentum 0.9 > clip.out 2>&1
    RC=$?
    [ "$RC" = 2 ] || fail "exit $RC, not 2, with --clip-grad-norm on rank 0 only"
    grep -q "rank 1 does not run what rank 0 runs: --clip-grad-norm 0 against rank 0's --clip-grad-norm 1 " clip.out ||
      fail "no line naming rank 1's --clip-grad-norm"
    "${M[@]}" -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 --momentum 0.9 : \
      -np 1 "$G" "${T[@]}" --devices cpu:1 --max-steps 5 --momentum 0.9 --freeze conv1 > freeze.out 2>&1
    RC=$?
    [ "$RC" = 2 ] || fail "exit $RC, not 2, with --freeze on rank 1 only"
    grep -q "rank 1 does not run what rank 0 runs: --freeze conv1 against rank 0's --freeze none " freeze.out ||
      fail "no line naming rank 1's --freeze"
    ;;
  resume)
    # --log-every 4: the block of steps 9-12 spans the resume at step 10.
    T+=(--log-every 4)
    "${M[@]}" -np 2 "$G" "${T[@]}" --devices cpu:1 --max-steps 20 --checkpoint-dir ck --checkpoint-every 10 \
      --keep-checkpoints 5 > a.out 2>&1 || fail "the -np 2 run failed"
    # Keep the mid-epoch checkpoint only: the next runs resume at step 10.
    ls ck | sort | tail -n +2 | while read -r f; do rm "ck/$f"; done
    cp -r ck ck3
    "${M[@]}" -np 3 "$G" "${T[@]}" --devices cpu:1 --max-steps 20 --checkpoint-dir ck --resume --save np3.onnx > b.out 2>&1 ||
      fail "resuming on -np 3 failed"
    grep -q 'resumed from .*step 10' b.out || fail "-np 3 did not resume at step 10"
    "$G" "${T[@]}" --devices cpu:3 --max-steps 20 --checkpoint-dir ck3 --resume --save cpu3.onnx > c.out 2>&1 || fail "resuming on cpu:3 failed"
    cmp np3.onnx cpu3.onnx || fail "resumed on -np 3 and on cpu:3: different weights"
    [ "$(figures b.out)" = "$(figures c.out)" ] || fail "resumed on -np 3 and on cpu:3: different figures"
    [ "$(figures b.out | grep -c '^step ')" = 3 ] || fail "resumed on -np 3: not 3 --log-every lines"
    [ "$(figures b.out)" = "$(figures a.out | tail -n 4)" ] || fail "resumed on -np 3: not the figures of the uninterrupted run"
    "$G" "${T[@]}" --devices cpu:2 --max-steps 20 --save cpu2.onnx > d.out 2>&1 || fail "cpu:2 failed"
    /usr/bin/python3 - np3.onnx cpu2.onnx <<'PY' || fail "resumed weights differ from an uninterrupted cpu:2 run"
import sys, onnx, numpy as np
from onnx import numpy_helper as nh
a, b = ({t.name: nh.to_array(t) for t in onnx.load(f).graph.initializer} for f in sys.argv[1:])
worst = max(float(np.max(np.abs(a[k] - b[k])) / max(1e-30, float(np.max(np.abs(b[k]))))) for k in b)
print("max relative difference, resumed on 3 replicas vs uninterrupted on 2: %.2e" % worst)
sys.exit(0 if worst <= 1e-4 else 1)
PY
    ;;
  stop)
    # SIGUSR1 to mpirun mid-run (what Slurm's --signal=USR1@T sends before a job's time is up): mpirun
    # forwards it to every rank, they agree on one step, rank 0 alone says so naming the checkpoint, and
    # the job exits 138 without a rank being killed. --resume on -np 2 then saves, bitwise, the model of
    # an uninterrupted cpu:2 run. --log-every 1 makes every segment one step long: the ranks' vote on
    # stopping crosses segments.
    R=(train "$MODEL" --threads 1 --batch-size 32 --max-steps 200 --epochs 2 --lr 0.05 --momentum 0.9 --log-every 1)
    "${M[@]}" -np 2 "$G" "${R[@]}" --devices cpu:1 --checkpoint-dir ck --save stopped.onnx > stop.out 2>&1 &
    mp=$!
    for _ in $(seq 600); do grep -q '^step 5 ' stop.out 2>/dev/null && break; sleep 0.1; done
    kill -USR1 $mp
    wait $mp
    RC=$?
    [ "$RC" = 138 ] || fail "exit $RC after SIGUSR1, not 138"
    [ "$(grep -c '^graphrun train: stopped by SIGUSR1 ' stop.out)" = 1 ] || fail "not one line saying where it stopped"
    grep -q 'the launcher ended the job' stop.out && fail "a rank was ended by the launcher"
    [ -e stopped.onnx ] && fail "--save was written by a stopped run"
    ck=$(sed -n 's/.*wrote the checkpoint \(ck\/[^;]*\);.*/\1/p' stop.out)
    [ -n "$ck" ] && [ -f "$ck" ] || fail "the checkpoint named is not there: '$ck'"
    [ "$(ls ck | tail -1)" = "$(basename "$ck")" ] || fail "the checkpoint named is not the newest"
    "${M[@]}" -np 2 "$G" "${R[@]}" --devices cpu:1 --checkpoint-dir ck --resume --save resumed.onnx > resumed.out 2>&1 ||
      fail "the resumed job failed"
    "$G" "${R[@]}" --devices cpu:2 --save full.onnx > full.out 2>&1 || fail "cpu:2 failed"
    cmp resumed.onnx full.onnx || fail "stopped and resumed on -np 2: not the weights of the uninterrupted cpu:2 run"
    echo "stopped by SIGUSR1 ($(grep -o 'stopped by SIGUSR1 [^:]*' stop.out)), resumed: bitwise cpu:2's weights"
    ;;
  evalbatch)
    # Each rank sizes its evaluation batch from its own memory; the ranks then take the smallest, so that every
    # share is summed in the same batches. Rank 1 alone is tight here: rank 0 says it evaluates in rank 1's batch,
    # and the figures are those of the run where both ranks are tight.
    A=("$G" "${T[@]}" --devices cpu:1 --max-steps 30 --optimizer adam --lr 0.003)
    "${M[@]}" -np 1 "${A[@]}" --metrics one.jsonl : -np 1 -x GRAPHRUN_MEM_AVAILABLE_MB=35 "${A[@]}" > one.out 2>&1 ||
      fail "mpirun with rank 1 tight failed"
    grep -q '^evaluating in batches of [0-9]*, not [0-9]*: the smallest batch the ranks' one.out ||
      fail "rank 0 did not say it evaluates in the tight rank's batch"
    "${M[@]}" -np 2 -x GRAPHRUN_MEM_AVAILABLE_MB=35 "${A[@]}" --metrics both.jsonl > both.out 2>&1 ||
      fail "mpirun with both ranks tight failed"
    mine=$(grep -o 'evaluating in batches of [0-9]*' one.out) theirs=$(grep -o 'evaluating in batches of [0-9]*' both.out)
    [ "$mine" = "$theirs" ] || fail "rank 1 tight: '$mine'; both tight: '$theirs'"
    strip() { sed -E 's/"(seconds|images_per_sec)":[0-9.e+-]*,//g' "$1"; }
    [ "$(strip one.jsonl)" = "$(strip both.jsonl)" ] || fail "the figures differ: $(cat one.jsonl) vs $(cat both.jsonl)"
    echo "rank 1 tight: $mine on every rank, the figures of both ranks tight"
    ;;
  ownloss)
    # LeNet computing its own cross-entropy (labels a model input, fed from the data's labels by name).
    /usr/bin/python3 - "$MODEL" <<'PY' || fail "could not write the own-loss model"
import sys, onnx
from onnx import helper as h, TensorProto as T
m = onnx.load(sys.argv[1])
m.graph.input.append(h.make_tensor_value_info('labels', T.INT64, ['N']))
m.graph.node.append(h.make_node('SoftmaxCrossEntropyLoss', [m.graph.output[0].name, 'labels'], ['xent']))
del m.graph.output[:]
m.graph.output.append(h.make_tensor_value_info('xent', T.FLOAT, []))
onnx.save(m, 'own.onnx')
PY
    O=(train own.onnx --epochs 1 --threads 1 --loss output --max-steps 20 --optimizer adam --lr 2e-3)  # (past chance)
    "${M[@]}" -np 1 "$G" "${O[@]}" --devices cpu:1 --save mpi.onnx : -np 1 "$G" "${O[@]}" --devices cpu:2 \
      > mpi.out 2>&1 || fail "mpirun --loss output failed"
    "$G" "${O[@]}" --devices cpu:3 --save local.onnx > local.out 2>&1 || fail "cpu:3 --loss output failed"
    cmp mpi.onnx local.onnx || fail "--loss output: 1 + 2 replicas over 2 ranks and cpu:3 saved different weights"
    want=$(grep '^test loss:' local.out | cut -d, -f1)
    [ -n "$want" ] || fail "cpu:3 printed no test loss"
    [ "$(grep '^test loss:' mpi.out | cut -d, -f1)" = "$want" ] || fail "test loss over 2 ranks: $(grep '^test loss:' mpi.out); cpu:3: $want"
    echo "--loss output: rank0 cpu:1 + rank1 cpu:2 == cpu:3 bitwise after 20 steps, $want"
    ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($CASE)"
