// Pass fuse_pool_relu_grad: on the executor's graph only, a pooling gradient whose dX goes straight into
// the gradient of the Relu that fed the pooling, ReluGrad(PoolGrad(dY, .., X), X), becomes the pooling
// gradient with attribute relu = 1: one pass over X's size instead of two (a write and a read of dX
// saved; LeNet's and SimpleCNN's convolution -> Relu -> pooling blocks).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Fuses ai.graphrun ReluGrad(dY, Y) where dY is an ai.graphrun AveragePoolGrad or MaxPoolGrad output
// that nothing else reads (and no graph output) and the pooling gradient's X is that same Y. Bit for bit
// the pair it replaces.
Graph fuse_pool_relu_grad(const Graph& g);
Pass fuse_pool_relu_grad_pass();

}  // namespace graphrun::passes
