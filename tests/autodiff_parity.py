#!/usr/bin/python3
"""Reference gradients for the autodiff parity test: PyTorch autograd on a model of models/ with the
weights of its ONNX file.

usage: autodiff_parity.py MODEL.onnx OUT_DIR [--batch N] [--seed S]
Writes OUT_DIR/image.npy (f32 [N,1,28,28]), labels.npy (i64 [N]), loss.npy (scalar: mean
cross-entropy of the logits), one <parameter>.npy per trainable parameter (its gradient) and
params.txt listing them. Computed in double precision from the float32 weights and batch; stored as f32.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model')
    ap.add_argument('out_dir')
    ap.add_argument('--batch', type=int, default=4)
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(here), 'models'))
    import export_models  # the torch modules the ONNX files were exported from

    m = onnx.load(a.model)
    name = m.graph.name if m.graph.name in export_models.MODELS else os.path.basename(a.model).split('.')[0]
    if name not in export_models.MODELS:
        sys.exit(f'autodiff_parity.py: {a.model}: no torch module for model {name!r}')
    model = export_models.build_model(name)
    weights = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    state = model.state_dict()
    missing = [k for k in state if k not in weights and not k.endswith('num_batches_tracked')]
    if missing:
        sys.exit(f'autodiff_parity.py: {a.model} lacks initializers for {missing}')
    model.load_state_dict({k: torch.from_numpy(np.array(weights[k])) if k in weights else v
                           for k, v in state.items()})
    model = model.double().train()

    rng = np.random.default_rng(a.seed)
    image = rng.standard_normal((a.batch, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, size=a.batch).astype(np.int64)
    loss = F.cross_entropy(model(torch.from_numpy(image).double()), torch.from_numpy(labels))
    loss.backward()

    os.makedirs(a.out_dir, exist_ok=True)
    np.save(os.path.join(a.out_dir, 'image.npy'), image)
    np.save(os.path.join(a.out_dir, 'labels.npy'), labels)
    np.save(os.path.join(a.out_dir, 'loss.npy'), np.array(loss.item(), dtype=np.float32))
    names = []
    for pname, p in model.named_parameters():
        np.save(os.path.join(a.out_dir, pname + '.npy'), p.grad.numpy().astype(np.float32))
        names.append(pname)
    with open(os.path.join(a.out_dir, 'params.txt'), 'w') as f:
        f.write('\n'.join(names) + '\n')


if __name__ == '__main__':
    main()
