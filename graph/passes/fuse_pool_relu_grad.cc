// Pass fuse_pool_relu_grad: ReluGrad(AveragePoolGrad/MaxPoolGrad(.., X), X) -> the pooling gradient, relu = 1.
#include "graph/passes/fuse_pool_relu_grad.h"

#include <set>

#include "graph/passes/fusion.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "fuse_pool_relu_grad",
    "executor only: ai.graphrun ReluGrad(PoolGrad(dY, .., X), X) -> the AveragePoolGrad/MaxPoolGrad with relu = 1");

bool is_graphrun(const Node& n, const char* op) { return n.domain == kGraphrunDomain && n.op_type == op; }

}  // namespace

Graph fuse_pool_relu_grad(const Graph& g) {
  Graph r = g;
  const auto readers = g.consumers();
  std::set<int> drop;  // the fused ReluGrads
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& relu = g.nodes[i];
    if (!is_graphrun(relu, "ReluGrad") || relu.inputs.size() != 2 || relu.outputs.size() != 1) continue;
    const std::string& dy = relu.inputs[0];
    const int p = g.producer(dy);
    if (p < 0 || g.is_output(dy) || readers.at(dy).size() != 1) continue;
    const Node& pool = g.nodes[p];
    const bool avg = is_graphrun(pool, "AveragePoolGrad"), max = is_graphrun(pool, "MaxPoolGrad");
    if (!(avg || max) || pool.outputs.size() != 1 || pool.attr_i("relu", 0) != 0) continue;
    const size_t x_at = avg ? 1 : 2;  // (dY, X) or (dY, Indices, X)
    if (pool.inputs.size() != x_at + 1 || pool.inputs[x_at] != relu.inputs[1]) continue;
    Node& fused = r.nodes[p];
    fused.attrs["relu"] = Attribute::Int(1);
    fused.outputs[0] = relu.outputs[0];
    r.values.erase(dy);
    drop.insert(static_cast<int>(i));
  }
  return without_nodes(std::move(r), drop);
}

Pass fuse_pool_relu_grad_pass() { return make_pass(kInfo, "", fuse_pool_relu_grad); }

}  // namespace graphrun::passes
