#!/usr/bin/env python3
"""Benchmark: a GPT-style causal language model as users write it (token and position embeddings, pre-norm
nn.TransformerEncoder blocks under a causal mask, the output projection tied to the embedding, per-token
cross-entropy on logits [N, T, V]), exported by torch.onnx in training mode and trained with Adam:
graphrun against the same model trained by PyTorch in a plain loop, same data, same run.

  /usr/bin/python3 bench/bench_transformer.py [--steps 30] [--batch 32] [--layers 4] [--dim 128]
                                              [--seq 64] [--vocab 512] [--repeats 1] [--graphrun build/graphrun]
                                              [--baseline OTHER_GRAPHRUN] [--skip-torch]

Rows: graphrun --devices cpu:2 --threads 1 (one replica per core), graphrun cpu:1 --threads 2 (one replica,
two intra-op threads) and PyTorch with 2 threads. Seconds are the training steps only (graphrun's --metrics
epoch seconds, which include its first, planning step; torch's loop timed over the same steps). Each side's
mean loss over the steps is printed, so that a fast run that learns nothing shows. Paths are relative to
the repository root; the model and data are written to a temporary folder.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, run  # noqa: E402

MODEL = r'''
import torch
class TinyGPT(torch.nn.Module):
    def __init__(s, V, T, D, H, L):
        super().__init__()
        s.emb = torch.nn.Embedding(V, D)
        torch.nn.init.normal_(s.emb.weight, std=0.02)  # GPT-2's: logits near 0 at the start
        s.pos = torch.nn.Parameter(0.02 * torch.randn(1, T, D))
        layer = torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
        s.blocks = torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        s.ln = torch.nn.LayerNorm(D)
        s.register_buffer('causal', torch.triu(torch.full((T, T), float('-inf')), 1))
    def forward(s, tokens):
        return s.ln(s.blocks(s.emb(tokens) + s.pos, mask=s.causal)) @ s.emb.weight.t()
'''


def make(a, out):
    """The model (gpt.onnx) and the data (train.npz, test.npz) in `out`: sequences that count up from a random
    start by a random step mod V, so that the loss falls."""
    import numpy as np
    import torch
    torch.manual_seed(0)
    ns = {}
    exec(MODEL, ns)
    model = ns['TinyGPT'](a.vocab, a.seq, a.dim, a.heads, a.layers)
    r = np.random.RandomState(0)
    n = a.batch * a.steps + 256
    seq = (r.randint(0, a.vocab, size=(n, 1)) + r.randint(1, 4, size=(n, 1)) * np.arange(a.seq + 1)[None, :]) % a.vocab
    np.savez(os.path.join(out, 'train.npz'), tokens=seq[:-256, :a.seq], labels=seq[:-256, 1:])
    np.savez(os.path.join(out, 'test.npz'), tokens=seq[-256:, :a.seq], labels=seq[-256:, 1:])
    torch.save(model.state_dict(), os.path.join(out, 'init.pt'))
    torch.onnx.export(model, torch.from_numpy(seq[:2, :a.seq]), os.path.join(out, 'gpt.onnx'), input_names=['tokens'],
                      output_names=['logits'], dynamic_axes={'tokens': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    return seq[:-256]


def torch_steps(a, out, seq, threads):
    """Trains the same initial model in a plain loop for a.steps steps of a.batch; returns (seconds, the mean
    loss over the steps, as graphrun's epoch line gives it)."""
    import torch
    torch.set_num_threads(threads)
    ns = {}
    exec(MODEL, ns)
    model = ns['TinyGPT'](a.vocab, a.seq, a.dim, a.heads, a.layers)
    model.load_state_dict(torch.load(os.path.join(out, 'init.pt')))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    x = torch.from_numpy(seq[:, :a.seq].copy())
    y = torch.from_numpy(seq[:, 1:].copy())
    t0 = time.perf_counter()
    total = 0.0
    for s in range(a.steps):
        xb, yb = x[s * a.batch:(s + 1) * a.batch], y[s * a.batch:(s + 1) * a.batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb).reshape(-1, a.vocab), yb.reshape(-1))
        loss.backward()
        opt.step()
        total += float(loss)
    return time.perf_counter() - t0, total / a.steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--steps', type=int, default=30)
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--layers', type=int, default=4)
    ap.add_argument('--dim', type=int, default=128)
    ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--seq', type=int, default=64)
    ap.add_argument('--vocab', type=int, default=512)
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--repeats', type=int, default=1)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--baseline', help='another graphrun binary (e.g. an older build): its rows run too, alternating')
    ap.add_argument('--skip-torch', action='store_true')
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix='bench_transformer_')
    try:
        seq = make(a, out)
        common = ['train', os.path.join(out, 'gpt.onnx'), '--data', os.path.join(out, 'train.npz'),
                  '--test-data', os.path.join(out, 'test.npz'), '--epochs', '1', '--max-steps', str(a.steps),
                  '--batch-size', str(a.batch), '--optimizer', 'adam', '--lr', str(a.lr)]
        binaries = {'': a.graphrun} if not a.baseline else {'old ': a.baseline, '': a.graphrun}
        rows = {}
        for tag, binary in binaries.items():
            rows[f'graphrun {tag}cpu:2 x1'] = [binary] + common + ['--devices', 'cpu:2', '--threads', '1']
            rows[f'graphrun {tag}cpu:1 x2'] = [binary] + common + ['--devices', 'cpu:1', '--threads', '2']
        secs = {k: [] for k in rows}
        if not a.skip_torch:
            secs['pytorch 2 threads'] = []
        torch_loss = None
        for rep in range(a.repeats):
            for k, cmd in rows.items():
                secs[k].append(run(f'{k} ({rep + 1}/{a.repeats})', cmd)[1])
            if not a.skip_torch:
                t, torch_loss = torch_steps(a, out, seq, 2)
                print(f'--- pytorch 2 threads ({rep + 1}/{a.repeats}): {t:.2f} s, mean loss {torch_loss:.4f}',
                      flush=True)
                secs['pytorch 2 threads'].append(t)
        med = {k: statistics.median(v) for k, v in secs.items()}
        print(f'\nGPT-style LM: {a.layers} pre-norm layers, d={a.dim}, {a.heads} heads, T={a.seq}, V={a.vocab}; '
              f'Adam, batch {a.batch}, {a.steps} steps; medians of {a.repeats}')
        print(f'{"run":<22}{"sec":>8}{"steps/s":>9}   all runs (sec)')
        for k, s in med.items():
            print(f'{k:<22}{s:>8.2f}{a.steps / s:>9.2f}   {" ".join(f"{x:.2f}" for x in secs[k])}')
        if not a.skip_torch:
            for k in rows:
                print(f'{k} vs pytorch 2 threads: {med["pytorch 2 threads"] / med[k]:.2f}x the steps/s')
        if a.baseline:
            for dev in ('cpu:2 x1', 'cpu:1 x2'):
                print(f'{dev}: new / old = {med[f"graphrun old {dev}"] / med[f"graphrun {dev}"]:.2f}x the steps/s')
    finally:
        shutil.rmtree(out)


if __name__ == '__main__':
    main()
