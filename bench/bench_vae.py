#!/usr/bin/env python3
"""Benchmark: a model that computes its own loss. The variational autoencoder of tests/vae_model.py (forward(image) ->
the negative ELBO per example: binary cross-entropy of the reconstruction plus the KL term, the latent drawn with
torch.randn_like) trained on Fashion-MNIST with `graphrun train --loss output`, against the same module trained by
PyTorch in a plain loop from the same initial weights, in the same run.

  /usr/bin/python3 bench/bench_vae.py [--epochs 3] [--batch 128] [--lr 1e-3] [--repeats 1]
                                      [--graphrun build/graphrun] [--skip-torch]

Rows: graphrun cpu:2 (one thread per replica) and cpu:1 (two threads), PyTorch with 2 threads as Debian installs it
and, where OpenBLAS is installed (Debian's libopenblas0-pthread), PyTorch with 2 threads on OpenBLAS. Debian's
PyTorch 1.13 is built with BLAS_INFO=generic: nn.Linear's matrix products call whatever libblas.so.3 the system's
alternatives select, the reference BLAS unless OpenBLAS is installed (about 5 GFLOP/s here against OpenBLAS's
several times that); the OpenBLAS row loads OpenBLAS's libblas.so.3 through LD_LIBRARY_PATH, leaving the
system's choice alone, with OPENBLAS_NUM_THREADS=1 (PyTorch's own threads run the rest; OpenBLAS's threads
beside them were slower: 11.7 ms a step against 6.9). Seconds are the
training epochs only (graphrun's --metrics epoch seconds, its first epoch holding the planning step; torch's loop
timed over the same epochs). Each row prints the test loss after the last epoch (the negative ELBO per test image,
with the latent drawn as in training: both sides draw their own noise, so the figures agree in size, not in
digits). Paths are relative to the repository root.
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, 'tests'))
import vae_model  # noqa: E402

DATA = '/usr/share/datasets/fashion-mnist'


def images(split, limit):
    import numpy as np
    with gzip.open(os.path.join(DATA, f'{split}-images-idx3-ubyte.gz')) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    return (x[:limit] if limit else x).astype(np.float32) / 255


def graphrun_row(a, out, devices, threads):
    """Trains vae.onnx; returns (training seconds, the last epoch's test loss)."""
    metrics = os.path.join(out, 'metrics.jsonl')
    cmd = [a.graphrun, 'train', os.path.join(out, 'vae.onnx'), '--loss', 'output', '--optimizer', 'adam',
           '--lr', str(a.lr), '--epochs', str(a.epochs), '--batch-size', str(a.batch), '--devices', devices,
           '--threads', str(threads), '--metrics', metrics]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f'graphrun {devices} failed:\n{p.stdout[-2000:]}')
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    os.unlink(metrics)
    return sum(r['seconds'] for r in rows), rows[-1]['test_loss']


OPENBLAS = '/usr/lib/x86_64-linux-gnu/openblas-pthread'


def torch_row(a, out, threads, blas_dir=None):
    """torch_train in a process of its own (its BLAS chosen by LD_LIBRARY_PATH when blas_dir is given)."""
    env = dict(os.environ)
    if blas_dir:
        env['LD_LIBRARY_PATH'] = blas_dir + (':' + env['LD_LIBRARY_PATH'] if env.get('LD_LIBRARY_PATH') else '')
        env['OPENBLAS_NUM_THREADS'] = '1'
    cmd = [sys.executable, os.path.abspath(__file__), '--torch-only', out, '--threads', str(threads),
           '--epochs', str(a.epochs), '--batch', str(a.batch), '--lr', str(a.lr), '--hidden', str(a.hidden),
           '--latent', str(a.latent)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f'pytorch failed:\n{p.stdout[-2000:]}')
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return r['seconds'], r['test']


def torch_train(a, out, threads):
    """The same module and weights, Adam, shuffled batches; returns (seconds, the test loss after the last epoch)."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = vae_model.VAE(a.hidden, a.latent)
    m.load_state_dict(torch.load(os.path.join(out, 'vae_module.pt')))
    x = torch.from_numpy(images('train', 0))
    xt = torch.from_numpy(images('t10k', 0))
    opt = torch.optim.Adam(m.parameters(), lr=a.lr)
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for idx in torch.randperm(len(x)).split(a.batch):
            loss = m(x[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    secs = time.perf_counter() - t0
    with torch.no_grad():
        test = sum(float(m(b)) * len(b) for b in xt.split(128)) / len(xt)
    return secs, test


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--batch', type=int, default=128)
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--hidden', type=int, default=256)
    ap.add_argument('--latent', type=int, default=16)
    ap.add_argument('--repeats', type=int, default=1)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--skip-torch', action='store_true')
    ap.add_argument('--torch-only', metavar='DIR', help=argparse.SUPPRESS)
    ap.add_argument('--threads', type=int, default=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_only:
        secs, test = torch_train(a, a.torch_only, a.threads)
        print(json.dumps({'seconds': secs, 'test': test}))
        return
    out = tempfile.mkdtemp(prefix='bench_vae_')
    try:
        subprocess.run([sys.executable, os.path.join(ROOT, 'tests', 'vae_model.py'), out, '--hidden', str(a.hidden),
                        '--latent', str(a.latent)], check=True)
        rows = {'graphrun cpu:2': lambda: graphrun_row(a, out, 'cpu:2', 1),
                'graphrun cpu:1 x 2': lambda: graphrun_row(a, out, 'cpu:1', 2)}
        if not a.skip_torch:
            rows['pytorch 2 threads'] = lambda: torch_row(a, out, 2)
            if os.path.exists(os.path.join(OPENBLAS, 'libblas.so.3')):
                rows['pytorch 2 thr OpenBLAS'] = lambda: torch_row(a, out, 2, OPENBLAS)
        secs, tests = {k: [] for k in rows}, {}
        for rep in range(a.repeats):
            for k, fn in rows.items():
                s, tests[k] = fn()
                secs[k].append(s)
                print(f'--- {k} ({rep + 1}/{a.repeats}): {s:.2f} s, test loss {tests[k]:.2f}', flush=True)
        med = {k: statistics.median(v) for k, v in secs.items()}
        print(f'\nVAE 784-{a.hidden}-{a.latent} on Fashion-MNIST, Adam lr {a.lr}, batch {a.batch}, {a.epochs} epochs; '
              f'medians of {a.repeats}')
        print(f'{"run":<22}{"sec":>8}{"sec/epoch":>11}{"test loss":>11}')
        for k in rows:
            print(f'{k:<22}{med[k]:>8.2f}{med[k] / a.epochs:>11.2f}{tests[k]:>11.2f}')
        if not a.skip_torch:
            for t in [k for k in rows if k.startswith('pytorch')]:
                for g in ('graphrun cpu:2', 'graphrun cpu:1 x 2'):
                    print(f'{g} vs {t}: {med[t] / med[g]:.2f}x faster')
    finally:
        shutil.rmtree(out)


if __name__ == '__main__':
    main()
