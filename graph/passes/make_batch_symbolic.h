// Pass make_batch_symbolic: the batch dimension of an input becomes a symbol, so that one training
// graph serves every shard size (replicas' shards differ by one, the last batch is smaller).
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// The first dimension of input `input` (the graph's first input when empty) becomes `symbol`; an
// input of unknown rank or rank 0 is left as it is. Error when the graph has no such input.
Graph make_batch_symbolic(const Graph& g, const std::string& input = "", const std::string& symbol = "N");
// The pass: the batch dimension of each of `inputs` (a model may take several: tokens and a mask).
Pass make_batch_symbolic_pass(const std::vector<std::string>& inputs, const std::string& symbol = "N");

}  // namespace graphrun::passes
