// Load-time pass fill_resize_ranks: Resize/Upsample output ranks (and sizes found by data propagation) that
// ONNX's inference leaves unknown.
#include "graph/passes/fill_resize_ranks.h"

#include "graph/passes/fill_reshape_dims.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

namespace graphrun::passes {
namespace {

// The float values of `name` when it is an initializer, a Constant's output, or a Concat of those (torch builds
// Resize's scales as Concat(Constant, Constant)); data propagation carries integers only.
std::optional<std::vector<double>> constant_floats(const onnx::GraphProto& g, const std::string& name, int depth = 0) {
  auto from_tensor = [](const onnx::TensorProto& t) -> std::optional<std::vector<double>> {
    if (t.data_type() != onnx::TensorProto::FLOAT) return std::nullopt;
    std::vector<float> v(t.float_data().begin(), t.float_data().end());
    if (v.empty() && !t.raw_data().empty()) {
      v.resize(t.raw_data().size() / sizeof(float));
      if (!v.empty()) std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
    }
    return std::vector<double>(v.begin(), v.end());
  };
  for (const auto& t : g.initializer())
    if (t.name() == name) return from_tensor(t);
  for (const auto& n : g.node()) {
    if (n.output_size() != 1 || n.output(0) != name) continue;
    if (n.op_type() == "Constant") {
      for (const auto& a : n.attribute())
        if (a.name() == "value" && a.has_t()) return from_tensor(a.t());
      return std::nullopt;
    }
    if (n.op_type() != "Concat" || depth > 4) return std::nullopt;
    std::vector<double> all;
    for (const auto& in : n.input()) {
      auto part = constant_floats(g, in, depth + 1);
      if (!part) return std::nullopt;
      all.insert(all.end(), part->begin(), part->end());
    }
    return all;
  }
  return std::nullopt;
}

}  // namespace

bool fill_resize_ranks(onnx::ModelProto& m, const std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data) {
  auto* g = m.mutable_graph();
  std::map<std::string, onnx::TypeProto*> types = tensor_types(*g);
  int64_t opset = 0;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  bool filled = false;
  for (const auto& n : g->node()) {
    const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if ((n.op_type() != "Resize" && n.op_type() != "Upsample") || !onnx_domain || n.input_size() < 1 ||
        n.output_size() < 1)
      continue;
    auto in = types.find(n.input(0));
    if (in == types.end() || !in->second->tensor_type().has_shape()) continue;
    const int rank = in->second->tensor_type().shape().dim_size();
    const auto& in_shape = in->second->tensor_type().shape();
    // Resize-11+'s sizes (input 3), when data propagation computed it; else constant scales (input 1 of
    // Upsample-9 and Resize-10, input 2 from Resize-11) with the input's known dims, floor(in * scale).
    const onnx::TensorShapeProto* sizes = nullptr;
    if (n.op_type() == "Resize" && n.input_size() >= 4 && !n.input(3).empty()) {
      auto it = shape_data.find(n.input(3));
      if (it != shape_data.end() && it->second.dim_size() == rank) sizes = &it->second;
    }
    std::vector<double> scales;
    std::string coord;
    for (const auto& a : n.attribute()) {
      if (a.name() == "coordinate_transformation_mode") coord = a.s();
      if (a.name() == "scales") scales.assign(a.floats().begin(), a.floats().end());  // Upsample-7
    }
    const int at = n.op_type() == "Upsample" || opset < 11 ? 1 : 2;
    if (!sizes && coord != "tf_crop_and_resize" && n.input_size() > at && !n.input(at).empty())
      if (auto v = constant_floats(*g, n.input(at))) scales = *v;
    if (static_cast<int>(scales.size()) != rank) scales.clear();
    onnx::TypeProto* type = output_type(*g, types, n.output(0));
    auto* tt = type->mutable_tensor_type();
    if (!tt->elem_type()) tt->set_elem_type(in->second->tensor_type().elem_type());
    onnx::TensorShapeProto want;
    for (int i = 0; i < rank; ++i) {
      auto* d = want.add_dim();
      if (sizes && sizes->dim(i).has_dim_value()) d->set_dim_value(sizes->dim(i).dim_value());
      else if (!scales.empty() && in_shape.dim(i).has_dim_value())
        d->set_dim_value(static_cast<int64_t>(std::floor(in_shape.dim(i).dim_value() * scales[i])));
    }
    // Keep what is known; fill a missing shape, or the unknown dims of one of the right rank.
    if (!tt->has_shape()) {
      *tt->mutable_shape() = want;
      filled = true;
    } else if (tt->shape().dim_size() == rank) {
      for (int i = 0; i < rank; ++i) {
        auto* d = tt->mutable_shape()->mutable_dim(i);
        if (!d->has_dim_value() && (!d->has_dim_param() || d->dim_param().empty()) && want.dim(i).has_dim_value()) {
          *d = want.dim(i);
          filled = true;
        }
      }
    }
  }
  return filled;
}

}  // namespace graphrun::passes
