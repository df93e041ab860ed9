#!/usr/bin/python3
"""PyTorch reference outputs for a model in models/: loads the ONNX file's initializers into the torch
module models/export_models.py builds, runs random batches, writes x_<B>.npy and logits_<B>.npy.

  /usr/bin/python3 tests/python/forward_reference.py MODEL ONNX_FILE OUT_DIR [--batches 16,3] [--seed 1]
The module runs in training mode, like the exported graph (BatchNorm normalises with batch statistics).
"""
import argparse
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'models'))
import export_models  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('model', choices=sorted(export_models.MODELS))
    ap.add_argument('onnx_file')
    ap.add_argument('out_dir')
    ap.add_argument('--batches', default='16,3')
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()

    module = export_models.build_model(a.model)
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load(a.onnx_file).graph.initializer}
    state = module.state_dict()
    wanted = {k for k in state if not k.endswith('num_batches_tracked')}
    if wanted - set(weights):
        sys.exit(f'forward_reference.py: {a.onnx_file} lacks initializers {sorted(wanted - set(weights))}')
    for k in wanted:
        if tuple(weights[k].shape) != tuple(state[k].shape):
            sys.exit(f'forward_reference.py: {k} is {tuple(weights[k].shape)} in ONNX, {tuple(state[k].shape)} in torch')
    module.load_state_dict({k: weights[k] for k in wanted}, strict=False)
    module.train()

    torch.manual_seed(a.seed)
    os.makedirs(a.out_dir, exist_ok=True)
    for b in (int(s) for s in a.batches.split(',')):
        x = torch.rand(b, 1, 28, 28)
        with torch.no_grad():
            y = module(x)
        np.save(os.path.join(a.out_dir, f'x_{b}.npy'), x.numpy().astype(np.float32))
        np.save(os.path.join(a.out_dir, f'logits_{b}.npy'), y.numpy().astype(np.float32))


if __name__ == '__main__':
    main()
