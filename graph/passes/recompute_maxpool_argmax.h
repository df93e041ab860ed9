// Pass recompute_maxpool_argmax: on the executor's graph only, a MaxPool over plain 2x2 windows of
// stride 2 whose Indices only MaxPoolGrad nodes read stops writing them (8 bytes an output, twice the
// pooled value), and those gradients find each window's argmax again in X, which they read anyway
// (for dX's shape and, with relu = 1, for the mask). SimpleCNN's convolution -> Relu -> MaxPool block.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Rewrites MaxPool(X) -> (Y, Indices) where kernel_shape is [2, 2], strides [2, 2], pads 0, dilations 1,
// ceil_mode 0 and storage_order 0, Indices is no graph output and every reader of Indices is an
// ai.graphrun MaxPoolGrad(dY, Indices, X) of the same X: Indices becomes an absent output of MaxPool and
// an absent input of each MaxPoolGrad, which takes kernel_shape and strides. Bit for bit the graph it
// replaces (the gradient applies the forward's own tie and NaN rule).
Graph recompute_maxpool_argmax(const Graph& g);
Pass recompute_maxpool_argmax_pass();

}  // namespace graphrun::passes
