// Load-time pass fill_slice_ranks: Slice output ranks (and unsliced sizes) ONNX's inference leaves unknown.
#include "graph/passes/fill_slice_ranks.h"

#include "graph/passes/fill_reshape_dims.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace graphrun::passes {
namespace {

// The int64 values of `name` when it is an initializer, a Constant's output or found by data propagation.
std::optional<std::vector<int64_t>> constant_ints(const onnx::GraphProto& g, const std::string& name,
                                                  const std::unordered_map<std::string, onnx::TensorShapeProto>& data) {
  auto from_tensor = [](const onnx::TensorProto& t) -> std::optional<std::vector<int64_t>> {
    if (t.data_type() != onnx::TensorProto::INT64) return std::nullopt;
    std::vector<int64_t> v(t.int64_data().begin(), t.int64_data().end());
    if (v.empty() && !t.raw_data().empty()) {
      v.resize(t.raw_data().size() / sizeof(int64_t));
      if (!v.empty()) std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(int64_t));
    }
    return v;
  };
  for (const auto& t : g.initializer())
    if (t.name() == name) return from_tensor(t);
  for (const auto& n : g.node())
    if (n.op_type() == "Constant" && n.output_size() == 1 && n.output(0) == name)
      for (const auto& a : n.attribute())
        if (a.name() == "value" && a.has_t()) return from_tensor(a.t());
  auto it = data.find(name);
  if (it == data.end()) return std::nullopt;
  std::vector<int64_t> v;
  for (const auto& d : it->second.dim()) {
    if (!d.has_dim_value()) return std::nullopt;
    v.push_back(d.dim_value());
  }
  return v;
}

}  // namespace

bool fill_slice_ranks(onnx::ModelProto& m, const std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data) {
  auto* g = m.mutable_graph();
  std::map<std::string, onnx::TypeProto*> types = tensor_types(*g);
  // A Slice of a weight (torch's MultiheadAttention slices its packed in_proj_weight when query and key differ).
  std::map<std::string, onnx::TypeProto> weights = initializer_types(*g);
  for (auto& [name, t] : weights)
    if (!types.count(name)) types[name] = &t;
  bool filled = false;
  for (const auto& n : g->node()) {
    const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (n.op_type() != "Slice" || !onnx_domain || n.input_size() < 3 || n.output_size() < 1) continue;
    auto in = types.find(n.input(0));
    if (in == types.end() || !in->second->tensor_type().has_shape()) continue;
    auto out = types.find(n.output(0));
    const bool out_ranked = out != types.end() && out->second->tensor_type().has_shape();
    const auto& in_shape = in->second->tensor_type().shape();
    const int rank = in_shape.dim_size();
    if (out_ranked && out->second->tensor_type().shape().dim_size() != rank) continue;
    // The axes that may change size: every axis unless `axes` is known.
    std::set<int64_t> sliced;
    std::optional<std::vector<int64_t>> axes;
    if (n.input_size() >= 4 && !n.input(3).empty()) axes = constant_ints(*g, n.input(3), shape_data);
    else if (auto starts = constant_ints(*g, n.input(1), shape_data)) {
      axes.emplace();
      for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
    }
    bool axes_ok = axes.has_value();
    if (axes_ok)
      for (int64_t a : *axes) {
        if (a < -rank || a >= rank) axes_ok = false;
        else sliced.insert(a < 0 ? a + rank : a);
      }
    if (axes_ok && sliced.size() != axes->size()) axes_ok = false;  // an axis twice: the model is invalid
    // The output as far as the bounds say: unsliced axes keep their sizes, and a sliced axis of known size
    // whose starts, ends and steps are known (data propagation: torch's chunk) has its ONNX Slice size.
    onnx::TensorShapeProto shape;
    for (int i = 0; i < rank; ++i) {
      auto* d = shape.add_dim();
      if (axes_ok && !sliced.count(i)) *d = in_shape.dim(i);
    }
    auto starts = constant_ints(*g, n.input(1), shape_data), ends = constant_ints(*g, n.input(2), shape_data);
    std::optional<std::vector<int64_t>> steps;
    if (n.input_size() >= 5 && !n.input(4).empty()) steps = constant_ints(*g, n.input(4), shape_data);
    else if (axes_ok) steps = std::vector<int64_t>(axes->size(), 1);
    if (axes_ok && starts && ends && steps && starts->size() == axes->size() && ends->size() == axes->size() &&
        steps->size() == axes->size())
      for (size_t k = 0; k < axes->size(); ++k) {
        const int axis = static_cast<int>((*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k]);
        const auto& d = in_shape.dim(axis);
        const int64_t st = (*steps)[k];
        if (!d.has_dim_value() || st == 0 || st == std::numeric_limits<int64_t>::min()) continue;
        const int64_t len = d.dim_value();
        if (len <= 0) {
          shape.mutable_dim(axis)->set_dim_value(0);
          continue;
        }
        int64_t b = (*starts)[k], e = (*ends)[k];
        if (b < 0) b = b < -len ? 0 : b + len;  // (the sums cannot overflow: len >= 0, b and e < 0)
        if (e < 0) e = e < -len ? -1 : e + len;
        if (st > 0) {
          b = std::clamp<int64_t>(b, 0, len);
          e = std::clamp<int64_t>(e, 0, len);
        } else {
          b = std::clamp<int64_t>(b, 0, len - 1);
          e = std::clamp<int64_t>(e, -1, len - 1);
        }
        const int64_t span = st > 0 ? e - b : b - e, step = st > 0 ? st : -st;
        shape.mutable_dim(axis)->set_dim_value(span <= 0 ? 0 : (span - 1) / step + 1);
      }
    onnx::TypeProto* type = output_type(*g, types, n.output(0));
    auto* tt = type->mutable_tensor_type();
    if (!tt->elem_type()) tt->set_elem_type(in->second->tensor_type().elem_type());
    if (!out_ranked) {
      *tt->mutable_shape() = shape;
      filled = true;
      continue;
    }
    for (int i = 0; i < rank; ++i) {
      auto* d = tt->mutable_shape()->mutable_dim(i);
      if (!d->has_dim_value() && (!d->has_dim_param() || d->dim_param().empty()) &&
          (shape.dim(i).has_dim_value() || shape.dim(i).has_dim_param())) {
        *d = shape.dim(i);
        filled = true;
      }
    }
  }
  return filled;
}

}  // namespace graphrun::passes
