// Pass remove_noops: drops nodes that compute nothing (Pad with all-zero pads, Identity), as
// PyTorch's exporter leaves before AveragePool; the training and evaluation graphs then neither
// copy those tensors nor carry their gradients.
#pragma once
#include <functional>
#include <string>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Readers of a removed node's output read its input instead. A node whose output is a graph
// output stays (the graph's interface does not change).
Graph remove_noops(const Graph& g);
Pass remove_noops_pass();

// The machinery, shared with the executor's pass remove_internal_noops:
// what remove_noops does, for the nodes `is_noop` says compute nothing (it sees only nodes with one
// used output, input 0 given, that is no graph output; readers of it read input 0 instead).
Graph remove_noops_if(const Graph& g, const std::function<bool(const Graph&, const Node&)>& is_noop);
// What remove_noops drops: an Identity, a Pad with all-zero pads.
bool is_identity_or_zero_pad(const Graph& g, const Node& n);
// The constant value of `v` if an initializer or a Constant node (value attribute) defines it.
const Tensor* constant_of(const Graph& g, const std::string& v);
// Removes the Constant nodes nothing reads (and that are no graph output).
void drop_unread_constants(Graph& g);

}  // namespace graphrun::passes
