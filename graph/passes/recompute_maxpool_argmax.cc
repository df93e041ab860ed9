// Pass recompute_maxpool_argmax: MaxPool's Indices dropped where only MaxPoolGrad reads them (2x2 windows).
#include "graph/passes/recompute_maxpool_argmax.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "recompute_maxpool_argmax",
    "executor only: MaxPool (2x2, stride 2) writes no Indices when only ai.graphrun MaxPoolGrad reads them; the "
    "gradient finds the argmax again in X");

bool ints_are(const Node& n, const char* name, int64_t v, bool absent_ok) {
  if (!n.has_attr(name)) return absent_ok;
  for (int64_t x : n.attr_ints(name))
    if (x != v) return false;
  return true;
}

// MaxPool windows the gradient can find again: 2x2, stride 2, inside the input (no pads, no ceil).
bool plain_2x2(const Node& m) {
  if (!m.has_attr("kernel_shape") || m.attr_ints("kernel_shape") != std::vector<int64_t>{2, 2}) return false;
  if (!m.has_attr("strides") || m.attr_ints("strides") != std::vector<int64_t>{2, 2}) return false;
  const std::string pad = m.attr_s("auto_pad", "NOTSET");
  return (pad == "NOTSET" || pad == "VALID") && ints_are(m, "pads", 0, true) && ints_are(m, "dilations", 1, true) &&
         m.attr_i("ceil_mode", 0) == 0 && m.attr_i("storage_order", 0) == 0;
}

}  // namespace

Graph recompute_maxpool_argmax(const Graph& g) {
  Graph r = g;
  const auto readers = g.consumers();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& m = g.nodes[i];
    if (!m.domain.empty() || m.op_type != "MaxPool" || m.inputs.empty() || m.outputs.size() != 2) continue;
    const std::string& ind = m.outputs[1];
    if (ind.empty() || g.is_output(ind) || !plain_2x2(m)) continue;
    auto it = readers.find(ind);
    if (it == readers.end()) continue;
    bool ok = !it->second.empty();
    for (int k : it->second) {
      const Node& grad = g.nodes[k];
      ok = ok && grad.domain == kGraphrunDomain && grad.op_type == "MaxPoolGrad" && grad.inputs.size() == 3 &&
           grad.inputs[1] == ind && grad.inputs[0] != ind && grad.inputs[2] == m.inputs[0];
    }
    if (!ok) continue;
    for (int k : it->second) {
      Node& grad = r.nodes[k];
      grad.inputs[1].clear();
      grad.attrs["kernel_shape"] = Attribute::Ints({2, 2});
      grad.attrs["strides"] = Attribute::Ints({2, 2});
    }
    r.nodes[i].outputs[1].clear();
    r.values.erase(ind);
  }
  return r;
}

Pass recompute_maxpool_argmax_pass() { return make_pass(kInfo, "", recompute_maxpool_argmax); }

}  // namespace graphrun::passes
