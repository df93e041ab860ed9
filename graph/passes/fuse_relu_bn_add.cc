// Pass fuse_relu_bn_add: Relu of a BatchNormalization or of an Add -> ai.graphrun FusedBatchNormalization /
// FusedAdd, whose kernels apply the Relu to each value as they store it; and in the backward pass the Relu's
// gradient feeding BatchNormalization's -> FusedBatchNormalizationGrad, which masks dY as it reads it.
#include "graph/passes/fuse_relu_bn_add.h"

#include <set>

#include "graph/passes/fusion.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "fuse_relu_bn_add",
    "executor only: Relu(BatchNormalization), Relu(Add) -> ai.graphrun FusedBatchNormalization/FusedAdd "
    "activation=Relu; BatchNormalizationGrad(ReluGrad) -> FusedBatchNormalizationGrad");

}  // namespace

Graph fuse_relu_bn_add(const Graph& g) {
  const SoleReader only_for(g);
  Graph r = g;
  std::set<int> drop;  // the fused Relus and ReluGrads
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& relu = g.nodes[i];
    // Backward: BatchNormalizationGrad(ReluGrad(dY, Y), X, scale) -> FusedBatchNormalizationGrad(dY, Y, X, scale),
    // in the BatchNormalizationGrad's place (dY and Y exist before the ReluGrad did).
    if (relu.domain == kGraphrunDomain && relu.op_type == "ReluGrad" && relu.inputs.size() == 2 &&
        relu.outputs.size() == 1) {
      const int q = only_for.reader(relu.outputs[0]);
      if (q < 0) continue;
      const Node& bng = g.nodes[q];
      if (bng.domain != kGraphrunDomain || bng.op_type != "BatchNormalizationGrad" || bng.inputs.size() != 3 ||
          bng.inputs[0] != relu.outputs[0] || !only_for(relu.outputs[0], q) || !is_float_value(g, relu.inputs[1]))
        continue;
      Node fused = bng;
      fused.op_type = "FusedBatchNormalizationGrad";
      fused.attrs["activation"] = Attribute::Str("Relu");
      fused.inputs = {relu.inputs[0], relu.inputs[1], bng.inputs[1], bng.inputs[2]};
      r.values.erase(relu.outputs[0]);
      r.nodes[q] = std::move(fused);
      drop.insert(i);
      continue;
    }
    if (!relu.domain.empty() || relu.op_type != "Relu" || relu.inputs.size() != 1 || relu.outputs.size() != 1) continue;
    const int p = g.producer(relu.inputs[0]);
    if (p < 0 || !only_for(relu.inputs[0], i)) continue;
    const Node& prod = g.nodes[p];
    if (!prod.domain.empty() || prod.outputs.empty() || prod.outputs[0] != relu.inputs[0]) continue;
    const bool bn = prod.op_type == "BatchNormalization";
    if (!bn && !(prod.op_type == "Add" && prod.inputs.size() == 2 && prod.outputs.size() == 1)) continue;
    Node fused = prod;
    fused.op_type = bn ? "FusedBatchNormalization" : "FusedAdd";
    fused.domain = kGraphrunDomain;
    fused.attrs["activation"] = Attribute::Str("Relu");
    fused.outputs[0] = relu.outputs[0];
    r.values.erase(prod.outputs[0]);
    r.nodes[p] = std::move(fused);
    drop.insert(i);
  }
  return without_fused(std::move(r), drop);
}

Pass fuse_relu_bn_add_pass() { return make_pass(kInfo, "", fuse_relu_bn_add); }

}  // namespace graphrun::passes
