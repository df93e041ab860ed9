// Pass fuse_relu_bn_add: on the executor's graph only, Relu(BatchNormalization) and Relu(Add) — ResNet's
// layers and residual joins — become one node each (ai.graphrun FusedBatchNormalization / FusedAdd,
// attribute activation="Relu"): the Relu is applied as the result is stored, no pre-activation tensor; the
// Relu's gradient feeding BatchNormalization's is folded into it (FusedBatchNormalizationGrad).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Fuses Relu(BatchNormalization(...)) (the Relu reading output 0, Y) and Relu(Add(a, b)) where the
// pre-activation is f32 or f64, read by the Relu alone and no graph output or state-update source (so
// the backward pass cannot need it: the Relu gradient reads the Relu's output, BatchNormalizationGrad
// reads BatchNormalization's input and recomputes the statistics, Add's gradient reads neither). The
// fused node takes the producer's place (its inputs are the producer's, so every reader of its other
// outputs, BatchNormalization's running statistics, still comes after it) and the Relu's output; its
// arithmetic is the unfused nodes', so the bits are theirs.
// In the backward pass, BatchNormalizationGrad(ReluGrad(dY, Y), X, scale) becomes
// FusedBatchNormalizationGrad(dY, Y, X, scale) where the ReluGrad's output (f32 or f64) is read by that
// BatchNormalizationGrad alone, as its dY, and is no graph output or state-update source.
Graph fuse_relu_bn_add(const Graph& g);
Pass fuse_relu_bn_add_pass();

}  // namespace graphrun::passes
