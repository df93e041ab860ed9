#!/usr/bin/env python3
"""Benchmark: the DataParallel experiment. SimpleCNN (models/simplecnn.onnx) on Fashion-MNIST with
Adam lr 1e-3, batch 64, inputs (x - 0.1307) / 0.3081, one epoch, on cpu:1 and on cpu:2 (one thread
per replica); prints test accuracy, sec/epoch and the reduction of cpu:2 against cpu:1, next to
the PyTorch yardstick (../shared/ref/torch_reference.py --model simplecnn) at 1 and 2 threads.

  bench/bench_simplecnn.py [--epochs 1] [--repeats N] [--graphrun build/graphrun] [--torch-ref ../shared/ref/torch_reference.py]

Then cpu:2 with --overlap-allreduce off and on, alternating (--overlap-pairs N times each; medians).
Paths are relative to the repository root. sec/epoch counts the training steps only (d2l's timer).
Expected: test accuracy well above 0.75 on both, cpu:2 at least 40% less time per epoch.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import overlap_ab, run_rounds  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--model', default='models/simplecnn.onnx')
    ap.add_argument('--torch-ref', default='../shared/ref/torch_reference.py')
    ap.add_argument('--python', default='/usr/bin/python3', help='Python with torch (Debian python3-torch)')
    ap.add_argument('--skip-torch', action='store_true')
    ap.add_argument('--overlap-pairs', type=int, default=1,
                    help='also time cpu:2 with AllReduce overlap off and on, alternating, this many times each (0: skip)')
    ap.add_argument('--repeats', type=int, default=1,
                    help='run every row this many times, in rounds, and report medians')
    ap.add_argument('--max-steps', type=int, default=0,
                    help='time only this many steps of each epoch (quick comparisons; accuracy is then meaningless)')
    a = ap.parse_args()
    steps = ['--max-steps', str(a.max_steps)] if a.max_steps else []
    common = ['train', a.model, '--optimizer', 'adam', '--lr', '1e-3', '--batch-size', '64',
              '--normalize', '0.1307,0.3081', '--epochs', str(a.epochs), '--threads', '1'] + steps
    torch = lambda t: [a.python, a.torch_ref, '--model', 'simplecnn', '--threads', str(t),
                       '--epochs', str(a.epochs)] + steps
    rows = {'graphrun cpu:1': ('graphrun cpu:1', [a.graphrun] + common + ['--devices', 'cpu:1']),
            'graphrun cpu:2': ('graphrun cpu:2', [a.graphrun] + common + ['--devices', 'cpu:2'])}
    if not a.skip_torch:
        rows['pytorch 1 thread'] = ('pytorch, 1 thread', torch(1))
        rows['pytorch 2 threads'] = ('pytorch, 2 threads', torch(2))
    r = run_rounds(rows, a.repeats)

    print(f'\nSimpleCNN, Fashion-MNIST, Adam lr 1e-3, batch 64, normalised, {a.epochs} epoch(s)' +
          (f', first {a.max_steps} steps of each' if a.max_steps else ''))
    print(f'{"run":<22}{"sec/epoch":>10}{"test acc":>10}')
    for k, (acc, sec) in r.items():
        print(f'{k:<22}{sec:>10.3f}{acc:>10.2f}')
    one, two = r['graphrun cpu:1'][1], r['graphrun cpu:2'][1]
    print(f'\ncpu:2 vs cpu:1: {100 * (1 - two / one):.0f}% less time per epoch (aim: >= 40%)')
    if not a.skip_torch:
        print(f'graphrun cpu:1 / pytorch 1 thread = {one / r["pytorch 1 thread"][1]:.2f}; '
              f'graphrun cpu:2 / pytorch 2 threads = {two / r["pytorch 2 threads"][1]:.2f}')
        print(f'speed-up: {r["pytorch 1 thread"][1] / one:.2f}x at 1 thread, '
              f'{r["pytorch 2 threads"][1] / two:.2f}x at 2 threads (aim: >= 5x at 2)')

    if a.overlap_pairs > 0:
        print()
        overlap_ab('graphrun cpu:2', [a.graphrun] + common + ['--devices', 'cpu:2'], a.overlap_pairs)


if __name__ == '__main__':
    main()
