// Pass fold_pads: Pad's constant-computed pads folded into a Constant (see the header).
#include "graph/passes/fold_pads.h"

#include "graph/onnx_io.h"
#include "graph/passes/eliminate_dead_nodes.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "fold_pads", "a Pad's pads (and axes) computed from constants alone become a Constant: the edge and "
                 "reflect gradients need them known (torch's ReflectionPad2d)");

bool is_constant(const Graph& g, const std::string& v) {
  if (v.empty() || g.initializers.count(v)) return true;
  const int p = g.producer(v);
  return p >= 0 && g.nodes[p].op_type == "Constant" && g.nodes[p].domain.empty();
}

}  // namespace

Graph fold_pads(const Graph& g, const FoldConstantsOptions& opts) {
  auto computed = [&](const Node& n, size_t k) {
    return n.domain.empty() && n.op_type == "Pad" && k < n.inputs.size() && !n.inputs[k].empty() &&
           !g.is_input(n.inputs[k]) && !is_constant(g, n.inputs[k]);
  };
  bool any = false;
  for (const Node& n : g.nodes) any = any || computed(n, 1) || computed(n, 3);
  if (!any) return g;
  const Graph folded = fold_constants(g, opts);
  Graph r = g;
  std::vector<Node> nodes;
  bool changed = false;
  for (const Node& n : g.nodes) {
    Node m = n;
    for (size_t k : {size_t{1}, size_t{3}}) {
      if (!computed(n, k)) continue;
      const std::string& v = n.inputs[k];
      const int p = folded.producer(v);
      const Attribute* value = p >= 0 && folded.nodes[p].op_type == "Constant" ? folded.nodes[p].attr("value") : nullptr;
      if (!value) continue;  // not computed from constants alone: the rule says what it needs
      Node c;
      c.name = r.unique_name(v + "_folded");
      c.op_type = "Constant";
      c.outputs = {c.name};
      c.attrs["value"] = *value;
      r.values[c.name] = value_info_of(value->t);
      m.inputs[k] = c.name;
      nodes.push_back(std::move(c));
      changed = true;
    }
    nodes.push_back(std::move(m));
  }
  if (!changed) return g;
  r.nodes = std::move(nodes);
  r = eliminate_dead_nodes(r);
  reinfer_shapes(r);  // the Pads' outputs, and what follows them, have sizes now
  return r;
}

Pass fold_pads_pass(FoldConstantsOptions opts) {
  return make_pass(kInfo, "", [opts](const Graph& g) { return fold_pads(g, opts); });
}

}  // namespace graphrun::passes
