// Pass to_inference: the evaluation form of a forward graph (running statistics, no dropout).
#include "graph/passes/train_mode.h"

#include <algorithm>

namespace graphrun::passes {

namespace {
const PassInfo& kInfo = register_pass(
    "to_inference",
    "the evaluation form: BatchNorm on running statistics, Dropout passing through, StopGradient an Identity");
}  // namespace

Graph to_inference(const Graph& g) {
  Graph r = g;
  const std::map<std::string, std::string> roots = running_stat_initializers(g);
  for (Node& n : r.nodes) {
    if (n.domain.empty() && n.op_type == "BatchNormalization") {
      if (n.has_attr("training_mode")) n.attrs["training_mode"] = Attribute::Int(0);
      n.outputs.resize(1);
      // A chain (to_training) read back from its initializers.
      for (size_t k = 3; k < n.inputs.size() && k <= 4; ++k)
        if (const auto it = roots.find(n.inputs[k]); it != roots.end()) n.inputs[k] = it->second;
    } else if (n.domain.empty() && n.op_type == "Dropout") {
      // Without training_mode (opset 12+) or with is_test semantics (earlier), Dropout passes X through.
      if (n.inputs.size() > 2) n.inputs.resize(2);
      while (n.inputs.size() > 1 && n.inputs.back().empty()) n.inputs.pop_back();
      n.outputs.resize(1);
    } else if (n.domain == kGraphrunDomain && n.op_type == "StopGradient") {
      // Only training tells it from Identity; any runtime reads an Identity.
      n = Node{n.name, "Identity", "", n.inputs, n.outputs, {}};
    }
  }
  if (r.opsets.count(kGraphrunDomain) &&
      std::none_of(r.nodes.begin(), r.nodes.end(), [](const Node& n) { return n.domain == kGraphrunDomain; }))
    r.opsets.erase(kGraphrunDomain);
  return r;
}

Pass to_inference_pass() { return make_pass(kInfo, "", to_inference); }

}  // namespace graphrun::passes
