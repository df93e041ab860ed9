// Load-time pass fill_old_negative_axes (see the header).
#include "graph/passes/fill_old_negative_axes.h"

#include <map>
#include <set>
#include <string>

#include "graph/passes/fill_reshape_dims.h"

namespace graphrun::passes {

bool fill_old_negative_axes(onnx::ModelProto& m) {
  int64_t opset = 0;
  for (const auto& op : m.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") opset = op.version();
  if (opset == 0 || opset >= 11) return false;
  static const std::set<std::string> kAxis = {"Concat",  "Gather",     "Split",   "Flatten", "Softmax",  "LogSoftmax",
                                              "Hardmax", "ArgMax",     "ArgMin",  "Compress", "Scatter"};
  static const std::set<std::string> kAxes = {"Squeeze",       "Unsqueeze",   "ReduceSum",    "ReduceMean",
                                              "ReduceMax",     "ReduceMin",   "ReduceProd",   "ReduceL1",
                                              "ReduceL2",      "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  auto* g = m.mutable_graph();
  std::map<std::string, int> ranks;
  for (const auto& [name, t] : tensor_types(*g))
    if (t->has_tensor_type() && t->tensor_type().has_shape()) ranks[name] = t->tensor_type().shape().dim_size();
  for (const auto& t : g->initializer()) ranks[t.name()] = t.dims_size();
  bool changed = false;
  for (auto& n : *g->mutable_node()) {
    const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (!onnx_domain || n.input_size() < 1) continue;
    const bool axis = kAxis.count(n.op_type()) > 0, axes = kAxes.count(n.op_type()) > 0;
    if (!axis && !axes) continue;
    // Concat: any input's rank (they share it).
    int rank = -1;
    for (int i = 0; i < (n.op_type() == "Concat" ? n.input_size() : 1) && rank < 0; ++i)
      if (auto it = ranks.find(n.input(i)); it != ranks.end()) rank = it->second;
    if (rank < 0) continue;
    for (auto& a : *n.mutable_attribute()) {
      if (axis && a.name() == "axis" && a.type() == onnx::AttributeProto::INT && a.i() < 0) {
        // (Flatten takes axis rank itself: -r..-1 become 0..r-1 all the same.)
        if (a.i() >= -rank) a.set_i(a.i() + rank), changed = true;
      } else if (axes && a.name() == "axes" && a.type() == onnx::AttributeProto::INTS) {
        const int r = n.op_type() == "Unsqueeze" ? rank + a.ints_size() : rank;
        for (int k = 0; k < a.ints_size(); ++k)
          if (a.ints(k) < 0 && a.ints(k) >= -r) a.set_ints(k, a.ints(k) + r), changed = true;
      }
    }
  }
  return changed;
}

}  // namespace graphrun::passes
