// Pass unbiased_running_var: PyTorch's running variance in training, with visible nodes after each
// training-mode BatchNormalization (whose standard running_var output keeps ONNX's biased meaning).
#include "graph/passes/train_mode.h"

#include <utility>

namespace graphrun::passes {

std::string unbiased_running_var_node(const Node& bn) {
  return (bn.name.empty() ? "batchnorm" : bn.name) + "/unbiased_running_var";
}

namespace {

const PassInfo& kInfo = register_pass(
    "unbiased_running_var", "BatchNorm's running variance as PyTorch keeps it: the batch variance times n/(n-1)");

// The correction of one BatchNormalization, emitted into `out`; the node names derive from the BN's.
// With r the running variance, m the momentum and r_b = m*r + (1-m)*var_b the op's running_var output,
// PyTorch's is m*r + (r_b - m*r) * n/max(n-1, 1), n the elements per channel (per activation for
// spatial=0): Size(X) / Size(r), known only at run time when the batch is symbolic.
std::string correct(Graph& g, const Node& bn, const Tensor& running_var, std::vector<Node>& out) {
  const std::string base = unbiased_running_var_node(bn);
  const DType dt = running_var.dtype();
  const auto op = [&](const char* type, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.op_type = type;
    n.name = g.unique_name(base + "/" + type);
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    n.outputs = {g.unique_name(n.name + "_output_0")};
    out.push_back(n);
    return out.back().outputs[0];
  };
  const auto to_dt = [&](const std::string& v) { return op("Cast", {v}, {{"to", Attribute::Int(static_cast<int64_t>(dt))}}); };
  // Constant nodes, not initializers: float initializers would count as parameters.
  const auto constant = [&](const char* what, float v) {
    const std::string c = op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<float>(v))}});
    out.back().name = g.unique_name(base + "/" + what);
    return dt == DType::F32 ? c : to_dt(c);
  };
  const std::string& var = bn.inputs[4];
  // n from Shape and Gather (which every backend has), the dims of X but the channel's multiplied.
  const ValueInfo* xi = g.info(bn.inputs[0]);
  std::string n;
  if (xi && xi->has_shape && running_var.rank() == 1) {
    const std::string dims = to_dt(op("Shape", {bn.inputs[0]}));
    for (size_t axis = 0; axis < xi->shape.size(); ++axis) {
      if (axis == 1) continue;
      const std::string index = op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(int64_t(axis)))}});
      const std::string d = op("Gather", {dims, index});
      n = n.empty() ? d : op("Mul", {n, d});
    }
  } else {
    n = to_dt(op("Div", {op("Size", {bn.inputs[0]}), op("Size", {var})}));
  }
  const std::string one = constant("one", 1.f), mom = constant("momentum", bn.attr_f("momentum", 0.9f));
  const std::string ratio = op("Div", {n, op("Max", {op("Sub", {n, one}), one})});
  const std::string kept = op("Mul", {var, mom});
  const std::string r = op("Add", {kept, op("Mul", {op("Sub", {bn.outputs[2], kept}), ratio})});
  out.back().name = g.unique_name(base);  // batchnorm_state_updates finds the correction by this name
  return r;
}

}  // namespace

Graph unbiased_running_var(const Graph& graph) {
  Graph g = graph;
  std::vector<Node> nodes;
  const std::map<std::string, std::string> roots = running_stat_initializers(graph);
  std::map<std::string, std::string> unbiased;  // a node's running_var output -> its correction
  for (const Node& node : graph.nodes) {
    nodes.push_back(node);
    Node& n = nodes.back();
    if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.attr_i("training_mode", 0) != 1) continue;
    if (!n.has_output(2) || !n.has_input(4) || !roots.count(n.inputs[4])) continue;
    // In a chain (to_training), from the corrected variance the one before it left.
    if (const auto it = unbiased.find(n.inputs[4]); it != unbiased.end()) n.inputs[4] = it->second;
    const Tensor& running_var = g.initializers.at(roots.at(node.inputs[4]));
    const Node bn = n;  // (correct appends to nodes)
    const std::string r = correct(g, bn, running_var, nodes);
    unbiased[bn.outputs[2]] = r;
    ValueInfo vi = value_info_of(running_var);
    g.values[r] = vi;
    // An output, so that no pass drops the update for reaching no other output.
    g.outputs.push_back(r);
  }
  g.nodes = std::move(nodes);
  return g;
}

Pass unbiased_running_var_pass() { return make_pass(kInfo, "", unbiased_running_var); }

}  // namespace graphrun::passes
