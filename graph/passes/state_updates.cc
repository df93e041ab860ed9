// Pass state_updates: the persisted state listed and made graph outputs, the gradients dropped from them.
#include "graph/passes/state_updates.h"

#include <algorithm>
#include <set>

#include "graph/passes/train_mode.h"

namespace graphrun::passes {

namespace {
const PassInfo& kInfo = register_pass(
    "state_updates", "what a step persists (parameters, buffers, BatchNorm statistics) becomes the outputs");
}  // namespace

Graph state_updates(const Graph& g) {
  Graph r = g;
  for (const auto& u : batchnorm_state_updates(r)) r.state_updates.push_back(u);
  std::set<std::string> reduced;
  for (const Node& n : r.nodes)
    if (n.domain == kGraphrunDomain && n.op_type == "AllReduce") reduced.insert(n.inputs.begin(), n.inputs.end());
  std::vector<std::string> outputs;
  for (const auto& o : g.outputs)
    if (!reduced.count(o)) outputs.push_back(o);
  for (const auto& [v, _] : r.state_updates)
    if (std::find(outputs.begin(), outputs.end(), v) == outputs.end()) outputs.push_back(v);
  r.outputs = outputs;
  return r;
}

Pass state_updates_pass() { return make_pass(kInfo, "", state_updates); }

}  // namespace graphrun::passes
