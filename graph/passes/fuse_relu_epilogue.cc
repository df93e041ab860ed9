// Pass fuse_relu_epilogue: Relu of a Conv, Gemm or MatMul + bias -> ai.graphrun FusedConv / FusedGemm /
// FusedMatMul, whose kernels apply the Relu to each output block right after computing it.
#include "graph/passes/fuse_relu_epilogue.h"

#include <set>

#include "graph/passes/fusion.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "fuse_relu_epilogue",
    "executor only: Relu(Conv), Relu(Gemm), Relu(MatMul + bias) -> ai.graphrun FusedConv/FusedGemm/FusedMatMul "
    "activation=Relu");

bool is_op(const Node& n, const char* op, size_t inputs) {
  return n.domain.empty() && n.op_type == op && n.inputs.size() == inputs && n.outputs.size() == 1;
}

const std::vector<Dim>* shape_of(const Graph& g, const std::string& v) {
  const ValueInfo* i = g.info(v);
  return i && i->has_shape ? &i->shape : nullptr;
}

// MatMul(A, B) + bias is the product with a bias added to each row: A [..., M, K], B [K, N], bias N
// values along the last axis, and the sum has the product's shape.
bool is_row_bias_matmul(const Graph& g, const Node& mm, const std::string& bias, const std::string& sum) {
  const auto *a = shape_of(g, mm.inputs[0]), *b = shape_of(g, mm.inputs[1]), *c = shape_of(g, bias);
  const auto *y = shape_of(g, mm.outputs[0]), *s = shape_of(g, sum);
  if (!a || !b || !c || !y || !s || a->size() < 2 || b->size() != 2 || c->empty() || c->size() > a->size()) return false;
  if (!b->back().known() || !(c->back() == b->back()) || !(*y == *s) || !is_float_value(g, bias)) return false;
  for (size_t i = 0; i + 1 < c->size(); ++i)
    if (!((*c)[i] == Dim(1))) return false;
  return true;
}

}  // namespace

Graph fuse_relu_epilogue(const Graph& g) {
  const SoleReader only_for(g);
  Graph r = g;
  std::set<int> drop;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& relu = g.nodes[i];
    if (!is_op(relu, "Relu", 1)) continue;
    const int p = g.producer(relu.inputs[0]);
    if (p < 0 || !only_for(relu.inputs[0], i)) continue;
    const Node& prod = g.nodes[p];
    // The fused node takes the Relu's place: every input it reads is defined by then.
    Node fused;
    std::vector<int> gone{p};
    if (prod.domain.empty() && (prod.op_type == "Conv" || prod.op_type == "Gemm") && prod.outputs.size() == 1) {
      fused = prod;
      fused.op_type = "Fused" + prod.op_type;
    } else if (is_op(prod, "Add", 2)) {
      for (int side = 0; side < 2 && fused.op_type.empty(); ++side) {
        const int q = g.producer(prod.inputs[side]);
        if (q < 0 || !is_op(g.nodes[q], "MatMul", 2) || !only_for(prod.inputs[side], p) ||
            !is_row_bias_matmul(g, g.nodes[q], prod.inputs[1 - side], prod.outputs[0]))
          continue;
        fused = g.nodes[q];
        fused.op_type = "FusedMatMul";
        fused.inputs.push_back(prod.inputs[1 - side]);
        gone.push_back(q);
      }
      if (fused.op_type.empty()) continue;
    } else {
      continue;
    }
    fused.domain = kGraphrunDomain;
    fused.attrs["activation"] = Attribute::Str("Relu");
    fused.outputs = relu.outputs;
    for (int k : gone) {
      r.values.erase(g.nodes[k].outputs[0]);
      drop.insert(k);
    }
    r.nodes[i] = std::move(fused);
  }
  return without_fused(std::move(r), drop);
}

Pass fuse_relu_epilogue_pass() { return make_pass(kInfo, "", fuse_relu_epilogue); }

}  // namespace graphrun::passes
