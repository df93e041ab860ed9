// Pass make_batch_symbolic: the batch dimension of an input becomes a symbol, so that one training
// graph serves every shard size (replicas' shards differ by one, the last batch is smaller).
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// The first dimension of input `input` (the graph's first input when empty) becomes symbolic; an input of
// unknown rank or rank 0 is left as it is. A batch that is a symbol already keeps its own ("batch" stays
// "batch"). A fixed or unknown one becomes `symbol` when given, else the symbol another input's batch already
// has, else a symbol no value of the graph uses: "N", else "N_1", "N_2", ... (a model whose sequence length
// is N gets N_1: never one of the model's own symbols). The values downstream are inferred again from it,
// so the outputs carry the same symbol. Error when the graph has no such input.
Graph make_batch_symbolic(const Graph& g, const std::string& input = "", const std::string& symbol = "");
// The pass: the batch dimension of each of `inputs` (a model may take several: tokens and a mask; fixed,
// they all get one symbol).
Pass make_batch_symbolic_pass(const std::vector<std::string>& inputs, const std::string& symbol = "");

}  // namespace graphrun::passes
