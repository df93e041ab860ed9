// Pass state_updates: the end of a training graph. What a step persists (parameters and optimizer
// buffers from add_optimizer, BatchNorm running statistics) becomes the graph's outputs.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Appends the running-statistic updates of training-form BatchNormalization nodes to
// g.state_updates; the outputs become g's outputs minus the gradients an AllReduce sums (loss and
// model outputs stay), followed by every state update's value.
Graph state_updates(const Graph& g);
Pass state_updates_pass();

}  // namespace graphrun::passes
