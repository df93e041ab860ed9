#!/usr/bin/env python3
"""Benchmark: training on your own data (README "Your own data"), the longer runs the tests leave out.

  bench/bench_own_data.py [--epochs 2] [--graphrun build/graphrun] [--work /tmp/own_data] [--skip-png]
                          [--skip-resnet]

1. Fashion-MNIST re-exported as .npz, as a folder of .npy files and as a PNG class-folder tree (all
   70000 images) trains LeNet (cpu:2) to the test accuracy of the MNIST folder; prints each one's
   test accuracy and sec/epoch in one run.
   With the PNG tree, the time each step waits for its data (the trace's "data" events of replica
   0, from --profile) with 1 and 2 loader threads, against the step time: the loader threads decode
   ahead of the step, so the wait should be near zero.
2. A linear regression (y = x . w + noise, 8 features) trained with --loss mse against torch with the
   same model, data, split, batch, learning rate and epochs: the two test MSEs (within 10% expected).
3. torchvision's ResNet-18 exported for 3x32x32 images, trained from Fashion-MNIST padded to 32x32
   with its channel repeated (u8[N,3,32,32] in an .npz): 2 epochs of 10000 images, Adam, cpu:2; the
   test accuracy on 2000 test images (chance: 0.1).
Paths are relative to the repository root.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, run  # noqa: E402

EXPORT = r'''
import gzip, os, struct, sys, zlib
import numpy as np
D, W, png_too = '/usr/share/datasets/fashion-mnist', sys.argv[1], sys.argv[2] == '1'
def load(p, off): return np.frombuffer(gzip.open(os.path.join(D, p)).read(), np.uint8, offset=off)
xi = load('train-images-idx3-ubyte.gz', 16).reshape(-1, 28, 28); yi = load('train-labels-idx1-ubyte.gz', 8)
xt = load('t10k-images-idx3-ubyte.gz', 16).reshape(-1, 28, 28); yt = load('t10k-labels-idx1-ubyte.gz', 8)
os.makedirs(W, exist_ok=True); os.chdir(W)
np.savez('train.npz', image=xi, labels=yi); np.savez('test.npz', image=xt, labels=yt)
for d, x, y in (('npy', xi, yi), ('npyt', xt, yt)):
    os.makedirs(d, exist_ok=True); np.save(d + '/image.npy', x); np.save(d + '/labels.npy', y.astype(np.int64))
def chunk(t, d): c = t + d; return struct.pack('>I', len(d)) + c + struct.pack('>I', zlib.crc32(c) & 0xffffffff)
def png(a):
    raw = b''.join(b'\0' + a[r].tobytes() for r in range(a.shape[0]))
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', a.shape[1], a.shape[0], 8, 0, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
if png_too and not os.path.exists('png/test/9'):
    for split, x, y in (('train', xi, yi), ('test', xt, yt)):
        for c in range(10): os.makedirs('png/%s/%d' % (split, c), exist_ok=True)
        for i in range(len(x)): open('png/%s/%d/%05d.png' % (split, y[i], i), 'wb').write(png(x[i]))
r = np.random.RandomState(0)
x = r.randn(20000, 8).astype(np.float32); w = r.randn(8).astype(np.float32)
np.savez('houses.npz', features=x, price=(x @ w + 0.3 * r.randn(20000)).astype(np.float32))
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
g = h.make_graph([h.make_node('Gemm', ['x', 'w', 'b'], ['y'])], 'regressor',
                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 8])], [h.make_tensor_value_info('y', T.FLOAT, ['N', 1])],
                 [nh.from_array(np.zeros((8, 1), np.float32), 'w'), nh.from_array(np.zeros(1, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'regressor.onnx')
'''

# The same regression in torch: the same 80/20 split is not reproducible across the two, so torch
# holds out the last 20% and trains with the same batch, learning rate and epochs.
TORCH = r'''
import sys, numpy as np, torch
d = np.load(sys.argv[1] + '/houses.npz'); x, y = torch.tensor(d['features']), torch.tensor(d['price'])[:, None]
n = int(len(x) * 0.8); torch.manual_seed(0)
m = torch.nn.Linear(8, 1); torch.nn.init.zeros_(m.weight); torch.nn.init.zeros_(m.bias)
opt = torch.optim.SGD(m.parameters(), lr=float(sys.argv[2]))
for e in range(int(sys.argv[3])):
    p = torch.randperm(n)
    for i in range(0, n, 64):
        b = p[i:i + 64]; opt.zero_grad(); torch.nn.functional.mse_loss(m(x[b]), y[b]).backward(); opt.step()
with torch.no_grad(): print('torch test mse: %.4f' % torch.nn.functional.mse_loss(m(x[n:]), y[n:]).item())
'''


RESNET = r'''
import gzip, sys, numpy as np, torch, torchvision
D, W = '/usr/share/datasets/fashion-mnist/', sys.argv[1]
def load(p, off): return np.frombuffer(gzip.open(D + p).read(), np.uint8, offset=off)
def rgb32(x): return np.repeat(np.pad(x.reshape(-1, 1, 28, 28), ((0, 0), (0, 0), (2, 2), (2, 2))), 3, axis=1)
np.savez(W + '/rgb32_train.npz', image=rgb32(load('train-images-idx3-ubyte.gz', 16)[:10000 * 784]),
         labels=load('train-labels-idx1-ubyte.gz', 8)[:10000])
np.savez(W + '/rgb32_test.npz', image=rgb32(load('t10k-images-idx3-ubyte.gz', 16)[:2000 * 784]),
         labels=load('t10k-labels-idx1-ubyte.gz', 8)[:2000])
torch.manual_seed(0)
torch.onnx.export(torchvision.models.resnet18(num_classes=10), torch.zeros(2, 3, 32, 32), W + '/resnet18_rgb32.onnx',
                  input_names=['image'], output_names=['logits'], dynamic_axes={'image': {0: 'N'}, 'logits': {0: 'N'}},
                  opset_version=13, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
'''


def data_wait(trace):
    """(mean ms replica 0 waits for its data per step, mean ms of its step) from a --profile trace."""
    import json
    events = json.load(open(trace))['traceEvents']
    tids = {e['tid'] for e in events if e.get('ph') == 'X' and e.get('name') == 'step'}
    tid = min(tids)
    data = [e['dur'] for e in events if e.get('ph') == 'X' and e.get('tid') == tid and e.get('cat') == 'data']
    steps = [e['dur'] for e in events if e.get('ph') == 'X' and e.get('tid') == tid and e.get('name') == 'step']
    return sum(data) / len(steps) / 1e3, sum(steps) / len(steps) / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--epochs', type=int, default=2)
    ap.add_argument('--graphrun', default='build/graphrun')
    ap.add_argument('--python', default='/usr/bin/python3')
    ap.add_argument('--work', default='/tmp/graphrun_own_data')
    ap.add_argument('--skip-png', action='store_true')
    ap.add_argument('--skip-resnet', action='store_true')
    a = ap.parse_args()
    w = a.work
    subprocess.run([a.python, '-c', EXPORT, w, '0' if a.skip_png else '1'], check=True)
    base = [a.graphrun, 'train', 'models/lenet.onnx', '--devices', 'cpu:2', '--epochs', str(a.epochs)]
    rows = [('MNIST folder', []), ('.npz', ['--data', w + '/train.npz', '--test-data', w + '/test.npz']),
            ('.npy folder', ['--data', w + '/npy', '--test-data', w + '/npyt'])]
    if not a.skip_png:
        rows.append(('PNG tree', ['--data', w + '/png/train', '--test-data', w + '/png/test']))
    results = [(name, run(name, base + extra)) for name, extra in rows]
    for name, (acc, sec) in results:
        print(f'{name:>14}: test acc {acc:.3f}, {sec:.1f} sec/epoch')
    if not a.skip_png:
        for threads in ('1', '2'):
            trace = f'{w}/png_{threads}.json'
            run(f'PNG tree, {threads} loader threads, profiled',
                base[:-2] + ['--epochs', '1', '--max-steps', '100', '--loader-threads', threads, '--profile', trace,
                             '--data', w + '/png/train', '--test-data', w + '/png/test'])
            wait, step = data_wait(trace)
            print(f'PNG tree, {threads} loader thread{"s" if threads != "1" else ""}: replica 0 waits '
                  f'{wait:.2f} ms per step for its data, {100 * wait / step:.1f}% of its {step:.1f} ms step')
    lr, epochs = '0.02', '3'
    cmd = [a.graphrun, 'train', w + '/regressor.onnx', '--data', w + '/houses.npz', '--labels', 'price', '--loss',
           'mse', '--val-split', '0.2', '--devices', 'cpu:2', '--batch-size', '64', '--lr', lr, '--epochs', epochs]
    out = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    ours = float(re.search(r'test mse: ([0-9.]+)', out).group(1))
    theirs = subprocess.run([a.python, '-c', TORCH, w, lr, epochs], stdout=subprocess.PIPE, text=True).stdout
    ref = float(re.search(r'test mse: ([0-9.]+)', theirs).group(1))
    print(f'regression: graphrun test mse {ours:.4f}, torch {ref:.4f} ({100 * (ours / ref - 1):+.1f}%)')
    if not a.skip_resnet:
        subprocess.run([a.python, '-c', RESNET, w], check=True, stderr=subprocess.DEVNULL)
        acc, sec = run('torchvision ResNet-18, 3x32x32', [
            a.graphrun, 'train', w + '/resnet18_rgb32.onnx', '--data', w + '/rgb32_train.npz', '--test-data',
            w + '/rgb32_test.npz', '--devices', 'cpu:2', '--epochs', '2', '--batch-size', '64', '--optimizer', 'adam',
            '--lr', '1e-3'])
        print(f'torchvision ResNet-18 on 3x32x32 Fashion-MNIST: test acc {acc:.3f} (chance 0.1), {sec:.1f} sec/epoch')


if __name__ == '__main__':
    main()
