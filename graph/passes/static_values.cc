#include "graph/passes/static_values.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "graph/error.h"
#include "graph/onnx_tensor.h"
#include "graph/validate.h"

namespace graphrun::passes::static_values {
namespace {

int64_t count_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxElements) return -1;
    n *= d;
    if (n > kMaxElements) return -1;
  }
  return n;
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

std::optional<int64_t> axis_in(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

}  // namespace

bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

bool integer_type(int32_t t) {
  using TP = onnx::TensorProto;
  return t == TP::INT64 || t == TP::INT32 || t == TP::INT16 || t == TP::INT8 || t == TP::UINT8 || t == TP::BOOL;
}

bool opaque(const onnx::NodeProto& n) { return has_subgraph(n) || sequence_or_optional_op(n); }

bool has_subgraph(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS || a.has_g() ||
        a.graphs_size())
      return true;
  return false;
}

const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

Evaluator::Evaluator(const onnx::GraphProto& g, const ShapeData& data, Evaluator* outer)
    : g_(g), data_(data), outer_(outer) {
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer_[o] = i;
  for (const auto& t : g.initializer()) inits_[t.name()] = &t;
}

std::optional<Value> Evaluator::value_of(const std::string& name) {
  auto m = memo_.find(name);
  if (m != memo_.end()) return m->second;
  if (depth_ >= kMaxDepth) return std::nullopt;
  ++depth_;
  std::optional<Value> v = compute(name);
  --depth_;
  memo_[name] = v;
  return v;
}

std::optional<std::vector<int64_t>> Evaluator::constant_dims(const std::string& name) const {
  auto known = dims_.find(name);
  if (known != dims_.end()) return known->second;
  auto init = inits_.find(name);
  if (init != inits_.end()) return std::vector<int64_t>(init->second->dims().begin(), init->second->dims().end());
  auto p = producer_.find(name);
  if (p == producer_.end()) return outer_ && !locals_.count(name) ? outer_->constant_dims(name) : std::nullopt;
  const onnx::NodeProto& n = g_.node(p->second);
  if (n.op_type() != "Constant" || !default_domain(n.domain())) return std::nullopt;
  if (const auto* a = attr(n, "value"); a && a->has_t())
    return std::vector<int64_t>(a->t().dims().begin(), a->t().dims().end());
  if (attr(n, "value_int") || attr(n, "value_float")) return std::vector<int64_t>{};
  if (const auto* a = attr(n, "value_ints")) return std::vector<int64_t>{a->ints_size()};
  if (const auto* a = attr(n, "value_floats")) return std::vector<int64_t>{a->floats_size()};
  return std::nullopt;
}

std::optional<Value> Evaluator::tensor_value(const onnx::TensorProto& t) {
  if (!integer_type(t.data_type())) return std::nullopt;
  Value v;
  v.type = t.data_type();
  v.dims.assign(t.dims().begin(), t.dims().end());
  if (count_of(v.dims) < 0) return std::nullopt;
  try {
    v.data = tensor_from_proto(t, "If condition").as_int64s();
  } catch (const std::exception&) {
    return std::nullopt;  // external or malformed: not a value a condition can
                          // be known from
  }
  return v;
}

std::optional<Value> Evaluator::compute(const std::string& name) {
  auto d = data_.find(name);
  if (d != data_.end()) {
    Value v;
    for (const auto& dim : d->second.dim()) {
      if (!dim.has_dim_value()) return std::nullopt;
      v.data.push_back(dim.dim_value());
    }
    v.dims = {static_cast<int64_t>(v.data.size())};
    return v;
  }
  auto init = inits_.find(name);
  if (init != inits_.end()) return tensor_value(*init->second);
  auto p = producer_.find(name);
  if (p == producer_.end()) return outer_ && !locals_.count(name) ? outer_->value_of(name) : std::nullopt;
  const onnx::NodeProto& n = g_.node(p->second);
  if (!default_domain(n.domain()) || n.output_size() < 1 || n.output(0) != name) return std::nullopt;
  return evaluate(n);
}

std::optional<Value> Evaluator::input(const onnx::NodeProto& n, int i) {
  if (i >= n.input_size() || n.input(i).empty()) return std::nullopt;
  return value_of(n.input(i));
}

std::optional<Value> Evaluator::evaluate(const onnx::NodeProto& n) {
  using TP = onnx::TensorProto;
  const std::string& op = n.op_type();
  if (op == "Constant") {
    if (const auto* a = attr(n, "value"); a && a->has_t()) return tensor_value(a->t());
    if (const auto* a = attr(n, "value_int")) return Value{TP::INT64, {}, {a->i()}};
    if (const auto* a = attr(n, "value_ints"); a && a->ints_size() <= kMaxElements)
      return Value{TP::INT64, {a->ints_size()}, {a->ints().begin(), a->ints().end()}};
    return std::nullopt;
  }
  if (op == "Shape" || op == "Size") {
    if (n.input_size() < 1) return std::nullopt;
    std::optional<std::vector<int64_t>> dims = constant_dims(n.input(0));
    if (!dims) return std::nullopt;
    if (op == "Size") {
      int64_t c = 1;
      for (int64_t x : *dims)
        if (x < 0 || __builtin_mul_overflow(c, x, &c)) return std::nullopt;
      return Value{TP::INT64, {}, {c}};
    }
    const auto r = static_cast<int64_t>(dims->size());
    int64_t start = 0, end = r;
    if (const auto* a = attr(n, "start")) start = a->i();
    if (const auto* a = attr(n, "end")) end = a->i();
    start = std::clamp(start < 0 ? start + r : start, int64_t(0), r);
    end = std::clamp(end < 0 ? end + r : end, int64_t(0), r);
    Value v;
    for (int64_t k = start; k < end; ++k) v.data.push_back((*dims)[static_cast<size_t>(k)]);
    v.dims = {static_cast<int64_t>(v.data.size())};
    return v;
  }
  if (op == "Identity") return input(n, 0);
  if (op == "Cast") {
    std::optional<Value> v = input(n, 0);
    const auto* to = attr(n, "to");
    if (!v || !to || !integer_type(static_cast<int32_t>(to->i()))) return std::nullopt;
    v->type = static_cast<int32_t>(to->i());
    if (v->type == TP::BOOL)
      for (int64_t& x : v->data) x = x != 0;
    return v;
  }
  if (op == "Not" || op == "Neg" || op == "Abs") {
    std::optional<Value> v = input(n, 0);
    if (!v) return v;
    for (int64_t& x : v->data) {
      if (op != "Not" && x == std::numeric_limits<int64_t>::min()) return std::nullopt;
      x = op == "Not" ? !x : op == "Neg" ? -x : std::abs(x);
    }
    return v;
  }
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Reshape" || op == "Flatten") return reshaped(n);
  if (op == "ConstantOfShape") {
    std::optional<Value> shape = input(n, 0);
    if (!shape) return std::nullopt;
    Value v;
    v.type = TP::FLOAT;  // the default value: float 0, not an integer this evaluates
    int64_t fill = 0;
    if (const auto* a = attr(n, "value"); a && a->has_t()) {
      std::optional<Value> f = tensor_value(a->t());
      if (!f || f->data.size() != 1) return std::nullopt;
      v.type = f->type;
      fill = f->data[0];
    }
    if (!integer_type(v.type)) return std::nullopt;
    v.dims = shape->data;
    const int64_t c = count_of(v.dims);
    if (c < 0) return std::nullopt;
    v.data.assign(static_cast<size_t>(c), fill);
    return v;
  }
  if (op == "Concat") return concat(n);
  if (op == "Slice") return slice(n);
  if (op == "Transpose") return transpose(n);
  if (op == "Gather") return gather(n);
  if (op == "Range") {
    std::optional<Value> a = input(n, 0), b = input(n, 1), c = input(n, 2);
    if (!a || !b || !c || a->data.size() != 1 || b->data.size() != 1 || c->data.size() != 1 || c->data[0] == 0)
      return std::nullopt;
    Value v{a->type, {}, {}};
    for (int64_t x = a->data[0]; c->data[0] > 0 ? x < b->data[0] : x > b->data[0];) {
      if (static_cast<int64_t>(v.data.size()) >= kMaxElements) return std::nullopt;
      v.data.push_back(x);
      if (__builtin_add_overflow(x, c->data[0], &x)) break;
    }
    v.dims = {static_cast<int64_t>(v.data.size())};
    return v;
  }
  if ((op == "Min" || op == "Max") && n.input_size() >= 1) {  // variadic; one side a single element or the same dims
    std::optional<Value> acc = input(n, 0);
    for (int i = 1; acc && i < n.input_size(); ++i) {
      std::optional<Value> b = input(n, i);
      if (!b || b->data.empty() || acc->data.empty()) return std::nullopt;
      if (acc->dims != b->dims && acc->data.size() != 1 && b->data.size() != 1) return std::nullopt;
      if (acc->data.size() == 1 && b->data.size() != 1)
        acc = Value{acc->type, b->dims, std::vector<int64_t>(b->data.size(), acc->data[0])};
      for (size_t k = 0; k < acc->data.size(); ++k) {
        const int64_t y = b->data[b->data.size() == 1 ? 0 : k];
        acc->data[k] = op == "Min" ? std::min(acc->data[k], y) : std::max(acc->data[k], y);
      }
    }
    return acc;
  }
  static const std::set<std::string> binary = {
      "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Add", "Sub", "Mul", "Div"};
  if (binary.count(op)) return elementwise(n);
  return std::nullopt;
}

std::optional<Value> Evaluator::reshaped(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  std::optional<Value> v = input(n, 0);
  if (!v) return std::nullopt;
  const auto r = static_cast<int64_t>(v->dims.size());
  if (op == "Reshape") {
    std::optional<Value> shape = input(n, 1);
    if (!shape) return std::nullopt;
    const auto* az = attr(n, "allowzero");
    const bool allowzero = az && az->i() != 0;
    std::vector<int64_t> dims = shape->data;
    int64_t known = 1, infer = -1;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k] == 0 && !allowzero) {
        if (static_cast<int64_t>(k) >= r) return std::nullopt;
        dims[k] = v->dims[k];
      }
      if (dims[k] == -1) {
        if (infer >= 0) return std::nullopt;
        infer = static_cast<int64_t>(k);
      } else if (dims[k] < 0 || dims[k] > kMaxElements) {
        return std::nullopt;
      } else {
        known *= dims[k];
      }
    }
    const auto total = static_cast<int64_t>(v->data.size());
    if (infer >= 0) {
      if (known == 0 || total % known) return std::nullopt;
      dims[static_cast<size_t>(infer)] = total / known;
    }
    if (count_of(dims) != total) return std::nullopt;
    v->dims = dims;
    return v;
  }
  if (op == "Flatten") {
    int64_t axis = 1;
    if (const auto* a = attr(n, "axis")) axis = a->i();
    if (axis < 0) axis += r;
    if (axis < 0 || axis > r) return std::nullopt;
    int64_t outer = 1;
    for (int64_t k = 0; k < axis; ++k) outer *= v->dims[static_cast<size_t>(k)];
    v->dims = {outer, static_cast<int64_t>(v->data.size()) / std::max<int64_t>(outer, 1)};
    return v;
  }
  std::vector<int64_t> axes;
  if (const auto* a = attr(n, "axes")) {
    axes.assign(a->ints().begin(), a->ints().end());
  } else if (n.input_size() > 1 && !n.input(1).empty()) {
    std::optional<Value> av = input(n, 1);
    if (!av) return std::nullopt;
    axes = av->data;
  }
  if (op == "Squeeze") {
    std::set<int64_t> drop;
    for (int64_t a : axes) {
      std::optional<int64_t> k = axis_in(a, v->dims.size());
      if (!k || v->dims[static_cast<size_t>(*k)] != 1) return std::nullopt;
      drop.insert(*k);
    }
    std::vector<int64_t> dims;
    for (int64_t k = 0; k < r; ++k)
      if (axes.empty() ? v->dims[static_cast<size_t>(k)] != 1 : !drop.count(k))
        dims.push_back(v->dims[static_cast<size_t>(k)]);
    v->dims = dims;
    return v;
  }
  const size_t out_rank = v->dims.size() + axes.size();
  std::set<int64_t> add;
  for (int64_t a : axes) {
    std::optional<int64_t> k = axis_in(a, out_rank);
    if (!k || !add.insert(*k).second) return std::nullopt;
  }
  std::vector<int64_t> dims;
  size_t from = 0;
  for (size_t k = 0; k < out_rank; ++k) dims.push_back(add.count(static_cast<int64_t>(k)) ? 1 : v->dims[from++]);
  v->dims = dims;
  return v;
}

std::optional<Value> Evaluator::concat(const onnx::NodeProto& n) {
  const auto* a = attr(n, "axis");
  if (!a || n.input_size() < 1) return std::nullopt;
  std::vector<Value> parts;
  for (int i = 0; i < n.input_size(); ++i) {
    std::optional<Value> v = input(n, i);
    if (!v) return std::nullopt;
    parts.push_back(std::move(*v));
  }
  const size_t r = parts[0].dims.size();
  std::optional<int64_t> axis = axis_in(a->i(), r);
  if (!axis) return std::nullopt;
  Value out{parts[0].type, parts[0].dims, {}};
  out.dims[static_cast<size_t>(*axis)] = 0;
  for (const Value& v : parts) {
    if (v.dims.size() != r) return std::nullopt;
    for (size_t k = 0; k < r; ++k)
      if (static_cast<int64_t>(k) != *axis && v.dims[k] != parts[0].dims[k]) return std::nullopt;
    out.dims[static_cast<size_t>(*axis)] += v.dims[static_cast<size_t>(*axis)];
  }
  if (count_of(out.dims) < 0) return std::nullopt;
  int64_t outer = 1;
  for (int64_t k = 0; k < *axis; ++k) outer *= out.dims[static_cast<size_t>(k)];
  for (int64_t o = 0; o < outer; ++o)
    for (const Value& v : parts) {
      const auto block = static_cast<int64_t>(v.data.size()) / std::max<int64_t>(outer, 1);
      out.data.insert(out.data.end(), v.data.begin() + o * block, v.data.begin() + (o + 1) * block);
    }
  return out;
}

std::optional<Value> Evaluator::slice(const onnx::NodeProto& n) {
  std::optional<Value> v = input(n, 0), starts = input(n, 1), ends = input(n, 2);
  if (!v || !starts || !ends || starts->data.size() != ends->data.size()) return std::nullopt;
  const size_t r = v->dims.size(), m = starts->data.size();
  std::vector<int64_t> axes(m), steps(m, 1);
  for (size_t i = 0; i < m; ++i) axes[i] = static_cast<int64_t>(i);
  if (n.input_size() > 3 && !n.input(3).empty()) {
    std::optional<Value> a = input(n, 3);
    if (!a || a->data.size() != m) return std::nullopt;
    axes = a->data;
  }
  if (n.input_size() > 4 && !n.input(4).empty()) {
    std::optional<Value> s = input(n, 4);
    if (!s || s->data.size() != m) return std::nullopt;
    steps = s->data;
  }
  std::vector<int64_t> first(r, 0), step(r, 1), count = v->dims;
  for (size_t i = 0; i < m; ++i) {
    std::optional<int64_t> k = axis_in(axes[i], r);
    if (!k || steps[i] == 0 || steps[i] == std::numeric_limits<int64_t>::min()) return std::nullopt;
    const int64_t dim = v->dims[static_cast<size_t>(*k)];
    int64_t b = starts->data[i], e = ends->data[i];
    b = b < 0 ? b + dim : b;
    e = e < 0 ? e + dim : e;
    if (steps[i] > 0) {
      b = std::clamp(b, int64_t(0), dim);
      e = std::clamp(e, int64_t(0), dim);
      count[static_cast<size_t>(*k)] = e > b ? (e - b - 1) / steps[i] + 1 : 0;
    } else {
      b = std::clamp(b, int64_t(-1), dim - 1);
      e = std::clamp(e, int64_t(-1), dim - 1);
      count[static_cast<size_t>(*k)] = b > e ? (b - e - 1) / -steps[i] + 1 : 0;
    }
    first[static_cast<size_t>(*k)] = b;
    step[static_cast<size_t>(*k)] = steps[i];
  }
  const int64_t total = count_of(count);
  if (total < 0) return std::nullopt;
  const std::vector<int64_t> in_strides = strides_of(v->dims), out_strides = strides_of(count);
  Value out{v->type, count, std::vector<int64_t>(static_cast<size_t>(total))};
  for (int64_t o = 0; o < total; ++o) {
    int64_t at = 0;
    for (size_t k = 0; k < r; ++k) at += (first[k] + (o / out_strides[k]) % count[k] * step[k]) * in_strides[k];
    out.data[static_cast<size_t>(o)] = v->data[static_cast<size_t>(at)];
  }
  return out;
}

std::optional<Value> Evaluator::transpose(const onnx::NodeProto& n) {
  std::optional<Value> v = input(n, 0);
  if (!v) return std::nullopt;
  const size_t r = v->dims.size();
  std::vector<int64_t> perm;
  if (const auto* a = attr(n, "perm"))
    perm.assign(a->ints().begin(), a->ints().end());
  else
    for (size_t k = r; k-- > 0;) perm.push_back(static_cast<int64_t>(k));
  if (perm.size() != r) return std::nullopt;
  std::vector<int64_t> dims(r);
  std::set<int64_t> seen;
  for (size_t k = 0; k < r; ++k) {
    if (perm[k] < 0 || perm[k] >= static_cast<int64_t>(r) || !seen.insert(perm[k]).second) return std::nullopt;
    dims[k] = v->dims[static_cast<size_t>(perm[k])];
  }
  const std::vector<int64_t> in_strides = strides_of(v->dims), out_strides = strides_of(dims);
  Value out{v->type, dims, std::vector<int64_t>(v->data.size())};
  for (size_t o = 0; o < v->data.size(); ++o) {
    int64_t at = 0;
    for (size_t k = 0; k < r; ++k)
      at += (static_cast<int64_t>(o) / out_strides[k]) % dims[k] * in_strides[static_cast<size_t>(perm[k])];
    out.data[o] = v->data[static_cast<size_t>(at)];
  }
  return out;
}

std::optional<Value> Evaluator::gather(const onnx::NodeProto& n) {
  if (const auto* a = attr(n, "axis"); a && a->i() != 0) return std::nullopt;
  std::optional<Value> data = input(n, 0), idx = input(n, 1);
  if (!data || !idx || data->dims.size() != 1) return std::nullopt;
  Value r{data->type, idx->dims, {}};
  const auto len = static_cast<int64_t>(data->data.size());
  for (int64_t i : idx->data) {
    if (i < -len || i >= len) return std::nullopt;
    r.data.push_back(data->data[static_cast<size_t>(i < 0 ? i + len : i)]);
  }
  return r;
}

std::optional<Value> Evaluator::elementwise(const onnx::NodeProto& n) {
  using TP = onnx::TensorProto;
  const std::string& op = n.op_type();
  std::optional<Value> a = input(n, 0), b = input(n, 1);
  if (!a || !b || a->data.empty() || b->data.empty()) return std::nullopt;
  const bool a_one = a->data.size() == 1 && a->dims.size() <= b->dims.size();
  const bool b_one = b->data.size() == 1 && b->dims.size() <= a->dims.size();
  if (a->dims != b->dims && !a_one && !b_one) return std::nullopt;
  const bool arithmetic = op == "Add" || op == "Sub" || op == "Mul" || op == "Div";
  Value r{arithmetic ? a->type : TP::BOOL, b_one ? a->dims : b->dims, {}};
  const size_t len = std::max(a->data.size(), b->data.size());
  for (size_t i = 0; i < len; ++i) {
    const int64_t x = a->data[a->data.size() == 1 ? 0 : i], y = b->data[b->data.size() == 1 ? 0 : i];
    int64_t z = 0;
    if (op == "Add" || op == "Sub" || op == "Mul") {
      const bool overflow = op == "Add"   ? __builtin_add_overflow(x, y, &z)
                            : op == "Sub" ? __builtin_sub_overflow(x, y, &z)
                                          : __builtin_mul_overflow(x, y, &z);
      if (overflow) return std::nullopt;
      r.data.push_back(z);
      continue;
    }
    if (op == "Div" && (y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1))) return std::nullopt;
    r.data.push_back(op == "Div"              ? x / y
                     : op == "Equal"          ? x == y
                     : op == "Greater"        ? x > y
                     : op == "Less"           ? x < y
                     : op == "GreaterOrEqual" ? x >= y
                     : op == "LessOrEqual"    ? x <= y
                     : op == "And"            ? (x != 0) && (y != 0)
                     : op == "Or"             ? (x != 0) || (y != 0)
                                              : (x != 0) != (y != 0));
  }
  return r;
}

void fold_constant_integers(onnx::GraphProto& g) {
  const ShapeData none;
  Evaluator ev(g, none);
  for (auto& n : *g.mutable_node()) {
    if (!default_domain(n.domain()) || n.op_type() == "Constant" || n.output_size() != 1 || n.output(0).empty() ||
        has_subgraph(n))
      continue;
    std::optional<Value> v = ev.value_of(n.output(0));
    if (!v) continue;
    const Shape dims(v->dims.begin(), v->dims.end());
    Tensor t;
    switch (v->type) {
      case onnx::TensorProto::INT64:
        t = Tensor::from_vector<int64_t>(dims, v->data);
        break;
      case onnx::TensorProto::INT32:
        t = Tensor::from_vector<int32_t>(dims, {v->data.begin(), v->data.end()});
        break;
      case onnx::TensorProto::BOOL:
        t = Tensor::from_vector<bool>(dims, {v->data.begin(), v->data.end()});
        break;
      default:
        continue;  // the narrower integers: left to the node
    }
    n = constant_node(t, n.name(), n.output(0));
  }
}

std::set<int> ancestors(const onnx::GraphProto& g, const std::map<std::string, int>& producer,
                        const std::string& name) {
  std::set<int> seen;
  std::vector<std::string> todo{name};
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    auto p = producer.find(v);
    if (p == producer.end() || !seen.insert(p->second).second) continue;
    for (const auto& in : g.node(p->second).input())
      if (!in.empty()) todo.push_back(in);
  }
  return seen;
}

onnx::ModelProto model_of(const onnx::ModelProto& m, const std::set<int>& nodes) {
  onnx::ModelProto prefix = m;
  auto* pg = prefix.mutable_graph();
  pg->clear_node();
  pg->clear_output();
  pg->clear_value_info();
  for (int i : nodes) *pg->add_node() = m.graph().node(i);
  return prefix;
}

void collect_names(const onnx::GraphProto& g, std::set<std::string>& values, std::set<std::string>& nodes) {
  for (const auto& v : g.input()) values.insert(v.name());
  for (const auto& t : g.initializer()) values.insert(t.name());
  for (const auto& n : g.node()) {
    if (!n.name().empty()) nodes.insert(n.name());
    for (const auto& o : n.output()) values.insert(o);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_names(a.g(), values, nodes);
      for (const auto& sub : a.graphs()) collect_names(sub, values, nodes);
    }
  }
}

std::string unused(const std::string& base, std::set<std::string>& taken) {
  std::string name = base;
  for (int k = 1; taken.count(name); ++k) name = base + "__" + std::to_string(k);
  taken.insert(name);
  return name;
}

void rename_reads(onnx::GraphProto& g, const std::map<std::string, std::string>& rename) {
  std::set<std::string> own, ignored;
  collect_names(g, own, ignored);
  std::map<std::string, std::string> outer;
  for (const auto& [from, to] : rename)
    if (!own.count(from)) outer[from] = to;
  for (auto& n : *g.mutable_node()) {
    for (auto& in : *n.mutable_input()) {
      auto it = outer.find(in);
      if (it != outer.end()) in = it->second;
    }
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rename_reads(*a.mutable_g(), outer);
      for (auto& sub : *a.mutable_graphs()) rename_reads(sub, outer);
    }
  }
  for (auto& o : *g.mutable_output()) {
    auto it = outer.find(o.name());
    if (it != outer.end()) o.set_name(it->second);
  }
}

onnx::NodeProto constant_node(const Tensor& t, const std::string& name, const std::string& output) {
  onnx::NodeProto c;
  c.set_op_type("Constant");
  c.set_name(name);
  c.add_output(output);
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  tensor_to_proto(t, "", a->mutable_t());
  return c;
}

std::vector<std::string> instantiate(const onnx::GraphProto& body, const std::vector<std::string>& inputs,
                                     std::map<std::string, std::string> renamed, const std::string& tag,
                                     std::set<std::string>& values, std::set<std::string>& nodes,
                                     google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
  for (int k = 0; k < body.input_size(); ++k) renamed[body.input(k).name()] = inputs.at(static_cast<size_t>(k));
  for (const auto& bn : body.node())
    for (const auto& o : bn.output())
      if (!o.empty()) renamed[o] = unused(o + tag, values);
  auto read = [&](const std::string& v) {
    auto it = renamed.find(v);
    return it == renamed.end() ? v : it->second;
  };
  for (const auto& bn : body.node()) {
    onnx::NodeProto& c = *out.Add();
    c = bn;
    c.set_name(bn.name().empty() ? std::string() : unused(bn.name() + tag, nodes));
    for (auto& in : *c.mutable_input())
      if (!in.empty()) in = read(in);
    for (auto& o : *c.mutable_output())
      if (!o.empty()) o = read(o);
    for (auto& a : *c.mutable_attribute()) {
      if (a.has_g()) rename_reads(*a.mutable_g(), renamed);
      for (auto& sub : *a.mutable_graphs()) rename_reads(sub, renamed);
    }
  }
  std::vector<std::string> outs;
  for (const auto& o : body.output()) outs.push_back(read(o.name()));
  return outs;
}

}  // namespace graphrun::passes::static_values
