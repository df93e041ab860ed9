// Pass to_training: the training form of a forward graph (batch statistics with running-stat
// outputs, dropout masks), and the state updates that keep the running statistics.
#include "graph/passes/train_mode.h"

#include <map>
#include <string>
#include <unordered_map>

namespace graphrun::passes {

namespace {
const PassInfo& kInfo = register_pass(
    "to_training",
    "the training form: BatchNorm on batch statistics (running-stat outputs; nodes sharing them chained), Dropout "
    "drawing masks");
}  // namespace

Graph to_training(const Graph& g) {
  Graph r = g;
  bool has_bn = false;
  std::string true_const;
  const std::unordered_map<std::string, int> producer = g.producers();
  // The initializer `v` is, through Identity nodes (remove_noops drops them later in the pipeline, but a Gradient
  // node is expanded in the training form before it runs), or `v`.
  auto behind_identities = [&](const std::string& v) {
    const std::string root = identity_chain(g, v, producer).back();
    return g.is_initializer(root) ? root : std::string();
  };
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    Node& n = r.nodes[i];
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization") {
      if (n.inputs.size() < 5) continue;
      const std::string mean = behind_identities(n.inputs[3]), var = behind_identities(n.inputs[4]);
      if (mean.empty() || var.empty()) continue;
      n.inputs[3] = mean;
      n.inputs[4] = var;
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
  // The chains: each node reads what the one before it left of the statistic.
  const std::map<std::string, std::string> roots = running_stat_initializers(r);
  std::map<std::string, std::string> latest;  // initializer -> the value holding it after the nodes so far
  for (Node& n : r.nodes) {
    if (!is_batchnorm(n) || n.attr_i("training_mode", 0) != 1) continue;
    for (int k = 1; k <= 2; ++k) {
      if (!n.has_input(2 + k)) continue;
      const auto root = roots.find(n.inputs[2 + k]);
      if (root == roots.end()) continue;
      const auto it = latest.find(root->second);
      if (it != latest.end()) n.inputs[2 + k] = it->second;
      if (n.has_output(k)) latest[root->second] = n.outputs[k];
    }
  }
  return r;
}

Pass to_training_pass() { return make_pass(kInfo, "", to_training); }

std::vector<std::string> identity_chain(const Graph& g, const std::string& v,
                                        const std::unordered_map<std::string, int>& producers) {
  std::vector<std::string> chain{v};
  for (auto it = producers.find(v); it != producers.end(); it = producers.find(chain.back())) {
    const Node& p = g.nodes[static_cast<size_t>(it->second)];
    if (!p.domain.empty() || p.op_type != "Identity" || p.inputs.size() != 1) break;
    chain.push_back(p.inputs[0]);
  }
  return chain;
}

bool is_batchnorm(const Node& n) {
  // The executor's graph holds some as FusedBatchNormalization (pass fuse_relu_bn_add): the same inputs and outputs.
  return (n.domain.empty() && n.op_type == "BatchNormalization") ||
         (n.domain == kGraphrunDomain && n.op_type == "FusedBatchNormalization");
}

namespace {
// The output of each correction node (unbiased_running_var) by its name.
std::map<std::string, std::string> corrections(const Graph& g) {
  std::map<std::string, std::string> corrected;
  for (const Node& n : g.nodes)
    if (n.domain.empty() && !n.outputs.empty()) corrected[n.name] = n.outputs[0];
  return corrected;
}

// running_stat_initializers, given corrections(g).
std::map<std::string, std::string> roots_of(const Graph& g, const std::map<std::string, std::string>& corrected) {
  std::map<std::string, std::string> root;
  for (const Node& n : g.nodes) {
    if (!is_batchnorm(n)) continue;
    for (int k = 1; k <= 2; ++k) {
      if (!n.has_input(2 + k)) continue;
      const std::string& in = n.inputs[2 + k];
      const auto known = root.find(in);
      const std::string r = g.is_initializer(in) ? in : known != root.end() ? known->second : "";
      if (r.empty()) continue;
      root[in] = r;
      if (n.attr_i("training_mode", 0) != 1 || !n.has_output(k)) continue;
      root[n.outputs[k]] = r;
      const auto c = k == 2 ? corrected.find(unbiased_running_var_node(n)) : corrected.end();
      if (c != corrected.end()) root[c->second] = r;
    }
  }
  return root;
}
}  // namespace

std::map<std::string, std::string> running_stat_initializers(const Graph& g) { return roots_of(g, corrections(g)); }

std::vector<std::pair<std::string, std::string>> batchnorm_state_updates(const Graph& g) {
  const std::map<std::string, std::string> corrected = corrections(g);
  const std::map<std::string, std::string> roots = roots_of(g, corrected);
  std::vector<std::pair<std::string, std::string>> r;
  std::map<std::string, size_t> at;  // initializer -> its pair in r
  for (const Node& n : g.nodes) {
    if (!is_batchnorm(n) || n.attr_i("training_mode", 0) != 1) continue;
    for (int k = 1; k <= 2; ++k) {
      if (!n.has_output(k) || !n.has_input(2 + k) || !roots.count(n.inputs[2 + k])) continue;
      const auto c = k == 2 ? corrected.find(unbiased_running_var_node(n)) : corrected.end();
      const std::string& value = c != corrected.end() ? c->second : n.outputs[k];
      const std::string& init = roots.at(n.inputs[2 + k]);
      // A later node of a chain: its value is the one to persist.
      if (const auto it = at.find(init); it != at.end()) {
        r[it->second].first = value;
      } else {
        at[init] = r.size();
        r.emplace_back(value, init);
      }
    }
  }
  return r;
}

}  // namespace graphrun::passes
