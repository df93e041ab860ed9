// Pass fold_pads: the pads of a Pad computed from constants alone (torch exports ReflectionPad2d and
// F.pad's reflect and replicate modes with pads through Concat, Reshape, Slice, Transpose and Cast of
// Constants) become one Constant before the backward pass, whose edge and reflect rules need them known.
#pragma once
#include "graph/ir.h"
#include "graph/passes/fold_constants.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// For each standard Pad whose pads (or axes) input is neither an initializer nor a Constant's output but
// folds to a constant (fold_constants with `opts`'s evaluator), that input becomes a new Constant of the
// value; the nodes only it read are removed. Other Pads, and graphs without one, come back unchanged.
Graph fold_pads(const Graph& g, const FoldConstantsOptions& opts);
Pass fold_pads_pass(FoldConstantsOptions opts);

}  // namespace graphrun::passes
