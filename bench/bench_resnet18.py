#!/usr/bin/env python3
"""Benchmark: d2l's Fashion-MNIST ResNet-18 (build/models/resnet18.onnx, 28x28, batch 256, SGD lr 0.05),
steps/s over the first N steps of an epoch, graphrun against the PyTorch yardstick in the same run.

  bench/bench_resnet18.py [--steps 6] [--test-limit 256] [--repeats 1] [--graphrun build/graphrun]
                          [--baseline OTHER_GRAPHRUN] [--skip-torch] [--torch-ref ../shared/ref/torch_reference.py]

Rows: graphrun cpu:2 --threads 1 (one replica per core) vs torch --threads 2, and graphrun cpu:1
--threads 1 vs torch --threads 1 (cpu:2 vs cpu:1 is the DataParallel scaling, aim >= 1.8x). With
--baseline, that binary (e.g. an older build) runs each graphrun row too, alternating with --graphrun
run by run, and the new/old ratio is printed. --repeats N runs the whole round N times (medians).
Steps/s counts the training steps only on both sides (d2l's timer: the trainers' sec/epoch). Both
evaluate on the first --test-limit test images only (graphrun through a small copy of the test set),
so that evaluation does not dominate the run. Paths are relative to the repository root.
"""
import argparse
import gzip
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, fma_floor, run  # noqa: E402

DATA = '/usr/share/datasets/fashion-mnist'


def small_test_set(limit, out):
    """A data folder with the training files of DATA (linked) and the first `limit` test images."""
    for name in os.listdir(DATA):
        if name.startswith('train-'):
            os.symlink(os.path.join(DATA, name), os.path.join(out, name))
    for kind, header, item in (('images-idx3', 16, 28 * 28), ('labels-idx1', 8, 1)):
        with gzip.open(os.path.join(DATA, f't10k-{kind}-ubyte.gz')) as f:
            raw = f.read()
        head = bytearray(raw[:header])
        head[4:8] = limit.to_bytes(4, 'big')  # the item count
        with open(os.path.join(out, f't10k-{kind}-ubyte'), 'wb') as f:
            f.write(bytes(head) + raw[header:header + limit * item])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--steps', type=int, default=6)
    ap.add_argument('--test-limit', type=int, default=256)
    ap.add_argument('--repeats', type=int, default=1)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--baseline', help='another graphrun binary to alternate with --graphrun (before/after)')
    ap.add_argument('--model', default='build/models/resnet18.onnx')
    ap.add_argument('--torch-ref', default='../shared/ref/torch_reference.py')
    ap.add_argument('--python', default='/usr/bin/python3', help='Python with torch (Debian python3-torch)')
    ap.add_argument('--skip-torch', action='store_true')
    ap.add_argument('--skip-cpu1', action='store_true', help='only the cpu:2 / 2-thread rows')
    a = ap.parse_args()
    if not os.path.exists(os.path.join(ROOT, a.model)):
        sys.exit(f'{a.model}: not found (the build exports it when /usr/bin/python3 has torch and onnx)')

    data = tempfile.mkdtemp(prefix='bench_resnet18_')
    try:
        small_test_set(a.test_limit, data)
        measure(a, data)
    finally:
        shutil.rmtree(data)


def measure(a, data):
    """Runs the rows (alternating the binaries) and prints the table and the ratios."""
    binaries = {'new': a.graphrun}
    if a.baseline:
        binaries = {'old': a.baseline, 'new': a.graphrun}
    common = ['train', a.model, '--batch-size', '256', '--lr', '0.05', '--epochs', '1', '--max-steps', str(a.steps),
              '--data', data]
    torch = lambda t: [a.python, a.torch_ref, '--model', 'resnet18', '--threads', str(t), '--epochs', '1',
                       '--max-steps', str(a.steps), '--test-limit', str(a.test_limit)]
    rows = [('cpu:2', 1, 2)] + ([] if a.skip_cpu1 else [('cpu:1', 1, 1)])
    secs = {}  # row name -> list of sec/epoch
    for rep in range(a.repeats):
        for dev, threads, torch_threads in rows:
            for tag, binary in binaries.items():
                name = f'graphrun {tag} {dev} x{threads}'
                secs.setdefault(name, []).append(
                    run(f'{name} ({rep + 1}/{a.repeats})', [binary] + common + ['--devices', dev, '--threads', str(threads)])[1])
            if not a.skip_torch:
                name = f'pytorch {torch_threads} thread(s)'
                secs.setdefault(name, []).append(run(f'{name} ({rep + 1}/{a.repeats})', torch(torch_threads))[1])

    med = {k: statistics.median(v) for k, v in secs.items()}
    print(f'\nResNet-18 (d2l, 28x28), batch 256, SGD lr 0.05, first {a.steps} steps; medians of {a.repeats}')
    print(f'{"run":<30}{"sec":>8}{"steps/s":>9}   all runs (sec)')
    for k, s in med.items():
        print(f'{k:<30}{s:>8.2f}{a.steps / s:>9.3f}   {" ".join(f"{x:.2f}" for x in secs[k])}')
    print()
    for tag in binaries:
        two = med[f'graphrun {tag} cpu:2 x1']
        if not a.skip_torch:
            print(f'graphrun {tag} cpu:2 vs pytorch 2 threads: {med["pytorch 2 thread(s)"] / two:.2f}x the steps/s '
                  f'(aim: >= 2)')
        if not a.skip_cpu1:
            one = med[f'graphrun {tag} cpu:1 x1']
            print(f'graphrun {tag} cpu:2 vs cpu:1: {one / two:.2f}x the steps/s (aim: >= 1.8)')
            if not a.skip_torch:
                print(f'graphrun {tag} cpu:1 vs pytorch 1 thread: {med["pytorch 1 thread(s)"] / one:.2f}x the steps/s')
    floor = fma_floor(a.graphrun, a.model, 256, a.steps)
    if floor:
        print(f'graphrun new cpu:2 / FMA floor = {med["graphrun new cpu:2 x1"] / floor:.1f}')
    if a.baseline:
        for dev, threads, _ in rows:
            old, new = med[f'graphrun old {dev} x{threads}'], med[f'graphrun new {dev} x{threads}']
            print(f'{dev} x{threads}: new / old = {old / new:.2f}x the steps/s')


if __name__ == '__main__':
    main()
