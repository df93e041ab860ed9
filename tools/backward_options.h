// The options `grad` and `show --backward` share (--loss, --freeze, --loss-output) and the graph they
// describe: the model with its loss attached and its backward graph built.
#pragma once
#include <vector>

#include "autodiff/autodiff.h"
#include "graph/ir.h"
#include "tools/cli.h"

namespace graphrun::cli {

std::vector<Option> backward_options();

struct BackwardRequest {
  autodiff::LossOptions loss;
  autodiff::BackwardOptions backward;
};
// Reads the options (before any file is loaded); bad values are usage errors (exit 2).
BackwardRequest parse_backward_options(const Args& args);
// attach_loss + backward as requested.
Graph build_backward_graph(const Graph& model, const BackwardRequest& req);

}  // namespace graphrun::cli
