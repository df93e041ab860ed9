// Identity nodes of float initializers become initializers of their own (see the header).
#include "graph/passes/untie_initializers.h"

#include <map>
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
  return untied;
}

}  // namespace graphrun::passes
