// Pass convert_opset: a model below opset 13 brought to opset 15 by onnx's version converter before
// training: the passes after it, the gradient rules and the loss read the forms of opset 13 on.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// The opsets the pass converts from (below 13) and to (15, what a BatchNormalization in training mode needs).
constexpr int64_t kTrainingMinOpset = 13, kTrainingOpset = 15;

// graphrun::convert_opset(g, kTrainingOpset) when g imports an opset below kTrainingMinOpset; else g.
Graph convert_opset_for_training(const Graph& g);
Pass convert_opset_pass();

}  // namespace graphrun::passes
