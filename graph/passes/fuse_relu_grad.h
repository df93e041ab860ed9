// Pass fuse_relu_grad: on the executor's graph only, the Relu gradient autodiff emits as
// Where(Greater(Y, 0), dY, 0) becomes one ai.graphrun ReluGrad(dY, Y): one pass over memory, no mask.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Fuses where Y is a Relu's output, both zeros are constant scalars 0, and the mask is no graph output;
// the Greater goes when the Where was its only reader. ReluGrad is bit for bit the pair it replaces.
Graph fuse_relu_grad(const Graph& g);
Pass fuse_relu_grad_pass();

}  // namespace graphrun::passes
