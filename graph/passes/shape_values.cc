// Load-time pass propagate_shape_values: shape tensors' values as monomials (see the header).
#include "graph/passes/shape_values.h"

#include "graph/passes/fill_reshape_dims.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace graphrun::passes {

std::string Monomial::str() const {
  std::string s;
  if (coeff != 1 || symbols.empty()) s = std::to_string(coeff);
  for (const auto& x : symbols) s += (s.empty() ? "" : "*") + x;
  return s;
}

std::optional<Monomial> monomial_of(const onnx::TensorShapeProto_Dimension& d) {
  if (d.has_dim_value()) return Monomial{d.dim_value(), {}};
  if (!d.has_dim_param() || d.dim_param().empty()) return std::nullopt;
  const std::string& p = d.dim_param();
  Monomial m;
  size_t at = 0;
  while (at <= p.size()) {
    const size_t star = std::min(p.find('*', at), p.size());
    const std::string tok = p.substr(at, star - at);
    at = star + 1;
    if (tok.empty() || tok.rfind("unk__", 0) == 0) return std::nullopt;
    const bool number = tok.find_first_not_of("0123456789") == std::string::npos && tok.size() <= 18;
    if (number) {
      if (__builtin_mul_overflow(m.coeff, std::stoll(tok), &m.coeff)) return std::nullopt;
    } else {
      m.symbols.push_back(tok);
    }
  }
  if (m.symbols.empty()) return std::nullopt;  // a symbol spelled as a number is still a symbol, unknown here
  std::sort(m.symbols.begin(), m.symbols.end());
  return m;
}

void set_dim(onnx::TensorShapeProto_Dimension& d, const Monomial& m) {
  if (m.known()) d.set_dim_value(m.coeff);
  else d.set_dim_param(m.str());
}

namespace {

using Dim = std::optional<Monomial>;
struct Value {
  int rank = 1;  // 0 (a scalar) or 1: only vectors of sizes are tracked
  std::vector<Dim> v;
};

Dim mul(const Dim& a, const Dim& b) {
  if (!a || !b) return std::nullopt;
  Monomial r;
  if (__builtin_mul_overflow(a->coeff, b->coeff, &r.coeff)) return std::nullopt;
  if (r.coeff == 0) return Monomial{0, {}};
  r.symbols = a->symbols;
  r.symbols.insert(r.symbols.end(), b->symbols.begin(), b->symbols.end());
  std::sort(r.symbols.begin(), r.symbols.end());
  return r;
}

// Exact quotients only: what is left of a's symbols after b's, and a coefficient that divides. Known
// numbers divide as ONNX's integer Div does (truncation), for the non-negative sizes shapes hold.
Dim div(const Dim& a, const Dim& b) {
  if (!a || !b || b->coeff == 0) return std::nullopt;
  if (a->known() && b->known()) {
    if (a->coeff < 0 || b->coeff < 0) return std::nullopt;
    return Monomial{a->coeff / b->coeff, {}};
  }
  if (a->coeff % b->coeff) return std::nullopt;
  Monomial r{a->coeff / b->coeff, a->symbols};
  for (const auto& s : b->symbols) {
    auto it = std::find(r.symbols.begin(), r.symbols.end(), s);
    if (it == r.symbols.end()) return std::nullopt;
    r.symbols.erase(it);
  }
  return r;
}

Dim add(const Dim& a, const Dim& b, int sign) {
  if (!a || !b || a->symbols != b->symbols) return std::nullopt;
  Monomial r{0, a->symbols};
  int64_t bc = b->coeff;
  if (sign < 0 && __builtin_mul_overflow(bc, int64_t{-1}, &bc)) return std::nullopt;
  if (__builtin_add_overflow(a->coeff, bc, &r.coeff)) return std::nullopt;
  if (r.coeff == 0) r.symbols.clear();
  return r;
}

std::optional<Value> from_tensor(const onnx::TensorProto& t) {
  if (t.dims_size() > 1) return std::nullopt;
  const int64_t n = t.dims_size() == 0 ? 1 : t.dims(0);
  if (n > 64 || n < 0) return std::nullopt;
  std::vector<int64_t> ints;
  if (t.data_type() == onnx::TensorProto::INT64) {
    ints.assign(t.int64_data().begin(), t.int64_data().end());
    if (ints.empty() && n > 0 && t.raw_data().size() == static_cast<size_t>(n) * sizeof(int64_t)) {
      ints.resize(n);
      std::memcpy(ints.data(), t.raw_data().data(), n * sizeof(int64_t));
    }
  } else if (t.data_type() == onnx::TensorProto::INT32) {
    ints.assign(t.int32_data().begin(), t.int32_data().end());
    if (ints.empty() && n > 0 && t.raw_data().size() == static_cast<size_t>(n) * sizeof(int32_t)) {
      std::vector<int32_t> v(n);
      std::memcpy(v.data(), t.raw_data().data(), n * sizeof(int32_t));
      ints.assign(v.begin(), v.end());
    }
  } else {
    return std::nullopt;
  }
  if (static_cast<int64_t>(ints.size()) != n || (t.has_data_location() && t.data_location() == onnx::TensorProto::EXTERNAL))
    return std::nullopt;
  Value r{t.dims_size(), {}};
  for (int64_t x : ints) r.v.push_back(Monomial{x, {}});
  return r;
}

int64_t int_attr(const onnx::NodeProto& n, const char* name, int64_t dflt) {
  for (const auto& a : n.attribute())
    if (a.name() == name && a.type() == onnx::AttributeProto::INT) return a.i();
  return dflt;
}

// The known integers of `v`, or nothing.
std::optional<std::vector<int64_t>> ints_of(const std::optional<Value>& v) {
  if (!v) return std::nullopt;
  std::vector<int64_t> r;
  for (const Dim& d : v->v) {
    if (!d || !d->known()) return std::nullopt;
    r.push_back(d->coeff);
  }
  return r;
}

}  // namespace

bool propagate_shape_values(const onnx::ModelProto& m,
                            std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data) {
  const auto& g = m.graph();
  std::map<std::string, const onnx::TypeProto*> types;
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto& v : *list)
      if (v.type().has_tensor_type()) types[v.name()] = &v.type();
  const std::map<std::string, onnx::TypeProto> weights = initializer_types(g);
  for (const auto& [name, t] : weights)
    if (!types.count(name)) types[name] = &t;
  std::map<std::string, Value> found;
  for (const auto& t : g.initializer())
    if (auto v = from_tensor(t)) found[t.name()] = *v;

  // What is known of `name`: found here, or from ONNX's data propagation (its generated symbols unknown).
  auto value = [&](const std::string& name) -> std::optional<Value> {
    auto f = found.find(name);
    if (f != found.end()) return f->second;
    auto s = shape_data.find(name);
    if (s == shape_data.end()) return std::nullopt;
    Value r;
    auto t = types.find(name);
    if (t != types.end() && t->second->tensor_type().has_shape()) {
      r.rank = t->second->tensor_type().shape().dim_size();
      if (r.rank > 1) return std::nullopt;
    }
    for (const auto& d : s->second.dim()) r.v.push_back(monomial_of(d));
    if (r.rank == 0 && r.v.size() != 1) return std::nullopt;
    return r;
  };

  for (const auto& n : g.node()) {
    if (!(n.domain().empty() || n.domain() == "ai.onnx") || n.output_size() < 1 || n.output(0).empty()) continue;
    const std::string& op = n.op_type();
    auto in = [&](int i) { return i < n.input_size() && !n.input(i).empty() ? value(n.input(i)) : std::nullopt; };
    std::optional<Value> out;
    if (op == "Constant") {
      for (const auto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t()) out = from_tensor(a.t());
        if (a.name() == "value_int") out = Value{0, {Monomial{a.i(), {}}}};
        if (a.name() == "value_ints" && a.ints_size() <= 64) {
          out = Value{1, {}};
          for (int64_t x : a.ints()) out->v.push_back(Monomial{x, {}});
        }
      }
    } else if (op == "Shape" && n.input_size() == 1) {
      auto t = types.find(n.input(0));
      if (t == types.end() || !t->second->tensor_type().has_shape()) continue;
      const auto& s = t->second->tensor_type().shape();
      const int64_t r = s.dim_size();
      int64_t start = int_attr(n, "start", 0), end = int_attr(n, "end", r);
      start = std::clamp(start < 0 ? start + r : start, int64_t{0}, r);
      end = std::clamp(end < 0 ? end + r : end, int64_t{0}, r);
      out = Value{1, {}};
      for (int64_t i = start; i < end; ++i) out->v.push_back(monomial_of(s.dim(static_cast<int>(i))));
    } else if (op == "Gather" && n.input_size() == 2 && int_attr(n, "axis", 0) == 0) {
      auto data = in(0);
      auto idx = in(1);
      auto at = ints_of(idx);
      if (!data || data->rank != 1 || !at) continue;
      out = Value{idx->rank, {}};
      const int64_t len = static_cast<int64_t>(data->v.size());
      for (int64_t i : *at) {
        if (i < -len || i >= len) { out.reset(); break; }
        out->v.push_back(data->v[i < 0 ? i + len : i]);
      }
    } else if (op == "Unsqueeze" || op == "Squeeze" || op == "Identity" || op == "Cast" || op == "Reshape") {
      auto x = in(0);
      if (!x || (x->v.size() != 1 && op != "Identity" && op != "Cast" && op != "Reshape")) continue;
      if (op == "Cast") {
        const int64_t to = int_attr(n, "to", 0);
        if (to != onnx::TensorProto::INT64 && to != onnx::TensorProto::INT32) continue;
      }
      out = x;
      if (op == "Unsqueeze") {
        if (x->rank != 0) continue;
        out->rank = 1;
      } else if (op == "Squeeze") {
        if (x->rank != 1) continue;
        out->rank = 0;
      } else if (op == "Reshape") {
        auto target = ints_of(in(1));
        if (!target || target->size() > 1 || (target->size() == 1 && (*target)[0] != -1 &&
                                               (*target)[0] != static_cast<int64_t>(x->v.size())))
          continue;
        out->rank = static_cast<int>(target->size());
        if (out->rank == 0 && x->v.size() != 1) continue;
      }
    } else if (op == "Concat" && int_attr(n, "axis", 0) == 0) {
      out = Value{1, {}};
      for (int i = 0; i < n.input_size() && out; ++i) {
        auto x = in(i);
        if (!x || x->rank != 1) out.reset();
        else out->v.insert(out->v.end(), x->v.begin(), x->v.end());
      }
    } else if (op == "Slice" && n.input_size() >= 3) {
      auto x = in(0);
      auto starts = ints_of(in(1)), ends = ints_of(in(2));
      auto axes = n.input_size() > 3 && !n.input(3).empty() ? ints_of(in(3)) : std::vector<int64_t>{0};
      auto steps = n.input_size() > 4 && !n.input(4).empty() ? ints_of(in(4)) : std::vector<int64_t>{1};
      if (!x || x->rank != 1 || !starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1 ||
          axes->size() != 1 || steps->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1) || (*steps)[0] != 1)
        continue;
      const int64_t len = static_cast<int64_t>(x->v.size());
      int64_t b = (*starts)[0], e = (*ends)[0];
      b = std::clamp(b < 0 ? b + len : b, int64_t{0}, len);
      e = std::clamp(e < 0 ? e + len : e, int64_t{0}, len);
      out = Value{1, {}};
      for (int64_t i = b; i < e; ++i) out->v.push_back(x->v[i]);
    } else if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && n.input_size() == 2) {
      auto a = in(0), b = in(1);
      if (!a || !b) continue;
      const size_t na = a->v.size(), nb = b->v.size();
      if (na == 0 || nb == 0 || (na != nb && na != 1 && nb != 1)) continue;  // (an empty operand: nothing to learn)
      out = Value{std::max(a->rank, b->rank), {}};
      for (size_t i = 0; i < std::max(na, nb); ++i) {
        const Dim& x = a->v[na == 1 ? 0 : i];
        const Dim& y = b->v[nb == 1 ? 0 : i];
        out->v.push_back(op == "Mul" ? mul(x, y) : op == "Div" ? div(x, y) : add(x, y, op == "Add" ? 1 : -1));
      }
    }
    if (out) found[n.output(0)] = std::move(*out);
  }

  bool added = false;
  for (const auto& [name, v] : found) {
    if (std::none_of(v.v.begin(), v.v.end(), [](const Dim& d) { return d.has_value(); })) continue;
    auto it = shape_data.find(name);
    if (it == shape_data.end()) {
      onnx::TensorShapeProto s;
      for (const Dim& d : v.v) {
        auto* sd = s.add_dim();
        if (d) set_dim(*sd, *d);
      }
      shape_data.emplace(name, std::move(s));
      added = true;
      continue;
    }
    if (it->second.dim_size() != static_cast<int>(v.v.size())) continue;
    for (int i = 0; i < it->second.dim_size(); ++i) {
      auto* d = it->second.mutable_dim(i);
      if (v.v[i] && !monomial_of(*d)) {
        d->Clear();
        set_dim(*d, *v.v[i]);
        added = true;
      }
    }
  }
  return added;
}

}  // namespace graphrun::passes
