// Pass remove_internal_noops: on the executor's graph only, drops what remove_noops leaves for the
// exported graphs to keep: Dropout that passes X through, Cast to X's own type, Reshape to X's shape.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Also Identity and all-zero Pads (remove_noops). A node stays when its output is a graph output, when
// it has a second output someone reads (Dropout's mask), or when what it does depends on a value the
// graph computes or a type or shape the graph does not record (nothing is guessed).
Graph remove_internal_noops(const Graph& g);
Pass remove_internal_noops_pass();

}  // namespace graphrun::passes
