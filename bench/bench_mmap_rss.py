#!/usr/bin/env python3
"""Benchmark: training from a memory-mapped .npy folder far larger than the process's resident memory.

  bench/bench_mmap_rss.py [--gb 4] [--steps 300] [--graphrun build/graphrun] [--work /tmp/mmap_rss] [--keep]

Writes Fashion-MNIST's training images, repeated, as one f32 [N,1,28,28] image.npy of about --gb GiB
(plus labels.npy) and the test set as a small .npy folder; trains LeNet on cpu:2 from it for --steps
steps of a shuffled epoch (every step reads 256 examples from anywhere in the file), under
/usr/bin/time -v; and prints the data size beside the largest resident set. The same run from the
MNIST folder (the data loaded into memory, 188 MB as f32) is the baseline. Paths are relative to the
repository root; the data is deleted at the end unless --keep.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT  # noqa: E402

EXPORT = r'''
import gzip, os, sys
import numpy as np
D, W, gb = '/usr/share/datasets/fashion-mnist', sys.argv[1], float(sys.argv[2])
def load(p, off): return np.frombuffer(gzip.open(os.path.join(D, p)).read(), np.uint8, offset=off)
xi = load('train-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28); yi = load('train-labels-idx1-ubyte.gz', 8)
xt = load('t10k-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28); yt = load('t10k-labels-idx1-ubyte.gz', 8)
n = int(gb * 2**30 // (28 * 28 * 4))
for d in ('train', 'test'): os.makedirs(os.path.join(W, d), exist_ok=True)
x = np.lib.format.open_memmap(os.path.join(W, 'train', 'image.npy'), 'w+', np.float32, (n, 1, 28, 28))
y = np.lib.format.open_memmap(os.path.join(W, 'train', 'labels.npy'), 'w+', np.int64, (n,))
for i in range(0, n, len(xi)):
    k = min(len(xi), n - i)
    x[i:i + k] = xi[:k] / np.float32(255); y[i:i + k] = yi[:k]
x.flush(); y.flush(); del x, y
np.save(os.path.join(W, 'test', 'image.npy'), (xt / np.float32(255)).astype(np.float32))
np.save(os.path.join(W, 'test', 'labels.npy'), yt.astype(np.int64))
print(n)
'''


def timed(cmd):
    """Runs cmd under /usr/bin/time -v from the repository root: (max RSS in MiB, test acc, output)."""
    p = subprocess.run(['/usr/bin/time', '-v'] + cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    rss = re.search(r'Maximum resident set size \(kbytes\): (\d+)', p.stdout)
    acc = re.search(r'test acc: ([0-9.]+)', p.stdout)
    if p.returncode != 0 or not rss or not acc:
        sys.exit(f'failed (exit {p.returncode}): {" ".join(cmd)}\n{p.stdout[-2000:]}')
    return int(rss.group(1)) / 1024, float(acc.group(1)), p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--gb', type=float, default=4.0)
    ap.add_argument('--steps', type=int, default=300)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--python', default='/usr/bin/python3', help='Python with numpy')
    ap.add_argument('--work', default='/tmp/graphrun_mmap_rss')
    ap.add_argument('--keep', action='store_true')
    a = ap.parse_args()
    print(f'writing about {a.gb} GiB of f32 images to {a.work} ...', flush=True)
    n = int(subprocess.run([a.python, '-c', EXPORT, a.work, str(a.gb)], check=True, stdout=subprocess.PIPE,
                           text=True).stdout.split()[-1])
    size = sum(os.path.getsize(os.path.join(a.work, 'train', f)) for f in os.listdir(os.path.join(a.work, 'train')))
    common = ['train', 'models/lenet.onnx', '--devices', 'cpu:2', '--threads', '1', '--epochs', '1',
              '--max-steps', str(a.steps)]
    try:
        rss_npy, acc_npy, _ = timed([a.graphrun] + common + ['--data', os.path.join(a.work, 'train'),
                                                            '--test-data', os.path.join(a.work, 'test')])
        rss_idx, acc_idx, _ = timed([a.graphrun] + common)
    finally:
        if not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
    print(f'\nLeNet, cpu:2, batch 256, {a.steps} steps of a shuffled epoch')
    print(f'{"data":<44}{"data MiB":>10}{"max RSS MiB":>13}{"test acc":>10}')
    print(f'{".npy folder, memory-mapped (" + str(n) + " images)":<44}{size / 2**20:>10.0f}{rss_npy:>13.0f}{acc_npy:>10.2f}')
    print(f'{"MNIST folder, loaded (60000 images)":<44}{60000 * 3136 / 2**20:>10.0f}{rss_idx:>13.0f}{acc_idx:>10.2f}')
    print(f'\nresident / data for the mapped set: {rss_npy * 2**20 / size:.3f}')


if __name__ == '__main__':
    main()
