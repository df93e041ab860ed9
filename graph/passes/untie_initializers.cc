// Identity nodes of float initializers, and running statistics read in another role too, become initializers of
// their own (see the header).
#include "graph/passes/untie_initializers.h"

#include <map>
#include <set>
#include <string>
#include <utility>

namespace graphrun::passes {

std::vector<std::pair<std::string, std::string>> untie_initializers(Graph& g) {
  std::vector<std::pair<std::string, std::string>> untied;
  // An initializer one Identity alone reads is tied to nothing: its Identity stays (remove_noops drops it).
  std::map<std::string, int> readers;
  for (const Node& n : g.nodes)
    for (const std::string& in : n.inputs) ++readers[in];
  for (const std::string& out : g.outputs) ++readers[out];
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  // In graph order, so that an Identity of an Identity of an initializer is untied too.
  for (Node& n : g.nodes) {
    const bool of_float_initializer = n.domain.empty() && n.op_type == "Identity" && n.inputs.size() == 1 &&
                                      n.outputs.size() == 1 && g.is_initializer(n.inputs[0]) &&
                                      dtype_is_float(g.initializers.at(n.inputs[0]).dtype());
    if (!of_float_initializer || n.outputs[0].empty() || g.is_output(n.outputs[0]) || g.is_initializer(n.outputs[0]) ||
        readers[n.inputs[0]] < 2) {
      kept.push_back(std::move(n));
      continue;
    }
    const std::string &from = n.inputs[0], &name = n.outputs[0];
    g.initializers[name] = g.initializers.at(from).clone();  // (a buffer of its own: each trains apart)
    if (!g.info(name)) g.values[name] = value_info_of(g.initializers.at(name));
    untied.emplace_back(name, from);
  }
  g.nodes = std::move(kept);

  // A BatchNormalization's running statistic that is also read in another role (an exporter that merges equal
  // initializers without an Identity: a fresh scale and running_var, both ones): a copy of its own for the statistic.
  // (BatchNormalizations that read one statistic share its copy: to_training chains them.)
  std::map<std::string, std::set<std::pair<std::string, size_t>>> roles;  // initializer -> (op, input slot)
  for (const Node& n : g.nodes)
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (g.is_initializer(n.inputs[k])) roles[n.inputs[k]].insert({n.op_type, k});
  std::map<std::pair<std::string, size_t>, std::string> copies;  // (initializer, slot) -> its copy
  for (Node& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "BatchNormalization") continue;
    for (size_t k = 3; k <= 4 && k < n.inputs.size(); ++k) {
      const std::string from = n.inputs[k];
      if (!g.is_initializer(from) || !dtype_is_float(g.initializers.at(from).dtype()) || roles[from].size() < 2)
        continue;
      std::string& name = copies[{from, k}];
      if (name.empty()) {
        name = g.unique_name((n.name.empty() ? "batchnorm" : n.name) + (k == 3 ? ".running_mean" : ".running_var"));
        g.initializers[name] = g.initializers.at(from).clone();
        g.values[name] = value_info_of(g.initializers.at(name));
        untied.emplace_back(name, from);
      }
      n.inputs[k] = name;
    }
  }
  return untied;
}

}  // namespace graphrun::passes
