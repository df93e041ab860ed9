#!/usr/bin/env python3
"""PyTorch on the GPU, the yardstick of graphrun's GPU timings (tests/gpu/session.sh runs it beside graphrun):
d2l's LeNet epochs (batch 256, lr 0.2, data resident on the GPU) and ResNet-18 steps (batch 256, SGD lr 0.05),
with the models of the CPU yardstick torch_reference.py.

  torch_gpu.py TORCH_REFERENCE.py FASHION_MNIST_DIR
Prints 'torch lenet epoch E: S s, test acc A' and 'torch resnet18 N steps: S s, R steps/s' lines.
"""
import importlib.util
import sys
import time

import torch
import torch.nn.functional as F


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    spec = importlib.util.spec_from_file_location('torch_reference', sys.argv[1])
    R = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(R)
    R.DATA = sys.argv[2].rstrip('/') + '/'
    dev = 'cuda'
    torch.manual_seed(0)
    xtr, ytr = R.load('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz')
    xte, yte = R.load('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    print(torch.__version__, torch.cuda.get_device_name(), 'cudnn', torch.backends.cudnn.version(), flush=True)
    net, p = R.d2l_lenet()
    p[:] = [t.detach().to(dev).requires_grad_() for t in p]  # the closure reads this list
    lr, bs = 0.2, 256
    for epoch in range(3):
        perm = torch.randperm(xtr.shape[0], device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, xtr.shape[0], bs):
            idx = perm[i:i + bs]
            x, y = xtr[idx], ytr[idx]
            loss = F.cross_entropy(net(x), y, reduction='sum')
            loss.backward()
            with torch.no_grad():
                for t in p:
                    t -= lr * t.grad / x.shape[0]
                    t.grad.zero_()
            loss.item()  # the CPU yardstick reads the loss every step too
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        with torch.no_grad():
            acc = (net(xte).argmax(1) == yte).float().mean().item()
        print(f'torch lenet epoch {epoch + 1}: {dt:.2f} s, test acc {acc:.4f}', flush=True)
    m = R.ResNet18().to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    m.train()
    for n in (5, 30):  # warm-up, then timed
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            idx = torch.randint(0, xtr.shape[0], (256,), device=dev)
            opt.zero_grad()
            loss = F.cross_entropy(m(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            loss.item()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(f'torch resnet18 {n} steps: {dt:.2f} s, {n / dt:.1f} steps/s', flush=True)


if __name__ == '__main__':
    main()
