#!/usr/bin/env python3
"""Benchmark: a physics-informed network, trained through second derivatives. u = MLP(x) (tanh), and the model
itself computes u' and u'' with ONNX's Gradient op (ai.onnx.preview.training) and the residuals u' - cos x and
u'' + u, whose only solution is sin x; training fits the residuals to 0 (MSE, Adam). graphrun against the same
network trained by PyTorch in a plain loop (torch.autograd.grad with create_graph=True, twice per step), same
initial weights, same points, same run.

  /usr/bin/python3 bench/bench_pinn.py [--epochs 300] [--points 2048] [--batch 2048] [--hidden 32] [--repeats 1]
                                       [--graphrun build/graphrun] [--skip-torch]

Rows: graphrun cpu:1 and cpu:2 (one thread per replica), PyTorch with 1 and 2 threads. Seconds are the training
epochs only (graphrun's --metrics epoch seconds, its first epoch holding the planning step; torch's loop timed over
the same epochs). Each row also prints the trained network's largest error against sin x on 256 points of
[-3, 3], so that a fast run that learns nothing shows. With the whole set as one batch (the default, as PINNs are
usually trained) both sides take the same steps, so their errors agree to float32's rounding; with smaller batches
each shuffles its own way. Paths are relative to the repository root.
"""
import argparse
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
import pinn_model  # noqa: E402


def graphrun_row(a, out, devices):
    """Trains pinn.onnx; returns (training seconds, largest |u - sin x| of the trained model)."""
    import numpy as np
    metrics, saved = os.path.join(out, 'metrics.jsonl'), os.path.join(out, 'trained.onnx')
    cmd = [a.graphrun, 'train', os.path.join(out, 'pinn.onnx'), '--data', os.path.join(out, 'train.npz'),
           '--test-data', os.path.join(out, 'test.npz'), '--loss', 'mse', '--loss-output', 'residual',
           '--optimizer', 'adam', '--lr', str(a.lr), '--epochs', str(a.epochs), '--batch-size', str(a.batch),
           '--devices', devices, '--threads', '1', '--metrics', metrics, '--save', saved]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f'graphrun {devices} failed:\n{p.stdout[-2000:]}')
    with open(metrics) as f:
        secs = sum(json.loads(line)['seconds'] for line in f if line.strip())
    os.unlink(metrics)
    res = os.path.join(out, 'res')
    p = subprocess.run([a.graphrun, 'run', saved, '--input', 'x=' + os.path.join(out, 'xt.npy'), '--output-dir', res],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f'graphrun run failed:\n{p.stdout[-2000:]}')
    xt = np.load(os.path.join(out, 'xt.npy'))
    return secs, float(np.abs(np.load(os.path.join(res, 'u.npy')) - np.sin(xt)).max())


def torch_row(a, params, x, xt, threads):
    """The same network, points and optimizer in PyTorch (shuffled by its own generator); returns (seconds,
    largest |u - sin x|)."""
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    w = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}

    def net(v):
        h = torch.tanh(v @ w['W1'] + w['b1'])
        h = torch.tanh(h @ w['W2'] + w['b2'])
        return h @ w['W3'] + w['b3']
    opt = torch.optim.Adam(list(w.values()), lr=a.lr)
    xs = torch.from_numpy(x)
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for idx in torch.randperm(len(xs)).split(a.batch):
            xb = xs[idx].clone().requires_grad_(True)
            u = net(xb)
            du = torch.autograd.grad(u.sum(), xb, create_graph=True)[0]
            d2u = torch.autograd.grad(du.sum(), xb, create_graph=True)[0]
            r = torch.cat([du - torch.cos(xb), d2u + u], 1)
            loss = torch.nn.functional.mse_loss(r, torch.zeros_like(r))
            opt.zero_grad()
            loss.backward()
            opt.step()
    secs = time.perf_counter() - t0
    with torch.no_grad():
        err = float((net(torch.from_numpy(xt)) - torch.sin(torch.from_numpy(xt))).abs().max())
    return secs, err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--epochs', type=int, default=300)
    ap.add_argument('--points', type=int, default=2048)
    ap.add_argument('--batch', type=int, default=2048)
    ap.add_argument('--hidden', type=int, default=32)
    ap.add_argument('--lr', type=float, default=0.01)
    ap.add_argument('--repeats', type=int, default=1)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--skip-torch', action='store_true')
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix='bench_pinn_')
    try:
        params, x, xt = pinn_model.write(out, a.hidden, a.points)
        rows = {'graphrun cpu:1': lambda: graphrun_row(a, out, 'cpu:1'),
                'graphrun cpu:2': lambda: graphrun_row(a, out, 'cpu:2')}
        if not a.skip_torch:
            rows['pytorch 1 thread'] = lambda: torch_row(a, params, x, xt, 1)
            rows['pytorch 2 threads'] = lambda: torch_row(a, params, x, xt, 2)
        secs, errs = {k: [] for k in rows}, {}
        for rep in range(a.repeats):
            for k, fn in rows.items():
                s, errs[k] = fn()
                secs[k].append(s)
                print(f'--- {k} ({rep + 1}/{a.repeats}): {s:.2f} s, max |u - sin x| {errs[k]:.4f}', flush=True)
        med = {k: statistics.median(v) for k, v in secs.items()}
        print(f'\nPINN u\' = cos x, u\'\' + u = 0: MLP 1-{a.hidden}-{a.hidden}-1 tanh, {a.points} points, Adam lr {a.lr}, '
              f'batch {a.batch}, {a.epochs} epochs; medians of {a.repeats}')
        print(f'{"run":<20}{"sec":>8}{"max |u - sin x|":>18}')
        for k in rows:
            print(f'{k:<20}{med[k]:>8.2f}{errs[k]:>18.4f}')
        if not a.skip_torch:
            for g, t in (('graphrun cpu:1', 'pytorch 1 thread'), ('graphrun cpu:2', 'pytorch 2 threads')):
                print(f'{g} vs {t}: {med[t] / med[g]:.2f}x faster')
    finally:
        shutil.rmtree(out)


if __name__ == '__main__':
    main()
