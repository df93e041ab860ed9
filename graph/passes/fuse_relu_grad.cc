// Pass fuse_relu_grad: Greater + Where of the Relu gradient -> ai.graphrun ReluGrad.
#include "graph/passes/fuse_relu_grad.h"

#include <set>

#include "graph/passes/remove_noops.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "fuse_relu_grad", "executor only: Where(Greater(Y, 0), dY, 0) of a Relu's output Y -> ai.graphrun ReluGrad(dY, Y)");

bool is_zero_scalar(const Graph& g, const std::string& v) {
  const Tensor* t = constant_of(g, v);
  return t && t->defined() && t->numel() == 1 && t->as_doubles().at(0) == 0;
}

bool is_op(const Node& n, const char* op, size_t inputs) {
  return n.domain.empty() && n.op_type == op && n.inputs.size() == inputs && n.outputs.size() == 1;
}

}  // namespace

Graph fuse_relu_grad(const Graph& g) {
  Graph r = g;
  const auto readers = g.consumers();
  std::set<int> drop;  // Greaters only a fused Where read
  int fused = 0;
  for (Node& w : r.nodes) {
    if (!is_op(w, "Where", 3) || !is_zero_scalar(g, w.inputs[2]) || g.is_output(w.inputs[0])) continue;
    const int p = g.producer(w.inputs[0]);
    if (p < 0 || !is_op(g.nodes[p], "Greater", 2) || !is_zero_scalar(g, g.nodes[p].inputs[1])) continue;
    const std::string& y = g.nodes[p].inputs[0];
    const int relu = g.producer(y);
    if (relu < 0 || !is_op(g.nodes[relu], "Relu", 1)) continue;
    if (readers.at(w.inputs[0]).size() == 1) drop.insert(p);
    w.op_type = "ReluGrad";
    w.domain = kGraphrunDomain;
    w.inputs = {w.inputs[1], y};
    ++fused;
  }
  if (!fused) return r;
  std::vector<Node> kept;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    if (drop.count(static_cast<int>(i))) r.values.erase(r.nodes[i].outputs[0]);
    else kept.push_back(std::move(r.nodes[i]));
  }
  r.nodes = std::move(kept);
  if (!r.opsets.count(kGraphrunDomain)) r.opsets[kGraphrunDomain] = 1;
  drop_unread_constants(r);
  return r;
}

Pass fuse_relu_grad_pass() { return make_pass(kInfo, "", fuse_relu_grad); }

}  // namespace graphrun::passes
