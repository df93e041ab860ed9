// Pass remove_noops: drops nodes that compute nothing (Pad with all-zero pads, Identity), as
// PyTorch's exporter leaves before AveragePool; the training and evaluation graphs then neither
// copy those tensors nor carry their gradients.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Readers of a removed node's output read its input instead. A node whose output is a graph
// output stays (the graph's interface does not change).
Graph remove_noops(const Graph& g);
Pass remove_noops_pass();

}  // namespace graphrun::passes
