// Pass to_training: the training form of a forward graph (batch statistics with running-stat
// outputs, dropout masks), and the state updates that keep the running statistics.
#include "graph/passes/train_mode.h"

#include <map>

namespace graphrun::passes {

namespace {
const PassInfo& kInfo = register_pass(
    "to_training", "the training form: BatchNorm on batch statistics (running-stat outputs), Dropout drawing masks");
}  // namespace

Graph to_training(const Graph& g) {
  Graph r = g;
  bool has_bn = false;
  std::string true_const;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    Node& n = r.nodes[i];
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization") {
      if (n.inputs.size() < 5 || !r.is_initializer(n.inputs[3]) || !r.is_initializer(n.inputs[4])) continue;
      has_bn = true;
      n.attrs["training_mode"] = Attribute::Int(1);
      n.outputs.resize(3);
      for (int k = 1; k <= 2; ++k) {
        if (!n.outputs[k].empty()) continue;
        const std::string stat = n.inputs[2 + k];
        n.outputs[k] = r.unique_name(stat + ".updated");
        const ValueInfo* vi = r.info(stat);
        r.values[n.outputs[k]] = vi ? *vi : value_info_of(r.initializers.at(stat));
      }
    } else if (n.op_type == "Dropout" && r.opset("") >= 12) {
      if (n.has_input(2)) continue;  // training_mode already given
      if (true_const.empty()) {
        true_const = r.unique_name("dropout_training_mode");
        r.initializers[true_const] = Tensor::scalar<bool>(true);
        ValueInfo v;
        v.dtype = DType::Bool;
        v.has_shape = true;
        r.values[true_const] = v;
      }
      n.inputs.resize(3);
      n.inputs[2] = true_const;
    }
  }
  if (has_bn && r.opset("") < 14) r.opsets[""] = 15;
  return r;
}

Pass to_training_pass() { return make_pass(kInfo, "", to_training); }

std::vector<std::pair<std::string, std::string>> batchnorm_state_updates(const Graph& g) {
  std::map<std::string, std::string> corrected;  // correction node -> its output
  for (const Node& n : g.nodes)
    if (n.domain.empty() && !n.outputs.empty()) corrected[n.name] = n.outputs[0];
  std::vector<std::pair<std::string, std::string>> r;
  for (const Node& n : g.nodes) {
    // The executor's graph holds some as FusedBatchNormalization (pass fuse_relu_bn_add): the same outputs.
    const bool bn = (n.domain.empty() && n.op_type == "BatchNormalization") ||
                    (n.domain == kGraphrunDomain && n.op_type == "FusedBatchNormalization");
    if (!bn || n.attr_i("training_mode", 0) != 1) continue;
    for (int k = 1; k <= 2; ++k) {
      if (!n.has_output(k) || !n.has_input(2 + k) || !g.is_initializer(n.inputs[2 + k])) continue;
      const auto c = k == 2 ? corrected.find(unbiased_running_var_node(n)) : corrected.end();
      r.emplace_back(c != corrected.end() ? c->second : n.outputs[k], n.inputs[2 + k]);
    }
  }
  return r;
}

}  // namespace graphrun::passes
