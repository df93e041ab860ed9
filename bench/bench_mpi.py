#!/usr/bin/env python3
"""Benchmark: leaving the process. 2 replicas in one process (--devices cpu:2) against 2 MPI ranks of
1 replica each (mpirun -np 2 ... --devices cpu:1), the same global batch, one thread per replica, and
graphrun plan's prediction for 2 replicas next to them; with --syncbn, SyncBatchNorm on full ResNet-18.

  bench/bench_mpi.py [--models resnet18,lenet] [--steps 5] [--lenet-steps 20] [--batch 32] [--lenet-batch 256]
                     [--repeats 2] [--graphrun build/graphrun] [--mpirun mpirun] [--skip-timing]
                     [--syncbn] [--syncbn-batch 10] [--syncbn-steps 1,20] [--syncbn-lr 0.05] [--syncbn-spread]
                     [--float64]

Timing: each setting trains --steps steps with --profile; from rank 0's trace (replica 0's track) it
takes the mean `step` after the first (which plans the memory) and, per step, the time in `AllReduce`
nodes (and `AllReduce wait`: none on CPU, where overlap is off) and `wait for peers` (before a step).
AllReduce includes waiting for the other replica to hand in its gradients, so it holds their load
imbalance as well as the summation and, under MPI, the messages between the ranks. The settings
alternate, --repeats times each (medians). `graphrun plan --devices cpu:2 --link shm` gives the
predicted step and AllReduce (its model has no ranks: the same prediction for both settings). The
machine's load average is sampled every 5 s during the runs.

--syncbn: ResNet-18 --sync-bn on 2 and 3 replicas in one process and on 2 ranks x 1 replica (with
--syncbn-spread also rank 0 with 1 + rank 1 with 2 replicas) against 1 replica on the whole batch
(BatchNorm over it), after each of --syncbn-steps SGD steps; then 3 replicas and 2 ranks without
--sync-bn. Prints the largest difference over the parameters and over the running statistics of the saved models, each
tensor's max |a - b| divided by max(1, max |b|), as the tests' max_rel_diff, and a control: the
reference from weights 1e-7 (relative) away. --sync-bn must stay within max(1e-5, twice the control:
the control is one draw of rounding's effect, --sync-bn another); without it the difference must
exceed that. (With BatchNorms over 1x1 maps of a batch of 10, this
ResNet-18 turns a rounding error into 1e-4 after one step: see the README.) With --float64 every run
trains the float64 copy of the model (graphrun train --float64) and the control starts with every
nonzero weight one f64 ulp away, float64's rounding error: the comparison float32 cannot make.

MPI runs use the flags of tests/mpi/mpi_test.sh: --oversubscribe, the shared-memory transport that
works in containers (--mca btl self,vader --mca btl_vader_single_copy_mechanism none), and
--allow-run-as-root when run as root. Paths are relative to the repository root.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, run  # noqa: E402
from bench_resnet18 import small_test_set  # noqa: E402

MODELS = {'resnet18': 'build/models/resnet18.onnx', 'lenet': 'models/lenet.onnx'}
LR = {'resnet18': '0.05', 'lenet': '0.2'}  # d2l's


class LoadSampler:
    """Samples the 1-minute load average every `every` seconds in the background."""

    def __init__(self, every=5.0):
        self.samples, self.every, self.stop = [], every, threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while True:
            self.samples.append(os.getloadavg()[0])
            if self.stop.wait(self.every):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self):
        s = self.samples
        return f'load average {min(s):.1f} to {max(s):.1f} (mean {statistics.mean(s):.1f}, {len(s)} samples)'


def mpirun(a):
    m = [a.mpirun]
    if os.geteuid() == 0:
        m.append('--allow-run-as-root')
    return m + ['--oversubscribe', '--mca', 'btl', 'self,vader', '--mca', 'btl_vader_single_copy_mechanism', 'none']


def trace_figures(path):
    """Replica 0's figures per step from a Chrome trace of graphrun train: (step ms, AllReduce ms,
    wait-for-peers ms, steps counted), the first step left out."""
    with open(path) as f:
        events = json.load(f)
    events = events['traceEvents'] if isinstance(events, dict) else events
    names = {e['tid']: e['args']['name'] for e in events if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
    tid = next(t for t, n in names.items() if n.startswith('replica 0'))
    mine = sorted((e for e in events if e.get('ph') == 'X' and e['tid'] == tid), key=lambda e: e['ts'])
    steps = [e for e in mine if e['name'] == 'step']
    if len(steps) < 2:
        sys.exit(f'{path}: {len(steps)} step(s) traced; need at least 2')
    t0 = steps[1]['ts']  # the first step plans the memory: left out
    counted = steps[1:]

    def per_step(pred):
        return sum(e['dur'] for e in mine if e['ts'] >= t0 and pred(e['name'])) / len(counted) / 1e3

    step = statistics.mean(e['dur'] for e in counted) / 1e3
    allreduce = per_step(lambda n: n in ('AllReduce', 'AllReduce wait'))
    peers = per_step(lambda n: n == 'wait for peers')
    return step, allreduce, peers, len(counted)


def plan(a, model, batch):
    """graphrun plan's prediction for 2 in-process replicas: (step ms, AllReduce ms, exposed AllReduce ms)."""
    import subprocess
    cmd = [a.graphrun, 'plan', MODELS[model], '--devices', 'cpu:2', '--threads', '1', '--link', 'shm',
           '--batch-size', str(batch), '--json']
    print(f'--- plan: {" ".join(cmd)}', flush=True)
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout[-2000:], file=sys.stderr)
        sys.exit(f'graphrun plan failed (exit {p.returncode})')
    pr = json.loads(p.stdout[p.stdout.index('{'):])['prediction']  # --json pretty-prints one object
    return pr['step_s'] * 1e3, pr['allreduce_s'] * 1e3, pr['exposed_allreduce_s'] * 1e3


def timing(a, data, work):
    rows = []  # (model, setting, [figures per repeat], plan)
    for model in a.models:
        steps, batch = (a.steps, a.batch) if model == 'resnet18' else (a.lenet_steps, a.lenet_batch)
        common = ['train', MODELS[model], '--batch-size', str(batch), '--lr', LR[model], '--epochs', '1',
                  '--max-steps', str(steps), '--threads', '1']
        if model == 'resnet18':
            common += ['--data', data]
        trace = os.path.join(work, 'trace.json')
        settings = {
            'cpu:2 (1 process)': [a.graphrun] + common + ['--devices', 'cpu:2', '--profile', trace],
            '2 ranks x cpu:1': mpirun(a) + ['-np', '2', a.graphrun] + common + ['--devices', 'cpu:1', '--profile', trace],
        }
        figures = {k: [] for k in settings}
        for rep in range(a.repeats):
            for name, cmd in settings.items():
                run(f'{model}, {name} ({rep + 1}/{a.repeats})', cmd)
                figures[name].append(trace_figures(trace))
                print('    replica 0, per step after the first: %.1f ms, AllReduce %.1f ms, wait for peers %.1f ms'
                      % figures[name][-1][:3], flush=True)
                os.remove(trace)
        predicted = plan(a, model, batch)
        for name in settings:
            rows.append((model, batch, name, figures[name], predicted))
    return rows


def print_timing(a, rows, load):
    print(f'\n2 replicas, one thread each: in one process vs 2 MPI ranks; replica 0\'s trace, mean per step after '
          f'the first; medians of {a.repeats}; {load}')
    print(f'{"model, global batch":<20}{"setting":<20}{"step ms":>9}{"AllReduce":>11}{"step - AR":>11}'
          f'{"peers":>8}{"plan step":>11}{"plan AR":>9}   runs: step / AllReduce ms')
    med = {}
    for model, batch, name, figs, (p_step, p_ar, p_exposed) in rows:
        step = statistics.median(f[0] for f in figs)
        ar = statistics.median(f[1] for f in figs)
        peers = statistics.median(f[2] for f in figs)
        med[(model, name)] = (step, ar)
        runs = ', '.join(f'{f[0]:.0f} / {f[1]:.1f}' for f in figs)
        print(f'{model + ", " + str(batch):<20}{name:<20}{step:>9.1f}{ar:>11.1f}{step - ar:>11.1f}{peers:>8.1f}'
              f'{p_step:>11.1f}{p_ar:>9.1f}   {runs} ({figs[0][3]} steps each)')
    print()
    for model in a.models:
        (s1, ar1), (s2, ar2) = med[(model, 'cpu:2 (1 process)')], med[(model, '2 ranks x cpu:1')]
        print(f'{model}: leaving the process costs {ar2 - ar1:+.1f} ms of AllReduce per step '
              f'({ar1:.1f} -> {ar2:.1f} ms); the step changes by {s2 - s1:+.1f} ms ({100 * (s2 / s1 - 1):+.0f}%)')


def compare(path_a, path_b):
    """(max relative difference over parameters, over running statistics) between two saved models."""
    import numpy as np
    import onnx
    from onnx import numpy_helper as nh
    ma, mb = onnx.load(path_a), onnx.load(path_b)
    stats = {n.input[i] for n in mb.graph.node if n.op_type == 'BatchNormalization' for i in (3, 4) if i < len(n.input)}
    a = {t.name: nh.to_array(t) for t in ma.graph.initializer}
    b = {t.name: nh.to_array(t) for t in mb.graph.initializer}
    assert a.keys() == b.keys(), 'the saved models have different initializers'
    worst = {'params': 0.0, 'stats': 0.0}
    for k, vb in b.items():
        if not np.issubdtype(vb.dtype, np.floating):
            continue
        rel = float(np.max(np.abs(a[k].astype(np.float64) - vb))) / max(1.0, float(np.max(np.abs(vb))))
        kind = 'stats' if k in stats else 'params'
        worst[kind] = max(worst[kind], rel)
    return worst['params'], worst['stats']


def perturbed(src, dst, rel=1e-7, float64=False):
    """A copy of the model a rounding error away, for the conditioning control, seeded. float32: the
    trained float weights multiplied by (1 + rel x N(0, 1)). float64: every nonzero trained weight moved
    one f64 ulp up or down (a relative step of 1e-16 would be under half an ulp for most weights, and
    change few of them); the running statistics are only converted."""
    import numpy as np
    import onnx
    from onnx import numpy_helper as nh
    m = onnx.load(src)
    stats = {n.input[i] for n in m.graph.node if n.op_type == 'BatchNormalization' for i in (3, 4) if i < len(n.input)}
    rng = np.random.default_rng(0)
    dt = np.float64 if float64 else np.float32
    for t in m.graph.initializer:
        w = nh.to_array(t)
        if w.dtype == np.float32 and t.name not in stats and float64:
            w = w.astype(np.float64)
            moved = np.where(rng.random(w.shape) < 0.5, np.nextafter(w, np.inf), np.nextafter(w, -np.inf))
            t.CopyFrom(nh.from_array(np.where(w != 0, moved, w), t.name))
        elif w.dtype == np.float32 and t.name not in stats:
            t.CopyFrom(nh.from_array((w.astype(dt) * (1 + rel * rng.standard_normal(w.shape))).astype(dt), t.name))
        elif w.dtype == np.float32:
            t.CopyFrom(nh.from_array(w.astype(dt), t.name))
    if float64:  # a model that loads as float64 (a one-ulp step exists only there): its value types too
        for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
            if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
                vi.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    onnx.save(m, dst)


def syncbn(a, data, work):
    """Runs the SyncBatchNorm comparison at each step count; returns the rows and whether every check held.

    Control: the reference again from weights one rounding error (1e-7, relative) away. How far that
    start drifts after the same steps is how far any other float32 evaluation order may drift (the
    sums of SyncBatchNorm's statistics run in another order than one BatchNorm's), so --sync-bn passes
    when it is within 1e-5 or within twice the control; without --sync-bn the difference must exceed both."""
    out = lambda name: os.path.join(work, name + '.onnx')
    pert = out('perturbed-start')
    rel = 1e-7
    perturbed(os.path.join(ROOT, MODELS['resnet18']), pert, rel, a.float64)
    away = 'one ulp' if a.float64 else f'{rel:.0e}'
    rows, ok = [], True
    for steps in a.syncbn_steps:
        common = ['--batch-size', str(a.syncbn_batch), '--lr', str(a.syncbn_lr), '--epochs', '1',
                  '--max-steps', str(steps), '--threads', '1', '--data', data] + (['--float64'] if a.float64 else [])
        g = [a.graphrun, 'train', MODELS['resnet18']] + common
        ref = out(f'ref-{steps}')
        run(f'syncbn, {steps} step(s), reference: 1 replica on the whole batch', g + ['--devices', 'cpu:1', '--save', ref])
        ctl = out(f'control-{steps}')
        run(f'syncbn, {steps} step(s), control: the reference from a start {away} away',
            [a.graphrun, 'train', pert] + common + ['--devices', 'cpu:1', '--save', ctl])
        cp, cs = compare(ctl, ref)
        rows.append((steps, f'control: 1 replica, start {away} away', None, cp, cs, True))
        control = max(cp, cs)

        def cases(sync):
            gs = g + (['--sync-bn'] if sync else [])
            if sync:
                yield 'cpu:2', gs + ['--devices', 'cpu:2']
            yield 'cpu:3', gs + ['--devices', 'cpu:3']
            yield '2 ranks x cpu:1', mpirun(a) + ['-np', '2'] + gs + ['--devices', 'cpu:1']
            if sync and a.syncbn_spread:
                yield 'rank0 cpu:1 + rank1 cpu:2', mpirun(a) + ['-np', '1'] + gs + ['--devices', 'cpu:1', ':', '-np', '1'] + \
                    gs + ['--devices', 'cpu:2']

        for sync in (True, False):
            for name, cmd in cases(sync):
                path = out(f'{name}-{sync}-{steps}'.replace(' ', '_').replace(':', ''))
                # mpirun's ':' separates the app contexts; rank 0 (the first) saves.
                if ':' in cmd:
                    i = cmd.index(':')
                    cmd = cmd[:i] + ['--save', path] + cmd[i:]
                else:
                    cmd = cmd + ['--save', path]
                run(f'syncbn, {steps} step(s), {name}{" --sync-bn" if sync else ""}', cmd)
                p, s = compare(path, ref)
                worst = max(p, s)
                # The control is one draw of rounding's effect: --sync-bn (another draw) passes within twice it.
                good = worst <= max(1e-5, 2 * control) if sync else worst > max(1e-5, 2 * control)
                ok &= good
                rows.append((steps, name, sync, p, s, good))
    return rows, ok


def print_syncbn(a, rows, load):
    print(f'\nResNet-18{" in float64" if a.float64 else ""}, batch {a.syncbn_batch} (shards 5+5, 4+3+3), SGD lr '
          f'{a.syncbn_lr}, against 1 replica on the whole batch after the same steps: max over tensors of max|a - b| / max(1, max|b|); {load}')
    print(f'{"steps":<7}{"replicas":<37}{"--sync-bn":<11}{"parameters":>12}{"running stats":>15}   check')
    for steps, name, sync, p, s, good in rows:
        if sync is None:
            flag, want = '', ''
        else:
            flag = 'yes' if sync else 'no'
            want = ('<= max(1e-5, 2 x control)' if sync else '> max(1e-5, 2 x control)') + (': ok' if good else ': FAILED')
        print(f'{steps:<7}{name:<37}{flag:<11}{p:>12.2e}{s:>15.2e}   {want}')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--models', default='resnet18,lenet')
    ap.add_argument('--steps', type=int, default=5, help='ResNet-18 steps per timed run (the first is left out)')
    ap.add_argument('--batch', type=int, default=32, help='ResNet-18 global batch of the timed runs')
    ap.add_argument('--lenet-steps', type=int, default=20)
    ap.add_argument('--lenet-batch', type=int, default=256)
    ap.add_argument('--repeats', type=int, default=2)
    ap.add_argument('--test-limit', type=int, default=256, help='test images evaluated at the end of each run')
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--mpirun', default='mpirun')
    ap.add_argument('--syncbn', action='store_true', help='also the SyncBatchNorm comparison on ResNet-18')
    ap.add_argument('--syncbn-batch', type=int, default=10, help='global batch (10: shards 5+5 and 4+3+3)')
    ap.add_argument('--syncbn-steps', default='1,20', help='step counts to compare after (comma-separated)')
    ap.add_argument('--syncbn-lr', type=float, default=0.05)
    ap.add_argument('--float64', action='store_true',
                    help='--syncbn in float64 (graphrun train --float64; the control starts one f64 ulp away)')
    ap.add_argument('--syncbn-spread', action='store_true',
                    help='also 3 replicas as rank 0 with cpu:1 + rank 1 with cpu:2 (tests/mpi syncbn: bitwise cpu:3)')
    ap.add_argument('--skip-timing', action='store_true')
    a = ap.parse_args()
    a.models = [m for m in a.models.split(',') if m]
    a.syncbn_steps = [int(x) for x in a.syncbn_steps.split(',') if x]
    for m in a.models:
        if m not in MODELS:
            sys.exit(f'--models: unknown model {m!r} (resnet18, lenet)')
    if (a.syncbn or 'resnet18' in a.models) and not os.path.exists(os.path.join(ROOT, MODELS['resnet18'])):
        sys.exit(f'{MODELS["resnet18"]}: not found (the build exports it when /usr/bin/python3 has torch and onnx)')
    if shutil.which(a.mpirun) is None:
        sys.exit(f'{a.mpirun}: not found (Open MPI: openmpi-bin)')

    work = tempfile.mkdtemp(prefix='bench_mpi_')
    try:
        data = os.path.join(work, 'data')
        os.mkdir(data)
        small_test_set(a.test_limit, data)
        if not a.skip_timing:
            with LoadSampler() as load:
                rows = timing(a, data, work)
            print_timing(a, rows, load.summary())
        if a.syncbn:
            with LoadSampler() as load:
                rows, ok = syncbn(a, data, work)
            print_syncbn(a, rows, load.summary())
            if not ok:
                sys.exit('SyncBatchNorm: a check failed')
    finally:
        shutil.rmtree(work)


if __name__ == '__main__':
    main()
