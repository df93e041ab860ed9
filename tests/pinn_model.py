#!/usr/bin/python3
"""A physics-informed network as an ONNX model, for tests and bench/bench_pinn.py: u = MLP(x) (1-H-H-1, tanh), and
the model itself computes u' and u'' with ONNX's Gradient op (ai.onnx.preview.training; u'' is a Gradient of the
first Gradient's output) and the residuals u' - cos x and u'' + u, whose only solution is sin x. Outputs
`residual` [N, 2] (trained towards 0 with --loss mse --loss-output residual) and `u` [N, 1].

  /usr/bin/python3 tests/pinn_model.py OUT_DIR [--hidden 16] [--points 1024]

Writes OUT_DIR/pinn.onnx, train.npz (x uniform in [-3, 3], labels 0), test.npz and xt.npy (256 points evenly
over [-3, 3]) and sin.npy (sin of them).
"""
import argparse
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto


def write(out, hidden=16, points=1024, seed=0):
    """Writes the files; returns (the initial weights by name, the training points, the test points)."""
    F = TensorProto.FLOAT
    rng = np.random.default_rng(seed)
    H = hidden
    params = {'W1': rng.standard_normal((1, H)), 'b1': np.zeros(H), 'W2': rng.standard_normal((H, H)) / np.sqrt(H),
              'b2': np.zeros(H), 'W3': rng.standard_normal((H, 1)) / np.sqrt(H), 'b3': np.zeros(1)}
    params = {k: v.astype(np.float32) for k, v in params.items()}

    def grad(i, o, name, **kw):
        return helper.make_node('Gradient', i, o, name=name, domain='ai.onnx.preview.training', **kw)
    nodes = [
        helper.make_node('Gemm', ['x', 'W1', 'b1'], ['h1p']), helper.make_node('Tanh', ['h1p'], ['h1']),
        helper.make_node('Gemm', ['h1', 'W2', 'b2'], ['h2p']), helper.make_node('Tanh', ['h2p'], ['h2']),
        helper.make_node('Gemm', ['h2', 'W3', 'b3'], ['u']),
        grad(['x'], ['du_dx'], 'du_dx', xs=['x'], y='u'),  # u_i depends on x_i alone: the sum's gradient is u'
        grad(['x'], ['d2u_dx2'], 'd2u_dx2', xs=['x'], y='du_dx'),
        helper.make_node('Cos', ['x'], ['cosx']), helper.make_node('Sub', ['du_dx', 'cosx'], ['r1']),
        helper.make_node('Add', ['d2u_dx2', 'u'], ['r2']),
        helper.make_node('Concat', ['r1', 'r2'], ['residual'], axis=1),
    ]
    g = helper.make_graph(nodes, 'pinn', [helper.make_tensor_value_info('x', F, ['N', 1])],
                          [helper.make_tensor_value_info('residual', F, ['N', 2]),
                           helper.make_tensor_value_info('u', F, ['N', 1])],
                          [numpy_helper.from_array(v, k) for k, v in params.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17),
                                                  helper.make_opsetid('ai.onnx.preview.training', 1)]),
              os.path.join(out, 'pinn.onnx'))
    x = rng.uniform(-3, 3, (points, 1)).astype(np.float32)
    np.savez(os.path.join(out, 'train.npz'), x=x, labels=np.zeros((points, 2), np.float32))
    xt = np.linspace(-3, 3, 256, dtype=np.float32).reshape(-1, 1)
    np.savez(os.path.join(out, 'test.npz'), x=xt, labels=np.zeros((256, 2), np.float32))
    np.save(os.path.join(out, 'xt.npy'), xt)
    np.save(os.path.join(out, 'sin.npy'), np.sin(xt))
    return params, x, xt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('out')
    ap.add_argument('--hidden', type=int, default=16)
    ap.add_argument('--points', type=int, default=1024)
    a = ap.parse_args()
    write(a.out, a.hidden, a.points)


if __name__ == '__main__':
    main()
