// Pass: dead-node elimination, one backward sweep over the topologically ordered nodes.
#include "graph/passes/eliminate_dead_nodes.h"

#include <unordered_set>

namespace graphrun {

namespace {
const passes::PassInfo& kInfo =
    passes::register_pass("eliminate_dead_nodes", "removes the nodes no graph output depends on");
}  // namespace

Graph eliminate_dead_nodes(const Graph& g) {
  std::unordered_set<std::string> live(g.outputs.begin(), g.outputs.end());
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    for (const auto& o : n.outputs)
      if (!o.empty() && live.count(o)) keep[i] = true;
    if (!keep[i]) continue;
    for (const auto& in : n.inputs)
      if (!in.empty()) live.insert(in);
  }
  Graph r = g;
  r.nodes.clear();
  std::unordered_set<std::string> dropped;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (keep[i]) r.nodes.push_back(g.nodes[i]);
    else
      for (const auto& o : g.nodes[i].outputs) dropped.insert(o);
  }
  for (const auto& v : dropped) r.values.erase(v);
  return r;
}

passes::Pass eliminate_dead_nodes_pass() { return passes::make_pass(kInfo, "", eliminate_dead_nodes); }

}  // namespace graphrun
