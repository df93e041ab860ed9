#include "graph/passes/fake_quantize.h"

#include <set>

#include "graph/passes/remove_noops.h"

namespace graphrun::passes {
namespace {

const PassInfo& kInfo = register_pass(
    "fake_quantize", "Q/DQ pairs as FakeQuantize nodes, whose gradient passes straight through (PyTorch's QAT)");

bool same_attr(const Node& a, const Node& b, const char* name) {
  const Attribute *x = a.attr(name), *y = b.attr(name);
  return x && y ? x->i == y->i : x == y;
}

// The one integer of an initializer or a Constant node's value; false when `v` is neither or holds more.
bool constant_int(const Graph& g, const std::string& v, int64_t* out) {
  const Tensor* t = constant_of(g, v);
  if (!t || t->numel() != 1 || t->dtype() == DType::F32 || t->dtype() == DType::F64) return false;
  *out = t->as_int64s()[0];
  return true;
}

}  // namespace

Graph fake_quantize(const Graph& graph) {
  Graph g = graph;
  const auto readers = g.consumers();
  std::set<size_t> dropped;
  std::vector<Node> nodes;
  std::map<size_t, Node> replaced;  // DequantizeLinear index -> its FakeQuantize
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& q = g.nodes[i];
    if (q.op_type != "QuantizeLinear" || !q.domain.empty() || q.inputs.size() < 2 || !q.has_output(0)) continue;
    const ValueInfo* xi = g.info(q.inputs[0]);
    if (!xi || (xi->dtype != DType::F32 && xi->dtype != DType::F64) || g.is_output(q.outputs[0])) continue;
    auto it = readers.find(q.outputs[0]);
    if (it == readers.end() || it->second.empty()) continue;
    // torch narrows a range smaller than the type's (reduce_range: 0 to 127) with a Clip between the two.
    std::string mid = q.outputs[0];
    int clip = -1;
    int64_t lo = 0, hi = 0;
    bool has_lo = false, has_hi = false;
    if (it->second.size() == 1) {
      const Node& c = g.nodes[static_cast<size_t>(it->second[0])];
      if (c.op_type == "Clip" && c.domain.empty() && c.has_output(0) && !g.is_output(c.outputs[0])) {
        has_lo = c.has_input(1);
        has_hi = c.has_input(2);
        if ((has_lo && !constant_int(g, c.inputs[1], &lo)) || (has_hi && !constant_int(g, c.inputs[2], &hi))) continue;
        clip = it->second[0];
        mid = c.outputs[0];
        it = readers.find(mid);
        if (it == readers.end() || it->second.empty()) continue;
      }
    }
    bool pairs = true;
    for (int r : it->second) {
      const Node& dq = g.nodes[static_cast<size_t>(r)];
      pairs = pairs && dq.op_type == "DequantizeLinear" && dq.domain.empty() && dq.inputs.size() >= 2 &&
              dq.inputs[0] == mid && dq.inputs[1] == q.inputs[1] &&
              (dq.has_input(2) ? dq.inputs[2] : "") == (q.has_input(2) ? q.inputs[2] : "") && same_attr(q, dq, "axis") &&
              (!g.info(dq.inputs[1]) || g.info(dq.inputs[1])->dtype == xi->dtype);
    }
    if (!pairs) continue;
    dropped.insert(i);
    if (clip >= 0) {
      dropped.insert(static_cast<size_t>(clip));
      g.values.erase(mid);
    }
    for (int r : it->second) {
      const Node& dq = g.nodes[static_cast<size_t>(r)];
      Node f;
      f.name = g.unique_name((dq.name.empty() ? dq.outputs[0] : dq.name) + "/fake_quantize");
      f.op_type = "FakeQuantize";
      f.domain = kGraphrunDomain;
      f.inputs = {q.inputs[0], q.inputs[1]};
      if (q.has_input(2)) f.inputs.push_back(q.inputs[2]);
      f.outputs = {dq.outputs[0]};
      if (const Attribute* a = q.attr("axis")) f.attrs["axis"] = *a;
      if (has_lo) f.attrs["quant_min"] = Attribute::Int(lo);
      if (has_hi) f.attrs["quant_max"] = Attribute::Int(hi);
      replaced[static_cast<size_t>(r)] = f;
    }
    g.values.erase(q.outputs[0]);
  }
  if (dropped.empty()) return g;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dropped.count(i)) continue;
    auto r = replaced.find(i);
    nodes.push_back(r == replaced.end() ? g.nodes[i] : r->second);
  }
  g.nodes = std::move(nodes);
  g.opsets[kGraphrunDomain] = 1;
  return g;
}

Pass fake_quantize_pass() { return make_pass(kInfo, "", fake_quantize); }

}  // namespace graphrun::passes
