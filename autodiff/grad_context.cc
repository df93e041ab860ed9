// GradContext: node emission and the opset-aware building blocks gradient rules share
// (ReduceSum/Squeeze/Unsqueeze/Slice/Pad changed signature across opsets; broadcasting is undone here).
#include "autodiff/grad_context.h"

#include <algorithm>
#include <climits>
#include <sstream>

#include "graph/op_table.h"

namespace graphrun::autodiff {

namespace {

Tensor scalar_tensor(double v, DType t, bool one_d) {
  Shape s = one_d ? Shape{1} : Shape{};
  switch (t) {
    case DType::F32: return Tensor::from_vector<float>(s, {static_cast<float>(v)});
    case DType::F64: return Tensor::from_vector<double>(s, {v});
    case DType::I64: return Tensor::from_vector<int64_t>(s, {static_cast<int64_t>(v)});
    case DType::I32: return Tensor::from_vector<int32_t>(s, {static_cast<int32_t>(v)});
    default: GR_FAIL("gradient: constants of type " << dtype_name(t) << " are not supported (use f32 or f64)");
  }
}

}  // namespace

DType ValueTypes::dtype(const std::string& v) {
  if (v.empty()) return DType::Undefined;
  auto m = memo_.find(v);
  if (m != memo_.end()) return m->second;
  if (const ValueInfo* vi = g_.info(v); vi && vi->dtype != DType::Undefined) return memo_[v] = vi->dtype;
  if (auto it = g_.initializers.find(v); it != g_.initializers.end()) return memo_[v] = it->second.dtype();
  auto p = producer_.find(v);
  if (p == producer_.end()) {
    producer_.clear();
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (const auto& o : g_.nodes[i].outputs)
        if (!o.empty()) producer_[o] = static_cast<int>(i);
    p = producer_.find(v);
    if (p == producer_.end()) return DType::Undefined;
  }
  const Node n = g_.nodes[p->second];  // a copy: recursion below may not grow the graph, but be safe
  size_t out_index = std::find(n.outputs.begin(), n.outputs.end(), v) - n.outputs.begin();
  DType t = DType::Undefined;
  // Outputs of a fixed type (comparisons, Shape, MaxPool's Indices...) are op table facts.
  DType fixed = DType::Undefined;
  if (const OpFacts* f = op_table().find(n)) {
    auto it = f->output_dtypes.find(static_cast<int>(out_index));
    if (it != f->output_dtypes.end()) fixed = it->second;
  }
  if (n.op_type == "Cast") t = static_cast<DType>(n.attr_i("to", 1));
  else if (fixed != DType::Undefined) t = fixed;
  else if (n.op_type == "Constant" && n.attr("value")) t = n.attr("value")->t.dtype();
  else if (n.op_type == "Constant") t = n.has_attr("value_float") || n.has_attr("value_floats") ? DType::F32 : DType::I64;
  else if (n.op_type == "ConstantOfShape") t = n.attr("value") ? n.attr("value")->t.dtype() : DType::F32;
  else if (n.op_type == "Where") t = dtype(n.inputs.at(1));
  else {
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      t = dtype(in);
      if (t != DType::Undefined) break;
    }
  }
  return memo_[v] = t;
}

GradContext::GradContext(Graph& g, int node_index, ValueTypes& types, std::vector<std::string> output_grads,
                         std::vector<bool> input_needs_grad)
    : g_(g), index_(node_index), fwd_(g.nodes.at(node_index)), types_(types), dys_(std::move(output_grads)),
      needs_(std::move(input_needs_grad)) {}

const std::string& GradContext::in(size_t i) const {
  static const std::string none;
  return i < fwd_.inputs.size() ? fwd_.inputs[i] : none;
}

const std::string& GradContext::out(size_t i) const {
  static const std::string none;
  return i < fwd_.outputs.size() ? fwd_.outputs[i] : none;
}

const std::string& GradContext::dy(size_t i) const {
  static const std::string none;
  return i < dys_.size() ? dys_[i] : none;
}

std::string GradContext::fwd_output(size_t i) {
  if (fwd_.has_output(i)) return fwd_.outputs[i];
  static const char* hints[] = {"out", "saved1", "saved2", "saved3", "saved4"};
  std::string base = (fwd_.name.empty() ? fwd_.outputs.at(0) : fwd_.name) + "_" + (i < 5 ? hints[i] : "saved");
  if (fwd_.op_type == "MaxPool" && i == 1) base = fwd_.outputs.at(0) + "_indices";
  if (fwd_.op_type == "Dropout" && i == 1) base = fwd_.outputs.at(0) + "_mask";
  if (fwd_.op_type == "SoftmaxCrossEntropyLoss" && i == 1) base = fwd_.outputs.at(0) + "_log_prob";
  if (fwd_.op_type == "LayerNormalization" && (i == 1 || i == 2)) base = fwd_.outputs.at(0) + (i == 1 ? "_mean" : "_invstd");
  std::string name = g_.unique_name(base);
  if (fwd_.outputs.size() <= i) fwd_.outputs.resize(i + 1);
  fwd_.outputs[i] = name;
  Node& n = g_.nodes.at(index_);
  if (n.outputs.size() <= i) n.outputs.resize(i + 1);
  n.outputs[i] = name;
  return name;
}

std::string GradContext::dy_or_zeros(size_t i) {
  if (!dy(i).empty()) return dy(i);
  return zeros_like(fwd_output(i));
}

void GradContext::set_dx(size_t i, const std::string& grad) {
  GR_CHECK(needs(i), "internal error: the gradient rule of " << fwd_.describe() << " built a gradient for input "
                                                            << i << ", which needs none");
  dx_[i] = grad;
  if (!g_.info(grad)) {
    if (const ValueInfo* xi = g_.info(in(i))) g_.values[grad] = *xi;
  }
}

ValueInfo GradContext::type_of(const std::string& v) const {
  if (const ValueInfo* vi = g_.info(v); vi && vi->has_shape) return *vi;
  if (auto it = g_.initializers.find(v); it != g_.initializers.end()) {
    ValueInfo r{it->second.dtype(), true, {}};
    for (int64_t d : it->second.shape()) r.shape.push_back(Dim(d));
    return r;
  }
  if (const ValueInfo* vi = g_.info(v)) return *vi;
  return ValueInfo{};
}

int GradContext::rank(const std::string& v) const {
  const ValueInfo* vi = g_.info(v);
  if (vi && vi->has_shape) return static_cast<int>(vi->shape.size());
  if (auto it = g_.initializers.find(v); it != g_.initializers.end()) return it->second.rank();
  return -1;
}

bool GradContext::static_shape(const std::string& v, Shape& s) const {
  if (auto it = g_.initializers.find(v); it != g_.initializers.end()) {
    s = it->second.shape();
    return true;
  }
  const ValueInfo* vi = g_.info(v);
  if (!vi || !vi->fully_known()) return false;
  s = vi->concrete();
  return true;
}

Tensor GradContext::constant_value(const std::string& v) const {
  if (v.empty()) return {};
  if (auto it = g_.initializers.find(v); it != g_.initializers.end()) return it->second;
  int p = g_.producer(v);
  if (p < 0) return {};
  const Node& n = g_.nodes[p];
  if (n.op_type != "Constant") return {};
  if (const Attribute* a = n.attr("value")) return a->t;
  if (const Attribute* a = n.attr("value_float")) return Tensor::scalar<float>(a->f);
  if (const Attribute* a = n.attr("value_int")) return Tensor::scalar<int64_t>(a->i);
  if (const Attribute* a = n.attr("value_ints"))
    return Tensor::from_vector<int64_t>({static_cast<int64_t>(a->ints.size())}, a->ints);
  if (const Attribute* a = n.attr("value_floats"))
    return Tensor::from_vector<float>({static_cast<int64_t>(a->floats.size())}, a->floats);
  return {};
}

std::string GradContext::fresh(const std::string& what) {
  std::string base = fwd_.name.empty() ? fwd_.outputs.at(0) : fwd_.name;
  return g_.unique_name(base + "_grad_" + what);
}

std::vector<std::string> GradContext::op_n(const std::string& type, const std::vector<std::string>& inputs,
                                           const std::vector<bool>& want, std::map<std::string, Attribute> attrs,
                                           const std::string& domain) {
  Node n;
  n.op_type = type;
  n.domain = domain;
  n.inputs = inputs;
  n.attrs = std::move(attrs);
  n.name = fresh(type);
  for (size_t i = 0; i < want.size(); ++i) n.outputs.push_back(!want[i] ? "" : i == 0 ? n.name : fresh(type));
  if (!domain.empty() && !g_.opsets.count(domain)) g_.opsets[domain] = 1;
  std::vector<std::string> outs = n.outputs;
  g_.add_node(std::move(n));
  return outs;
}

std::string GradContext::op(const std::string& type, const std::vector<std::string>& inputs,
                            std::map<std::string, Attribute> attrs, const std::string& domain) {
  return op_n(type, inputs, {true}, std::move(attrs), domain)[0];
}

std::string GradContext::scalar(double v, DType t) {
  std::ostringstream key;
  key.precision(17);
  key << dtype_name(t) << ":" << v;
  auto it = types_.scalars.find(key.str());
  if (it != types_.scalars.end()) return it->second;
  std::string r = op("Constant", {}, {{"value", Attribute::Tens(scalar_tensor(v, t, false))}});
  types_.scalars[key.str()] = r;
  types_.set(r, t);
  g_.values[r] = ValueInfo{t, true, {}};
  return r;
}

std::string GradContext::ints(const std::vector<int64_t>& v) {
  std::string r = op("Constant", {}, {{"value", Attribute::Tens(Tensor::from_vector<int64_t>(
                                                     {static_cast<int64_t>(v.size())}, v))}});
  g_.values[r] = ValueInfo{DType::I64, true, {Dim(static_cast<int64_t>(v.size()))}};
  return r;
}

std::string GradContext::shape_of(const std::string& v) {
  Shape s;
  if (static_shape(v, s)) return ints(s);
  return op("Shape", {v});
}

std::string GradContext::reshape_target(const std::string& v) {
  const ValueInfo vi = type_of(v);
  if (vi.has_shape) {
    std::vector<int64_t> dims;
    int unknown = 0;
    for (const Dim& d : vi.shape) {
      dims.push_back(d.known() ? d.size : -1);
      unknown += !d.known();
    }
    // A 0 would copy the input's dim under Reshape's default allowzero=0: only safe to write when none.
    bool zero = false;
    for (int64_t d : dims) zero |= d == 0;
    if (unknown <= 1 && !zero) return ints(dims);
  }
  return op("Shape", {v});
}

std::string GradContext::zeros_like(const std::string& v) {
  DType t = dtype(v);
  std::string r = op("ConstantOfShape", {shape_of(v)}, {{"value", Attribute::Tens(scalar_tensor(0, t, true))}});
  types_.set(r, t);
  if (const ValueInfo* vi = g_.info(v)) g_.values[r] = *vi;
  return r;
}

std::string GradContext::reduce_sum(const std::string& x, const std::vector<int64_t>& axes, bool keepdims) {
  std::map<std::string, Attribute> a{{"keepdims", Attribute::Int(keepdims ? 1 : 0)}};
  if (opset() >= 13) return op("ReduceSum", {x, ints(axes)}, a);
  if (!axes.empty()) a["axes"] = Attribute::Ints(axes);
  return op("ReduceSum", {x}, a);
}

std::string GradContext::unsqueeze(const std::string& x, const std::vector<int64_t>& axes) {
  if (opset() >= 13) return op("Unsqueeze", {x, ints(axes)});
  return op("Unsqueeze", {x}, {{"axes", Attribute::Ints(axes)}});
}

std::string GradContext::squeeze(const std::string& x, const std::vector<int64_t>& axes) {
  if (opset() >= 13) return op("Squeeze", {x, ints(axes)});
  return op("Squeeze", {x}, {{"axes", Attribute::Ints(axes)}});
}

std::string GradContext::reshape(const std::string& x, const std::string& shape) { return op("Reshape", {x, shape}); }

std::string GradContext::slice(const std::string& x, const std::vector<int64_t>& starts,
                               const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                               const std::vector<int64_t>& steps) {
  if (opset() >= 10) {
    std::vector<std::string> ins{x, ints(starts), ints(ends), ints(axes)};
    if (!steps.empty()) ins.push_back(ints(steps));
    return op("Slice", ins);
  }
  for (int64_t s : steps)
    GR_CHECK(s == 1, fwd_.describe() << ": its gradient needs a strided Slice, which needs opset >= 10");
  return op("Slice", {x}, {{"starts", Attribute::Ints(starts)}, {"ends", Attribute::Ints(ends)},
                           {"axes", Attribute::Ints(axes)}});
}

std::string GradContext::pad(const std::string& x, const std::vector<int64_t>& pads) {
  if (opset() >= 11) return op("Pad", {x, ints(pads)});
  return op("Pad", {x}, {{"pads", Attribute::Ints(pads)}});
}

std::string GradContext::transpose(const std::string& x, const std::vector<int64_t>& perm) {
  return op("Transpose", {x}, {{"perm", Attribute::Ints(perm)}});
}

std::string GradContext::reduce_to(const std::string& grad, const std::string& grad_like, const std::string& x) {
  const ValueInfo xi = type_of(x);
  if (!xi.has_shape) return op("SumToShape", {grad, op("Shape", {x})}, {}, kGraphrunDomain);
  const ValueInfo gi = type_of(grad_like);
  return reduce_to_info(grad, &gi, xi, x);
}

std::string GradContext::reduce_to_info(const std::string& grad, const ValueInfo* gi, const ValueInfo& xi,
                                        const std::string& x_for_shape) {
  if (gi && gi->has_shape && xi.has_shape && gi->shape.size() >= xi.shape.size()) {
    const size_t lead = gi->shape.size() - xi.shape.size();
    std::vector<int64_t> axes;
    for (size_t j = 0; j < lead; ++j) axes.push_back(static_cast<int64_t>(j));
    bool decided = true;
    for (size_t j = 0; j < xi.shape.size() && decided; ++j) {
      const Dim& dx = xi.shape[j];
      const Dim& dg = gi->shape[lead + j];
      if (dx.known() ? dx == dg : (!dx.param.empty() && dx == dg)) continue;
      if (dx.known() && dx.size == 1) axes.push_back(static_cast<int64_t>(lead + j));
      else decided = false;
    }
    if (decided) {
      if (axes.empty()) return grad;
      // Only leading axes summed (a bias): no kept axes to remove afterwards.
      if (xi.shape.empty() || axes.size() == lead) return reduce_sum(grad, axes, false);
      std::string r = reduce_sum(grad, axes, true);
      if (lead == 0) return r;
      if (xi.fully_known()) return reshape(r, ints(xi.concrete()));
      std::vector<int64_t> lead_axes(axes.begin(), axes.begin() + lead);
      return squeeze(r, lead_axes);
    }
  }
  return op("SumToShape", {grad, op("Shape", {x_for_shape})}, {}, kGraphrunDomain);
}

}  // namespace graphrun::autodiff
