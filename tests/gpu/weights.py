#!/usr/bin/env python3
"""Moves a model to a GPU machine without its float weights, for timing runs where their values do not matter.

  weights.py strip MODEL.onnx OUT.onnx   every float initializer of 64 elements or more loses its data (shape kept)
  weights.py fill  MODEL.onnx OUT.onnx   gives each such initializer seeded normal values, He-scaled by its
                                         fan-in (1-D ones: 1 for weights and running variances, else 0)

ResNet-18's weights are 44 MB of random numbers that do not compress; its graph is 18 KB. Needs numpy and onnx.
"""
import sys

import numpy as np
import onnx


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ('strip', 'fill'):
        sys.exit(__doc__)
    mode, src, dst = sys.argv[1:]
    m = onnx.load(src)
    rng = np.random.default_rng(0)
    for t in m.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT or int(np.prod(t.dims)) < 64:
            continue
        if mode == 'strip':
            t.ClearField('raw_data')
            del t.float_data[:]
            continue
        dims = tuple(t.dims)
        if len(dims) == 1:
            a = np.full(dims, 1.0 if t.name.endswith(('weight', 'running_var')) else 0.0, np.float32)
        else:
            fan_in = int(np.prod(dims[1:]))
            a = (rng.standard_normal(dims) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        t.raw_data = a.tobytes()
    onnx.save(m, dst)
    print(f'{dst}: {len(m.graph.initializer)} initializers ({mode})')


if __name__ == '__main__':
    main()
