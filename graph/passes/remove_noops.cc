// Pass remove_noops: zero Pads and Identities out, their readers rewired to the inputs.
#include "graph/passes/remove_noops.h"

#include <unordered_map>
#include <unordered_set>

namespace graphrun::passes {

namespace {

const PassInfo& kInfo =
    register_pass("remove_noops", "drops Identity nodes and all-zero Pads (PyTorch exports them), readers rewired");

bool all_zero(const Tensor* t) {
  if (!t || !t->defined()) return false;
  for (int64_t v : t->as_int64s())
    if (v != 0) return false;
  return true;
}

}  // namespace

bool is_identity_or_zero_pad(const Graph& g, const Node& n) {
  if (n.op_type == "Identity") return true;
  if (n.op_type != "Pad") return false;
  if (g.opset("") < 11) return n.attr_ints("pads") == std::vector<int64_t>(n.attr_ints("pads").size(), 0);
  return n.has_input(1) && all_zero(constant_of(g, n.inputs[1]));
}

namespace {

// A node remove_noops_if may drop at all: one used output (a Dropout's mask that nothing reads does not
// count), input 0 given, no graph output.
bool removable(const Graph& g, const Node& n, const std::unordered_set<std::string>& read) {
  if (!n.domain.empty() || n.outputs.empty() || n.inputs.empty() || n.inputs[0].empty()) return false;
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (!n.outputs[k].empty() && (read.count(n.outputs[k]) || g.is_output(n.outputs[k]))) return false;
  return !g.is_output(n.outputs[0]);
}

}  // namespace

const Tensor* constant_of(const Graph& g, const std::string& v) {
  auto it = g.initializers.find(v);
  if (it != g.initializers.end()) return &it->second;
  int p = g.producer(v);
  if (p < 0) return nullptr;
  const Node& n = g.nodes[p];
  if (n.domain.empty() && n.op_type == "Constant" && n.has_attr("value")) return &n.attr("value")->t;
  return nullptr;
}

void drop_unread_constants(Graph& r) {
  std::unordered_map<std::string, int> reads;
  for (const Node& n : r.nodes)
    for (const auto& in : n.inputs) ++reads[in];
  std::vector<Node> live;
  for (const Node& n : r.nodes) {
    bool dead = n.domain.empty() && n.op_type == "Constant" && n.outputs.size() == 1 && !reads.count(n.outputs[0]) &&
                !r.is_output(n.outputs[0]);
    if (dead) r.values.erase(n.outputs[0]);
    else live.push_back(n);
  }
  r.nodes = std::move(live);
}

Graph remove_noops(const Graph& g) { return remove_noops_if(g, is_identity_or_zero_pad); }

Graph remove_noops_if(const Graph& g, const std::function<bool(const Graph&, const Node&)>& is_noop) {
  Graph r = g;
  std::unordered_map<std::string, std::string> alias;
  std::vector<Node> kept;
  std::unordered_set<std::string> read;
  for (const Node& n : g.nodes)
    for (const auto& in : n.inputs) read.insert(in);
  std::vector<std::string> dropped;  // unread outputs of removed nodes beside the first (masks)
  for (const Node& n : g.nodes) {
    if (removable(g, n, read) && is_noop(g, n)) {
      auto it = alias.find(n.inputs[0]);
      alias[n.outputs[0]] = it == alias.end() ? n.inputs[0] : it->second;
      for (size_t k = 1; k < n.outputs.size(); ++k)
        if (!n.outputs[k].empty()) dropped.push_back(n.outputs[k]);
      continue;
    }
    Node m = n;
    for (auto& in : m.inputs) {
      auto it = alias.find(in);
      if (it != alias.end()) in = it->second;
    }
    kept.push_back(std::move(m));
  }
  if (alias.empty()) return r;
  r.nodes = std::move(kept);
  for (const auto& [v, _] : alias) r.values.erase(v);
  for (const auto& v : dropped) r.values.erase(v);
  // Constants only the removed Pads read are dead now.
  drop_unread_constants(r);
  return r;
}

Pass remove_noops_pass() { return make_pass(kInfo, "", remove_noops); }

}  // namespace graphrun::passes
