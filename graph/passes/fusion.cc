// The fusion passes' shared test of a value a fused node may swallow (see fusion.h).
#include "graph/passes/fusion.h"

namespace graphrun::passes {

bool is_float_value(const Graph& g, const std::string& v) {
  const ValueInfo* i = g.info(v);
  return i && (i->dtype == DType::F32 || i->dtype == DType::F64);
}

SoleReader::SoleReader(const Graph& g, bool any_type) : g_(g), any_type_(any_type), readers_(g.consumers()) {
  for (const auto& [value, state] : g.state_updates) persisted_.insert(value);
}

bool SoleReader::operator()(const std::string& v, int by) const {
  const auto it = readers_.find(v);
  return it != readers_.end() && it->second.size() == 1 && it->second[0] == by && !persisted(v) &&
         (any_type_ || is_float_value(g_, v));
}

int SoleReader::reader(const std::string& v) const {
  const auto it = readers_.find(v);
  return it != readers_.end() && it->second.size() == 1 ? it->second[0] : -1;
}

bool SoleReader::persisted(const std::string& v) const { return g_.is_output(v) || persisted_.count(v); }

Graph without_nodes(Graph r, const std::set<int>& drop) {
  if (drop.empty()) return r;
  std::vector<Node> kept;
  for (size_t i = 0; i < r.nodes.size(); ++i)
    if (!drop.count(static_cast<int>(i))) kept.push_back(std::move(r.nodes[i]));
  r.nodes = std::move(kept);
  return r;
}

Graph without_fused(Graph r, const std::set<int>& drop) {
  if (drop.empty()) return r;
  r = without_nodes(std::move(r), drop);
  if (!r.opsets.count(kGraphrunDomain)) r.opsets[kGraphrunDomain] = 1;
  return r;
}

}  // namespace graphrun::passes
