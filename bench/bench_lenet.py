#!/usr/bin/env python3
"""Benchmark: the d2l LeNet on Fashion-MNIST (batch 256, lr 0.2), graphrun against the PyTorch
yardstick in the same run, at equal threads; prints sec/epoch, their ratios and test accuracy.

  bench/bench_lenet.py [--epochs 1] [--repeats N] [--graphrun build/graphrun] [--torch-ref ../shared/ref/torch_reference.py]

Rows: graphrun cpu:1 --threads 1 vs torch --threads 1; graphrun cpu:2 --threads 1 (one replica per
core) vs torch --threads 2 and vs graphrun cpu:1; and graphrun cpu:1 --threads 2 for reference.
Then cpu:2 with --overlap-allreduce off and on, alternating (--overlap-pairs N times each; medians).
sec/epoch counts the training steps only on both sides (d2l's timer). Paths are relative to the
repository root. --epochs 10 is the d2l accuracy check (test acc >= 0.83 expected).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import fma_floor, overlap_ab, run_rounds  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--model', default='models/lenet.onnx')
    ap.add_argument('--torch-ref', default='../shared/ref/torch_reference.py')
    ap.add_argument('--python', default='/usr/bin/python3', help='Python with torch (Debian python3-torch)')
    ap.add_argument('--skip-torch', action='store_true')
    ap.add_argument('--overlap-pairs', type=int, default=1,
                    help='also time cpu:2 with AllReduce overlap off and on, alternating, this many times each (0: skip)')
    ap.add_argument('--bucket-mb', help='graphrun --bucket-mb (gradients per AllReduce node; default 4)')
    ap.add_argument('--repeats', type=int, default=1,
                    help='run every row this many times, in rounds, and report medians')
    ap.add_argument('--max-steps', type=int, default=0,
                    help='time only this many steps of each epoch (quick comparisons; accuracy is then meaningless)')
    a = ap.parse_args()
    common = ['train', a.model, '--batch-size', '256', '--lr', '0.2', '--epochs', str(a.epochs)]
    steps = ['--max-steps', str(a.max_steps)] if a.max_steps else []
    bucket = ['--bucket-mb', a.bucket_mb] if a.bucket_mb else []
    gr = lambda dev, t: [a.graphrun] + common + steps + bucket + ['--devices', dev, '--threads', str(t)]
    torch = lambda t: [a.python, a.torch_ref, '--model', 'lenet', '--threads', str(t), '--epochs', str(a.epochs)] + steps
    rows = {'gr cpu:1 x1': ('graphrun cpu:1, 1 thread', gr('cpu:1', 1))}
    if not a.skip_torch:
        rows['torch 1'] = ('pytorch, 1 thread', torch(1))
    rows['gr cpu:2 x1'] = ('graphrun cpu:2, 1 thread per replica', gr('cpu:2', 1))
    if not a.skip_torch:
        rows['torch 2'] = ('pytorch, 2 threads', torch(2))
    rows['gr cpu:1 x2'] = ('graphrun cpu:1, 2 threads', gr('cpu:1', 2))
    r = run_rounds(rows, a.repeats)

    print(f'\nLeNet, Fashion-MNIST, batch 256, lr 0.2, {a.epochs} epoch(s)' +
          (f', first {a.max_steps} steps of each' if a.max_steps else ''))
    print(f'{"run":<34}{"sec/epoch":>10}{"test acc":>10}')
    names = {'gr cpu:1 x1': 'graphrun cpu:1 --threads 1', 'torch 1': 'pytorch --threads 1',
             'gr cpu:2 x1': 'graphrun cpu:2 --threads 1', 'torch 2': 'pytorch --threads 2',
             'gr cpu:1 x2': 'graphrun cpu:1 --threads 2'}
    for k, (acc, sec) in r.items():
        print(f'{names[k]:<34}{sec:>10.2f}{acc:>10.2f}')
    sec = {k: v[1] for k, v in r.items()}
    print()
    if 'torch 1' in sec:
        print(f'1 thread : graphrun / pytorch = {sec["gr cpu:1 x1"] / sec["torch 1"]:.2f}')
        print(f'2 threads: graphrun cpu:2 / pytorch = {sec["gr cpu:2 x1"] / sec["torch 2"]:.2f}')
    red = 100 * (1 - sec['gr cpu:2 x1'] / sec['gr cpu:1 x1'])
    print(f'cpu:2 vs cpu:1 (1 thread each): {red:.0f}% less time per epoch (aim: >= 40%)')
    n_steps = a.max_steps or -(-60000 // 256)  # not `steps`: the gr lambda above reads that name
    floor = fma_floor(a.graphrun, a.model, 256, n_steps)
    if floor:
        print(f'graphrun cpu:2 / FMA floor = {sec["gr cpu:2 x1"] / floor:.2f} (aim: <= 2)')

    if a.overlap_pairs > 0:
        print()
        overlap_ab('graphrun cpu:2', gr('cpu:2', 1), a.overlap_pairs)


if __name__ == '__main__':
    main()
