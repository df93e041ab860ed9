// Load-time pass fill_reshape_dims: Reshape output shapes ONNX's inference leaves unknown.
#include "graph/passes/fill_reshape_dims.h"

#include "graph/passes/shape_values.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

namespace graphrun::passes {

std::map<std::string, onnx::TypeProto*> tensor_types(onnx::GraphProto& g) {
  std::map<std::string, onnx::TypeProto*> types;
  for (auto* list : {g.mutable_input(), g.mutable_value_info(), g.mutable_output()})
    for (auto& v : *list)
      if (v.type().has_tensor_type()) types[v.name()] = v.mutable_type();
  return types;
}

std::map<std::string, onnx::TypeProto> initializer_types(const onnx::GraphProto& g) {
  std::map<std::string, onnx::TypeProto> r;
  for (const auto& t : g.initializer()) {
    auto* tt = r[t.name()].mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    for (int64_t d : t.dims()) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  return r;
}

onnx::TypeProto* output_type(onnx::GraphProto& g, std::map<std::string, onnx::TypeProto*>& types,
                             const std::string& name) {
  auto it = types.find(name);
  if (it != types.end()) return it->second;
  auto* v = g.add_value_info();
  v->set_name(name);
  return types[name] = v->mutable_type();
}

bool fill_reshape_dims(onnx::ModelProto& m,
                       const std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data) {
  auto* g = m.mutable_graph();
  std::map<std::string, onnx::TypeProto*> types = tensor_types(*g);
  bool filled = false;
  for (const auto& n : g->node()) {
    const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (n.op_type() != "Reshape" || !onnx_domain || n.input_size() < 2 || n.output_size() < 1) continue;
    auto in = types.find(n.input(0));
    auto target = shape_data.find(n.input(1));
    if (target == shape_data.end()) {
      // The target's values are unknown (torch's attention computes them as N * heads) but its length
      // is in its type: the output's rank, which is what the gradient rules need (MatMul's).
      auto t = types.find(n.input(1));
      auto out = types.find(n.output(0));
      if (t == types.end() || !t->second->tensor_type().has_shape() ||
          t->second->tensor_type().shape().dim_size() != 1 || !t->second->tensor_type().shape().dim(0).has_dim_value())
        continue;
      const int64_t rank = t->second->tensor_type().shape().dim(0).dim_value();
      if (rank < 0 || rank > 64 || (out != types.end() && out->second->tensor_type().has_shape())) continue;
      onnx::TypeProto* type = output_type(*g, types, n.output(0));
      auto* tt = type->mutable_tensor_type();
      if (!tt->elem_type() && in != types.end()) tt->set_elem_type(in->second->tensor_type().elem_type());
      if (!tt->elem_type()) continue;  // (a value_info needs a type; inference fills the rest)
      for (int64_t i = 0; i < rank; ++i) tt->mutable_shape()->add_dim();
      filled = true;
      continue;
    }
    if (in == types.end() || !in->second->tensor_type().has_shape()) continue;
    const auto& in_shape = in->second->tensor_type().shape();
    bool allowzero = false;
    for (const auto& a : n.attribute())
      if (a.name() == "allowzero") allowzero = a.i() != 0;
    // The output as far as the target says: sizes, symbols, and one dimension to solve for. A dimension
    // neither says (Swin's window partition reshapes a Pad whose pads are computed) stays unknown, but the
    // output keeps the target's rank, which is what the gradient rules and negative axes need.
    std::multiset<std::string> in_symbols, out_symbols;
    int64_t in_known = 1, out_known = 1;
    bool ok = true, in_complete = true, out_complete = true;
    // Each dimension a product (monomial_of): its coefficient goes into the known size, its symbols into
    // the symbols (torch's N * heads is "4*N" once propagate_shape_values found it).
    auto account = [](const onnx::TensorShapeProto_Dimension& d, int64_t& known, std::multiset<std::string>& symbols,
                      bool& complete) {
      const auto m = monomial_of(d);
      if (!m || m->coeff <= 0) {
        complete = false;
        return;
      }
      complete &= !__builtin_mul_overflow(known, m->coeff, &known);
      symbols.insert(m->symbols.begin(), m->symbols.end());
    };
    for (const auto& d : in_shape.dim()) {
      if (d.has_dim_value() && d.dim_value() == 0) in_known = 0;
      else account(d, in_known, in_symbols, in_complete);
    }
    onnx::TensorShapeProto out;
    int solve = -1;
    for (int i = 0; i < target->second.dim_size() && ok; ++i) {
      const auto& t = target->second.dim(i);
      auto* d = out.add_dim();
      if (t.has_dim_value() && t.dim_value() == 0 && !allowzero) {
        if (i >= in_shape.dim_size()) ok = false;
        else *d = in_shape.dim(i);
      } else if (t.has_dim_value() && t.dim_value() == -1) {
        if (solve >= 0) ok = false;
        solve = i;
        continue;
      } else if (t.has_dim_value() && t.dim_value() >= 0) {
        d->set_dim_value(t.dim_value());
      } else if (t.has_dim_param() && !t.dim_param().empty()) {
        d->set_dim_param(t.dim_param());
      } else if (t.has_dim_value()) {
        ok = false;  // a negative size other than -1: the model is invalid, the kernel says so
      }
      if (d->has_dim_value() && d->dim_value() == 0) out_known = 0;
      else account(*d, out_known, out_symbols, out_complete);
    }
    if (!ok) continue;
    // The -1 dimension is what the input holds that the rest of the target does not: the quotient of the
    // known sizes times the input's symbols left over (a size when none is, "64*N" when N is).
    if (solve >= 0 && in_complete && out_complete && out_known > 0 && in_known % out_known == 0 &&
        std::includes(in_symbols.begin(), in_symbols.end(), out_symbols.begin(), out_symbols.end())) {
      Monomial m{in_known / out_known, {}};
      if (m.coeff != 0)
        std::set_difference(in_symbols.begin(), in_symbols.end(), out_symbols.begin(), out_symbols.end(),
                            std::back_inserter(m.symbols));
      if (m.known() || m.coeff > 0) set_dim(*out.mutable_dim(solve), m);
    }
    // Fill the output's type where it is unknown; keep what is known.
    onnx::TypeProto* type = output_type(*g, types, n.output(0));
    auto* tt = type->mutable_tensor_type();
    if (!tt->elem_type()) tt->set_elem_type(in->second->tensor_type().elem_type());
    if (!tt->has_shape()) {
      *tt->mutable_shape() = out;
      filled = true;
    } else if (tt->shape().dim_size() == out.dim_size()) {
      for (int i = 0; i < out.dim_size(); ++i) {
        auto* d = tt->mutable_shape()->mutable_dim(i);
        if (!d->has_dim_value() && (!d->has_dim_param() || d->dim_param().empty()) &&
            (out.dim(i).has_dim_value() || out.dim(i).has_dim_param())) {
          *d = out.dim(i);
          filled = true;
        }
      }
    }
  }
  return filled;
}

}  // namespace graphrun::passes
