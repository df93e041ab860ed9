// Pass fold_constants: on the executor's graph only, a node whose inputs are all constants becomes a
// Constant holding its result (computed once, at load time, by the kernels the caller binds).
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

struct FoldConstantsOptions {
  // Computes a node's outputs from its inputs (nullptr for absent ones); throws Error when it cannot.
  // graph/ has no kernels: the runtime binds its CPU kernels here.
  std::function<std::vector<Tensor>(const Graph&, const Node&, const std::vector<const Tensor*>&)> evaluate;
  // A result larger than this stays a node: folding must not grow the graph's memory.
  size_t max_bytes = size_t(64) << 10;
};

// Constants are Constant nodes' values and the initializers that can never change: not a state update's
// target (trained parameters, optimizer and BatchNorm state) and not a float tensor (a parameter, even a
// frozen one, may be replaced from a checkpoint). Folded: standard-domain nodes with one output whose
// inputs are all constants, except random ops; a node whose evaluation fails stays (it fails at run
// time with the executor's message, as it would have).
Graph fold_constants(const Graph& g, const FoldConstantsOptions& opts);
Pass fold_constants_pass(FoldConstantsOptions opts);

}  // namespace graphrun::passes
