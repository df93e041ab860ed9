// Pass: removes the nodes no graph output depends on (and the value infos only they produced).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun {

// A node stays when any of its outputs is a graph output or read by a node that stays. Initializers
// and inputs are kept as they are (they are the model's parameters and interface).
Graph eliminate_dead_nodes(const Graph& g);
passes::Pass eliminate_dead_nodes_pass();

}  // namespace graphrun
