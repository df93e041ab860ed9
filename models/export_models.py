#!/usr/bin/python3
"""Exports the models graphrun trains (LeNet, SimpleCNN, ResNet-18) from PyTorch to ONNX.

Run with Debian's python3-torch (1.13) and python3-onnx (1.12):
  /usr/bin/python3 models/export_models.py [--out-dir models] [--only lenet,simplecnn,resnet18]
Every model takes "image" f32[N,1,28,28] (N dynamic) and returns "logits" f32[N,10]. Exports are in
training mode (BatchNormalization has training_mode=1 and running-stat outputs) without constant
folding, so the graphs keep every parameter as a named initializer that graphrun can train.
The tests import this file (build_model) to rebuild the same torch modules for parity checks.
"""
import argparse
import warnings
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# The newest opset that torch 1.13's exporter and onnx 1.12's checker both support.
OPSET = 17
SEED = 0


class LeNet(nn.Module):
    """d2l "multiple GPUs from scratch" LeNet: plain tensors, fc layers as h @ W + b with W [in, out]."""

    def __init__(self):
        super().__init__()
        s = 0.01
        self.conv1 = nn.ParameterDict({'weight': nn.Parameter(torch.randn(20, 1, 3, 3) * s),
                                       'bias': nn.Parameter(torch.zeros(20))})
        self.conv2 = nn.ParameterDict({'weight': nn.Parameter(torch.randn(50, 20, 5, 5) * s),
                                       'bias': nn.Parameter(torch.zeros(50))})
        self.fc1 = nn.ParameterDict({'weight': nn.Parameter(torch.randn(800, 128) * s),
                                     'bias': nn.Parameter(torch.zeros(128))})
        self.fc2 = nn.ParameterDict({'weight': nn.Parameter(torch.randn(128, 10) * s),
                                     'bias': nn.Parameter(torch.zeros(10))})

    def forward(self, x):
        h = F.avg_pool2d(F.relu(F.conv2d(x, self.conv1['weight'], self.conv1['bias'])), 2, 2)
        h = F.avg_pool2d(F.relu(F.conv2d(h, self.conv2['weight'], self.conv2['bias'])), 2, 2)
        h = F.relu(h.reshape(h.shape[0], -1) @ self.fc1['weight'] + self.fc1['bias'])
        return h @ self.fc2['weight'] + self.fc2['bias']


class SimpleCNN(nn.Module):
    """The "DataParallel basics" CNN: conv 10x1x5x5, relu, maxpool 2, fc 1440->10 (torch default init)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 10, kernel_size=5)
        self.fc = nn.Linear(10 * 12 * 12, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.conv(x)), 2), 1))


class ResidualBlock(nn.Module):
    """d2l's Residual: two 3x3 conv+BN, a 1x1 conv shortcut (no BN) when the block downsamples."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride) if stride != 1 else None

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet18(nn.Module):
    """d2l's Fashion-MNIST ResNet-18: 3x3 stem (64 channels, stride 1, BN, ReLU, no max-pool),
    four stages of two residual blocks (64, 128, 256, 512 channels), global average pool, fc 512->10."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(64)
        stages, c_in = [], 64
        for i, c in enumerate([64, 128, 256, 512]):
            stride = 1 if i == 0 else 2
            stages.append(nn.Sequential(ResidualBlock(c_in, c, stride), ResidualBlock(c, c, 1)))
            c_in = c
        self.stage1, self.stage2, self.stage3, self.stage4 = stages
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.stage4(self.stage3(self.stage2(self.stage1(h))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


MODELS = {'lenet': LeNet, 'simplecnn': SimpleCNN, 'resnet18': ResNet18}


def build_model(name):
    """The model `name` with its deterministic initial weights."""
    torch.manual_seed(SEED)
    return MODELS[name]()


def export(name, path):
    import onnx
    model = build_model(name)
    model.train()
    example = torch.zeros(2, 1, 28, 28)
    # BatchNorm's num_batches_tracked counter is not part of the ONNX graph; torch warns about it per layer.
    warnings.filterwarnings('ignore', message='ONNX Preprocess - Removing mutation')
    torch.onnx.export(model, (example,), path, input_names=['image'], output_names=['logits'],
                      dynamic_axes={'image': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=OPSET,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      export_params=True)
    m = onnx.load(path)
    m.graph.name = name
    m.doc_string = MODELS[name].__doc__.split('\n')[0]
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    print(f'{path}: {len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers, opset {OPSET}')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out-dir', default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument('--only', default=','.join(MODELS), help='comma-separated subset of ' + ','.join(MODELS))
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    for name in a.only.split(','):
        if name not in MODELS:
            sys.exit(f'export_models.py: unknown model {name!r} (have {", ".join(MODELS)})')
        export(name, os.path.join(a.out_dir, name + '.onnx'))


if __name__ == '__main__':
    main()
