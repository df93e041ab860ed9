// Pass place_shape_computations: host placement of a device graph's shape computations, from the op
// table's host facts (host_shapes, metadata_only, host_inputs).
#include "graph/passes/place_shape_computations.h"

#include <unordered_map>
#include <utility>

#include "graph/op_table.h"

namespace graphrun::passes {

namespace {

// Larger values are not shape computations; copying them to the device once is cheaper than keeping them.
constexpr int64_t kMaxHostElems = 4096;

bool small_int(const Tensor& t) {
  return (t.dtype() == DType::I64 || t.dtype() == DType::I32) && t.numel() <= kMaxHostElems;
}

// A node that may run on the host: a host_shapes op with a CPU kernel; a Constant only with a small integer value.
bool host_candidate(const Node& node, const OpFacts* f) {
  if (!f || !f->host_shapes || !f->kernel(Device::Kind::CPU)) return false;
  if (node.op_type != "Constant") return true;
  auto it = node.attrs.find("value");
  if (it != node.attrs.end()) return it->second.kind == Attribute::Kind::Tensor && small_int(it->second.t);
  return node.has_attr("value_int") || node.has_attr("value_ints");
}

}  // namespace

HostPlacement place_shape_computations(const Graph& g, const std::set<std::string>& pinned) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<const OpFacts*> facts(n);
  std::unordered_map<std::string, int> producer;
  std::unordered_map<std::string, std::vector<std::pair<int, int>>> consumers;  // (node, input position)
  for (int s = 0; s < n; ++s) {
    const Node& node = g.nodes[s];
    facts[s] = op_table().find(node);
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (!node.inputs[k].empty()) consumers[node.inputs[k]].emplace_back(s, static_cast<int>(k));
    for (const auto& o : node.outputs)
      if (!o.empty()) producer[o] = s;
  }

  HostPlacement p;
  p.host_nodes.assign(n, false);
  for (int s = 0; s < n; ++s) p.host_nodes[s] = host_candidate(g.nodes[s], facts[s]);
  std::unordered_map<std::string, bool> host;  // candidate values -> still on the host
  for (const auto& [name, t] : g.initializers) host[name] = small_int(t);
  for (const auto& [v, s] : producer) host[v] = p.host_nodes[s];

  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [v, on_host] : host) {
      if (!on_host) continue;
      auto def = producer.find(v);
      bool ok = !pinned.count(v) && (def == producer.end() || p.host_nodes[def->second]);
      if (auto c = consumers.find(v); c != consumers.end())
        for (auto [s, k] : c->second) ok = ok && (p.host_nodes[s] || (facts[s] && facts[s]->reads_on_host(k)));
      if (!ok) on_host = false, changed = true;
    }
    for (int s = 0; s < n; ++s) {
      if (!p.host_nodes[s]) continue;
      const Node& node = g.nodes[s];
      bool ok = true;
      for (const auto& o : node.outputs) ok = ok && (o.empty() || host[o]);
      if (!facts[s]->metadata_only)
        for (const auto& in : node.inputs) ok = ok && (in.empty() || (host.count(in) && host[in]));
      if (!ok) p.host_nodes[s] = false, changed = true;
    }
  }
  for (const auto& [v, on_host] : host)
    if (on_host) p.host_values.insert(v);
  return p;
}

}  // namespace graphrun::passes
