// Validation of untrusted ONNX models (graph/validate.h): graph facts, attributes, ranks, sizes, types.
// ONNX 1.12's shape inference divides by strides and indexes pads, dilations and dimensions by the
// ranks it sees without checking them; graphrun checks first and names what is wrong.
#include "graph/validate.h"

#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun {

bool sequence_or_optional_op(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  return (n.domain().empty() || n.domain() == "ai.onnx") &&
         (op.rfind("Sequence", 0) == 0 || op == "SplitToSequence" || op == "ConcatFromSequence" ||
          op.rfind("Optional", 0) == 0);
}

std::string proto_node_desc(const onnx::NodeProto& np, int index) {
  Node n;
  n.name = np.name().empty() ? "#" + std::to_string(index) : np.name();
  n.op_type = np.op_type();
  n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
  return n.describe();
}

namespace {

using onnx::AttributeProto;
using onnx::NodeProto;
using onnx::TensorProto;
using onnx::TypeProto;

// Strides, pads, kernel sizes and repeats beyond this are no real model's.
constexpr int64_t kMaxAttr = (int64_t{1} << 31) - 1;
// Integer constants (shapes, axes, pads) are read when they are at most this long.
constexpr int64_t kMaxConstInts = 1 << 16;

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

int64_t default_opset(const onnx::ModelProto& m) {
  for (const auto& op : m.opset_import())
    if (is_default_domain(op.domain())) return op.version();
  return 0;
}

std::string range_str(int64_t lo, int64_t hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

// Element type names as graphrun prints them ("f32"), or the ONNX number when graphrun has none.
std::string elem_name(int32_t t) {
  const char* n = dtype_name(static_cast<DType>(t));
  return std::strcmp(n, "undefined") ? n : "type " + std::to_string(t);
}

std::string type_str(const TypeProto* t) {
  if (!t || !t->has_tensor_type()) return "of unknown type";
  const auto& tt = t->tensor_type();
  std::string s = tt.elem_type() ? elem_name(tt.elem_type()) : "?";
  if (!tt.has_shape()) return s;
  s += "[";
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    s += (i ? "," : "") + (d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : "?");
  }
  return s + "]";
}

// Reads the integers of a small int32/int64 tensor (raw or typed); nullopt for anything else.
std::optional<std::vector<int64_t>> tensor_ints(const TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxConstInts) return std::nullopt;
  std::vector<int64_t> v;
  if (t.data_type() == TensorProto::INT64) {
    if (t.has_raw_data()) {
      if (t.raw_data().size() != static_cast<size_t>(n) * 8) return std::nullopt;
      v.resize(n);
      if (n) std::memcpy(v.data(), t.raw_data().data(), n * 8);
    } else {
      if (t.int64_data_size() != n) return std::nullopt;
      v.assign(t.int64_data().begin(), t.int64_data().end());
    }
  } else if (t.data_type() == TensorProto::INT32) {
    if (t.has_raw_data()) {
      if (t.raw_data().size() != static_cast<size_t>(n) * 4) return std::nullopt;
      std::vector<int32_t> w(n);
      if (n) std::memcpy(w.data(), t.raw_data().data(), n * 4);
      v.assign(w.begin(), w.end());
    } else {
      if (t.int32_data_size() != n) return std::nullopt;
      v.assign(t.int32_data().begin(), t.int32_data().end());
    }
  } else {
    return std::nullopt;
  }
  return v;
}

// What node checks read of the model: value types and integer constants by name.
struct Facts {
  std::string what;
  int64_t opset = 0;
  std::map<std::string, const TypeProto*> types;
  std::map<std::string, std::vector<int64_t>> ints;  // small integer initializers and Constant outputs
  std::deque<TypeProto> owned;                       // types made for initializers
};

void add_types(Facts& f, const onnx::GraphProto& g) {
  for (const auto& t : g.initializer()) {
    TypeProto& tp = f.owned.emplace_back();
    auto* tt = tp.mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto* shape = tt->mutable_shape();  // a scalar has a shape too: rank 0
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    f.types[t.name()] = &tp;
    if (auto v = tensor_ints(t)) f.ints[t.name()] = *v;
  }
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto& v : *list)
      if (v.has_type() && !f.types.count(v.name())) f.types[v.name()] = &v.type();
  for (const auto& n : g.node()) {
    if (n.op_type() != "Constant" || !is_default_domain(n.domain()) || n.output_size() < 1) continue;
    for (const auto& a : n.attribute()) {
      if (a.name() == "value" && a.has_t()) {
        if (auto v = tensor_ints(a.t())) f.ints[n.output(0)] = *v;
      } else if (a.name() == "value_ints") {
        f.ints[n.output(0)].assign(a.ints().begin(), a.ints().end());
      } else if (a.name() == "value_int") {
        f.ints[n.output(0)] = {a.i()};
      }
    }
  }
}

Facts facts_of(const onnx::ModelProto& m, const std::string& what) {
  Facts f;
  f.what = what;
  f.opset = default_opset(m);
  add_types(f, m.graph());
  return f;
}

// One node under check: its attributes, its inputs' types and constants, and one way to fail.
class NodeCheck {
 public:
  NodeCheck(const NodeProto& n, int index, const Facts& f) : n_(n), index_(index), f_(f) {}

  [[noreturn]] void fail(const std::string& msg) const {
    GR_FAIL(f_.what << ": " << proto_node_desc(n_, index_) << ": " << msg);
  }
  const std::string& op() const { return n_.op_type(); }
  int64_t opset() const { return f_.opset; }

  const AttributeProto* attr(const std::string& name) const {
    for (const auto& a : n_.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  std::optional<std::vector<int64_t>> ints(const std::string& name) const {
    const AttributeProto* a = attr(name);
    if (!a) return std::nullopt;
    if (a->type() != AttributeProto::INTS && !(a->type() == AttributeProto::UNDEFINED && a->ints_size()))
      fail("attribute '" + name + "' must be a list of integers");
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }
  std::optional<int64_t> int_attr(const std::string& name) const {
    const AttributeProto* a = attr(name);
    if (!a) return std::nullopt;
    if (a->type() != AttributeProto::INT && !(a->type() == AttributeProto::UNDEFINED && a->has_i()))
      fail("attribute '" + name + "' must be an integer");
    return a->i();
  }
  std::optional<std::string> str_attr(const std::string& name) const {
    const AttributeProto* a = attr(name);
    if (!a) return std::nullopt;
    if (a->type() != AttributeProto::STRING && !(a->type() == AttributeProto::UNDEFINED && a->has_s()))
      fail("attribute '" + name + "' must be a string");
    return a->s();
  }

  // Each value of a list attribute within [lo, hi].
  void each_in(const std::string& name, const std::optional<std::vector<int64_t>>& v, int64_t lo, int64_t hi) const {
    if (!v) return;
    for (int64_t x : *v)
      if (x < lo || x > hi)
        fail("attribute '" + name + "' is " + shape_str(*v) + "; each value must be in " + range_str(lo, hi));
  }
  void int_in(const std::string& name, int64_t lo, int64_t hi) const {
    auto v = int_attr(name);
    if (v && (*v < lo || *v > hi))
      fail("attribute '" + name + "' is " + std::to_string(*v) + "; it must be in " + range_str(lo, hi));
  }
  void one_of(const std::string& name, std::initializer_list<const char*> allowed) const {
    auto v = str_attr(name);
    if (!v) return;
    std::string list;
    for (const char* a : allowed) {
      if (*v == a) return;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    fail("attribute '" + name + "' is '" + *v + "'; it must be one of " + list);
  }

  bool has_input(int i) const { return i < n_.input_size() && !n_.input(i).empty(); }
  const std::string& node_input(int i) const { return n_.input(i); }
  int num_inputs() const { return n_.input_size(); }
  const TypeProto* type(int i) const {
    if (!has_input(i)) return nullptr;
    auto it = f_.types.find(n_.input(i));
    return it == f_.types.end() ? nullptr : it->second;
  }
  std::string input_desc(int i) const { return "input '" + n_.input(i) + "' (" + type_str(type(i)) + ")"; }
  // Rank of input i, or -1 when unknown.
  int rank(int i) const {
    const TypeProto* t = type(i);
    if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return -1;
    return t->tensor_type().shape().dim_size();
  }
  // Size of dimension d of input i, or -1 when unknown.
  int64_t dim(int i, int d) const {
    const TypeProto* t = type(i);
    if (rank(i) <= d || d < 0) return -1;
    const auto& dd = t->tensor_type().shape().dim(d);
    return dd.has_dim_value() ? dd.dim_value() : -1;
  }
  int32_t elem(int i) const {
    const TypeProto* t = type(i);
    return t && t->has_tensor_type() ? t->tensor_type().elem_type() : 0;
  }
  std::optional<std::vector<int64_t>> const_ints(int i) const {
    if (!has_input(i)) return std::nullopt;
    auto it = f_.ints.find(n_.input(i));
    if (it == f_.ints.end()) return std::nullopt;
    return it->second;
  }

  // A shape an op will allocate must fit the tensor limit.
  void fits(DType dt, const Shape& shape, const std::string& what) const {
    try {
      checked_numel(dt, shape, what);
    } catch (const Error& e) {
      fail(e.what());
    }
  }

  // Input i's rank within [lo, hi] when known.
  void rank_in(int i, int lo, int hi, const std::string& why) const {
    const int r = rank(i);
    if (r >= 0 && (r < lo || r > hi))
      fail(input_desc(i) + " has rank " + std::to_string(r) + "; " + op() + " needs " +
           (lo == hi  ? "rank " + std::to_string(lo)
            : hi > 64 ? "rank " + std::to_string(lo) + " or more"
                      : "rank " + std::to_string(lo) + " to " + std::to_string(hi)) +
           (why.empty() ? "" : " (" + why + ")"));
  }
  // An axis against rank r: in [-r, r - 1], or [-r, r] when `end_ok` (Flatten's axis may be r).
  void axis_in(const std::string& what, int64_t axis, int r, bool end_ok = false) const {
    const int64_t hi = end_ok ? r : r - 1;
    if (axis < -r || axis > hi)
      fail(what + " is " + std::to_string(axis) + "; for " + input_desc(0) + " it must be in " + range_str(-r, hi));
  }
  // Axes (attribute or input) against rank r, each in range and none repeated.
  void axes_in(const std::string& what, const std::vector<int64_t>& axes, int r) const {
    std::set<int64_t> seen;
    for (int64_t a : axes) {
      if (a < -r || a >= r)
        fail(what + " is " + shape_str(axes) + "; for " + input_desc(0) + " each axis must be in " +
             range_str(-r, r - 1));
      if (!seen.insert(a < 0 ? a + r : a).second) fail(what + " " + shape_str(axes) + " names an axis twice");
    }
  }

 private:
  const NodeProto& n_;
  int index_;
  const Facts& f_;
};

// ---- before the checker ----

void check_value_type(const onnx::ValueInfoProto& v, const char* role, const std::string& what, bool need_elem) {
  const std::string name = std::string(role) + " '" + v.name() + "'";
  if (!v.has_type()) return;
  const TypeProto& t = v.type();
  switch (t.value_case()) {
    case TypeProto::kTensorType:
      break;
    case TypeProto::kOptionalType:
    case TypeProto::kSequenceType:
      GR_FAIL(what << ": " << name << " has " << (t.has_optional_type() ? "an optional" : "a sequence")
                   << " type: " << kSequenceRefusal << " " << kSequenceRefusalWhy);
    case TypeProto::VALUE_NOT_SET:
      return;
    default:
      GR_FAIL(what << ": " << name << " is not a tensor (map, sparse or opaque types are not supported)");
  }
  const auto& tt = t.tensor_type();
  const int32_t et = tt.elem_type();
  if (et || need_elem) {
    if (!TensorProto::DataType_IsValid(et) || et == TensorProto::UNDEFINED)
      GR_FAIL(what << ": " << name << " has element type " << et << ", which is not an ONNX type");
    if (dtype_size(static_cast<DType>(et)) == 0)
      GR_FAIL(what << ": " << name << " has element type "
                   << TensorProto::DataType_Name(static_cast<TensorProto::DataType>(et))
                   << ", which graphrun does not support");
  }
  if (!tt.has_shape()) return;
  Shape known;
  bool all_known = true;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() < 0)
      GR_FAIL(what << ": " << name << " has dimension " << d.dim_value()
                   << " (a dimension is a size >= 0 or a symbol such as 'N')");
    if (d.has_dim_value())
      known.push_back(d.dim_value());
    else
      all_known = false;
  }
  // A symbolic dimension is at least 1 at run time, so the known part alone must fit.
  checked_numel(et ? static_cast<DType>(et) : DType::U8, known,
                what + ": " + name + (all_known ? "" : " (its known dimensions)"));
}

// A tensor in the file (initializer or attribute): a supported type, sane dims, and the data its shape promises.
void check_tensor_proto(const TensorProto& t, const std::string& where) {
  if (t.data_location() == TensorProto::EXTERNAL) return;  // refused with its own message elsewhere
  const int32_t et = t.data_type();
  if (!TensorProto::DataType_IsValid(et) || et == TensorProto::UNDEFINED)
    GR_FAIL(where << ": element type " << et << " is not an ONNX type");
  const DType dt = static_cast<DType>(et);
  if (dtype_size(dt) == 0)
    GR_FAIL(where << ": element type " << TensorProto::DataType_Name(static_cast<TensorProto::DataType>(et))
                  << " is not supported");
  Shape shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape) GR_CHECK(d >= 0, where << ": negative dimension " << d << " in shape " << shape_str(shape));
  const int64_t n = checked_numel(dt, shape, where);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dt);
  if (t.has_raw_data()) {
    GR_CHECK(t.raw_data().size() == bytes, where << ": raw_data holds " << t.raw_data().size() << " bytes, but "
                                                 << dtype_name(dt) << shape_str(shape) << " needs " << bytes);
    return;
  }
  int64_t have;
  switch (dt) {
    case DType::F32:
      have = t.float_data_size();
      break;
    case DType::F64:
      have = t.double_data_size();
      break;
    case DType::I64:
      have = t.int64_data_size();
      break;
    case DType::U32:
    case DType::U64:
      have = t.uint64_data_size();
      break;
    default:
      have = t.int32_data_size();
      break;
  }
  GR_CHECK(have == n,
           where << ": holds " << have << " values, but " << dtype_name(dt) << shape_str(shape) << " needs " << n);
}

bool is_window_op(const NodeProto& n) {
  static const std::set<std::string> onnx_ops = {"Conv",    "ConvTranspose", "ConvInteger", "QLinearConv",
                                                 "MaxPool", "AveragePool",   "LpPool",      "MaxUnpool"};
  static const std::set<std::string> own_ops = {"ConvGrad", "ConvTransposeGrad", "MaxPoolGrad", "AveragePoolGrad"};
  return is_default_domain(n.domain()) ? onnx_ops.count(n.op_type()) != 0
                                       : n.domain() == kGraphrunDomain && own_ops.count(n.op_type()) != 0;
}

// Conv-like attributes on their own: positive sizes, list lengths that agree, known modes.
void check_window_attrs(const NodeCheck& c) {
  const auto ks = c.ints("kernel_shape"), st = c.ints("strides"), dl = c.ints("dilations"), pd = c.ints("pads");
  const auto opad = c.ints("output_padding"), oshape = c.ints("output_shape");
  c.each_in("kernel_shape", ks, 1, kMaxAttr);
  c.each_in("strides", st, 1, kMaxAttr);
  c.each_in("dilations", dl, 1, kMaxAttr);
  c.each_in("pads", pd, 0, kMaxAttr);
  c.each_in("output_padding", opad, 0, kMaxAttr);
  c.each_in("output_shape", oshape, 0, kMaxAttr);
  c.int_in("group", 1, kMaxAttr);
  c.int_in("ceil_mode", 0, 1);
  c.int_in("count_include_pad", 0, 1);
  c.int_in("storage_order", 0, 1);
  c.int_in("p", 1, kMaxAttr);
  c.one_of("auto_pad", {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"});
  const auto auto_pad = c.str_attr("auto_pad");
  if (auto_pad && *auto_pad != "NOTSET" && pd)
    c.fail("attributes 'pads' and 'auto_pad' " + *auto_pad + " exclude each other; give one of them");
  // All per-axis lists must agree on the number of spatial axes.
  std::optional<size_t> axes;
  std::string first;
  auto agree = [&](const char* name, const std::optional<std::vector<int64_t>>& v, size_t per_axis) {
    if (!v) return;
    if (v->size() % per_axis)
      c.fail(std::string("attribute '") + name + "' has " + std::to_string(v->size()) + " values; it needs " +
             std::to_string(per_axis) + " per spatial axis");
    const size_t n = v->size() / per_axis;
    if (!axes) {
      axes = n;
      first = name;
    } else if (*axes != n) {
      c.fail(std::string("attribute '") + name + "' has " + std::to_string(v->size()) + " values but '" + first +
             "' gives " + std::to_string(*axes) + " spatial axes, so it needs " + std::to_string(*axes * per_axis));
    }
  };
  agree("kernel_shape", ks, 1);
  agree("strides", st, 1);
  agree("dilations", dl, 1);
  agree("pads", pd, 2);
  agree("output_padding", opad, 1);
  agree("output_shape", oshape, 1);
}

void check_plain_attrs(const NodeCheck& c) {
  const std::string& op = c.op();
  if (op == "Pad") {
    c.one_of("mode", {"constant", "reflect", "edge"});
    c.each_in("pads", c.ints("pads"), -kMaxAttr, kMaxAttr);
    c.each_in("paddings", c.ints("paddings"), -kMaxAttr, kMaxAttr);
  } else if (op == "DepthToSpace" || op == "SpaceToDepth") {
    c.int_in("blocksize", 1, kMaxAttr);
    if (op == "DepthToSpace") c.one_of("mode", {"DCR", "CRD"});
  } else if (op == "Split") {
    c.each_in("split", c.ints("split"), 0, int64_t{1} << 40);
  } else if (op == "Transpose") {
    c.each_in("perm", c.ints("perm"), 0, 64);
  } else if (op == "Tile" || op == "Expand" || op == "Reshape") {
    c.int_in("allowzero", 0, 1);
  } else if (op == "ReverseSequence") {
    c.int_in("batch_axis", 0, 1);
    c.int_in("time_axis", 0, 1);
    if (c.int_attr("batch_axis").value_or(1) == c.int_attr("time_axis").value_or(0))
      c.fail("attributes 'batch_axis' and 'time_axis' must differ (one is 0, the other 1)");
  } else if (op == "CumSum") {
    c.int_in("exclusive", 0, 1);
    c.int_in("reverse", 0, 1);
  } else if (op == "Cast" || op == "EyeLike") {
    if (auto to = c.int_attr(op == "Cast" ? "to" : "dtype")) {
      if (!TensorProto::DataType_IsValid(static_cast<int>(*to)) || *to == TensorProto::UNDEFINED ||
          dtype_size(static_cast<DType>(*to)) == 0)
        c.fail(std::string("attribute '") + (op == "Cast" ? "to" : "dtype") + "' is " + std::to_string(*to) +
               ", which is not an element type graphrun supports");
    }
  } else if (op == "Gemm") {
    c.int_in("transA", 0, 1);
    c.int_in("transB", 0, 1);
  } else if (op == "TopK") {
    c.int_in("k", 0, int64_t{1} << 40);
    c.int_in("largest", 0, 1);
    c.int_in("sorted", 0, 1);
  } else if (op == "Trilu") {
    c.int_in("upper", 0, 1);
  } else if (op == "Slice" && c.opset() >= 10) {
    // ONNX 1.12's data propagation of Slice (a slice of a Shape) takes its steps as 32-bit ints: a step beyond
    // them looped until memory ran out, or read outside the shape and crashed, before any check of graphrun's.
    constexpr int64_t kMaxStep = (int64_t{1} << 31) - 1;
    if (auto steps = c.const_ints(4))
      for (int64_t s : *steps)
        if (s == 0 || s < -kMaxStep || s > kMaxStep)
          c.fail("steps " + c.input_desc(4) + " is " + shape_str(*steps) + "; each value must be in " +
                 range_str(-kMaxStep, kMaxStep) + " and not 0");
  }
}

// ---- against the ranks inference found ----

// Conv, ConvTranspose and the pools against their input and weight ranks: ONNX 1.12's inference reads
// dilations[i], pads[i] and input dims(2 + i) for every axis of the weight's kernel without checking.
void check_window_ranks(const NodeCheck& c) {
  const std::string& op = c.op();
  const bool conv = op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "QLinearConv";
  const int xi = 0, wi = !conv ? -1 : op == "QLinearConv" ? 3 : 1;
  if (!conv && !c.ints("kernel_shape")) c.fail("attribute 'kernel_shape' is required");
  const int r = c.rank(xi);
  if (r < 0) return;
  // ONNX reads MaxUnpool's channel count from dimension 1 of the indices, whatever their rank.
  if (op == "MaxUnpool" && c.num_inputs() == 2 && c.rank(1) < 2)
    c.fail("indices " + (c.has_input(1) ? c.input_desc(1) : std::string("(none)")) +
           " must have a known rank of at least 2");
  c.rank_in(xi, 3, 5, "N, C and 1 to 3 spatial axes");
  const size_t sp = static_cast<size_t>(r - 2);
  for (auto [name, per_axis] : {std::pair<const char*, size_t>{"kernel_shape", 1},
                                {"strides", 1},
                                {"dilations", 1},
                                {"pads", 2},
                                {"output_padding", 1},
                                {"output_shape", 1}}) {
    auto v = c.ints(name);
    if (v && v->size() != sp * per_axis)
      c.fail(std::string("attribute '") + name + "' has " + std::to_string(v->size()) + " values; " + c.input_desc(xi) +
             " has " + std::to_string(sp) + " spatial axes, so it needs " + std::to_string(sp * per_axis));
  }
  if (wi < 0) return;
  const int wr = c.rank(wi);
  if (wr >= 0 && wr != r)
    c.fail("weight " + c.input_desc(wi) + " has rank " + std::to_string(wr) + "; it must have the rank of " +
           c.input_desc(xi) + " (" + std::to_string(r) + ")");
  const int64_t group = c.int_attr("group").value_or(1);
  const int64_t C = c.dim(xi, 1), W0 = c.dim(wi, 0), W1 = c.dim(wi, 1);
  if (op == "ConvTranspose") {
    if (C >= 0 && W0 >= 0 && C != W0)
      c.fail(c.input_desc(xi) + " has " + std::to_string(C) + " channels but weight " + c.input_desc(wi) + " expects " +
             std::to_string(W0));
  } else {
    if (C >= 0 && W1 >= 0 && C != W1 * group)
      c.fail(c.input_desc(xi) + " has " + std::to_string(C) + " channels but weight " + c.input_desc(wi) +
             " with group " + std::to_string(group) + " expects " + std::to_string(W1 * group));
    if (W0 >= 0 && W0 % group)
      c.fail("weight " + c.input_desc(wi) + " has " + std::to_string(W0) + " output channels, not divisible by group " +
             std::to_string(group));
  }
  if (C >= 0 && C % group)
    c.fail(c.input_desc(xi) + " has " + std::to_string(C) + " channels, not divisible by group " +
           std::to_string(group));
  if (auto ks = c.ints("kernel_shape"))
    for (size_t i = 0; i < ks->size(); ++i) {
      const int64_t k = c.dim(wi, static_cast<int>(i) + 2);
      if (k >= 0 && k != (*ks)[i])
        c.fail("attribute 'kernel_shape' is " + shape_str(*ks) + " but weight " + c.input_desc(wi) + " has kernel " +
               std::to_string(k) + " on spatial axis " + std::to_string(i));
    }
  if ((op == "Conv" || op == "ConvTranspose") && c.has_input(2) && c.rank(2) >= 0 && c.rank(2) != 1)
    c.fail("bias " + c.input_desc(2) + " must have rank 1");
}

// Ops graphrun does not implement whose ONNX 1.12 inference indexes by an unchecked axis or rank
// (found by fuzzing): checked so that `graphrun show` of such a model does not crash.
const std::set<std::string>& other_unsafe_ops() {
  static const std::set<std::string> ops = {"LayerNormalization", "STFT"};
  return ops;
}

bool needs_checks_before_inference(const NodeProto& n) {
  return is_default_domain(n.domain()) && (is_window_op(n) || other_unsafe_ops().count(n.op_type()));
}

void check_other_unsafe_ranks(const NodeCheck& c) {
  const int r = c.rank(0);
  if (c.op() == "LayerNormalization") {
    if (r >= 0) c.axis_in("attribute 'axis'", c.int_attr("axis").value_or(-1), r);
    c.rank_in(0, 1, 1 << 30, "");
  } else if (c.op() == "STFT") {
    c.rank_in(0, 3, 3, "batch, signal, 1 or 2 components");
  }
}

// The rank-dependent facts of the other ops, on the types inference found.
void check_ranks(const NodeCheck& c) {
  const std::string& op = c.op();
  const int r = c.rank(0);
  const int64_t opset = c.opset();
  auto axis_attr = [&](int64_t def, bool end_ok = false) {
    if (r < 0) return;
    c.axis_in("attribute 'axis'", c.int_attr("axis").value_or(def), r, end_ok);
  };
  if (op == "Flatten") {
    axis_attr(1, true);
  } else if (op == "Softmax" || op == "LogSoftmax") {
    c.rank_in(0, 1, 1 << 30, "");
    axis_attr(opset >= 13 ? -1 : 1);
  } else if (op == "ArgMax" || op == "ArgMin" || op == "Gather" || op == "GatherElements" || op == "Split" ||
             op == "TopK" || op == "ScatterElements" || op == "Scatter" || op == "Concat") {
    c.rank_in(0, 1, 1 << 30, "");
    axis_attr(op == "TopK" ? -1 : 0);
  } else if (op == "Compress") {
    if (c.int_attr("axis")) axis_attr(0);
  } else if (op == "CumSum") {
    c.rank_in(0, 1, 1 << 30, "");
    if (auto a = c.const_ints(1)) {
      if (a->size() != 1) c.fail(c.input_desc(1) + " must hold one axis");
      if (r >= 0) c.axis_in(c.input_desc(1), (*a)[0], r);
    }
  } else if (op == "OneHot") {
    const int ri = c.rank(0);
    if (ri >= 0) c.axis_in("attribute 'axis'", c.int_attr("axis").value_or(-1), ri + 1);
    if (auto d = c.const_ints(1))
      if (d->size() != 1 || (*d)[0] < 1 || (*d)[0] > kMaxAttr)
        c.fail("depth " + shape_str(*d) + " must be one value in " + range_str(1, kMaxAttr));
  } else if (op == "Squeeze" || op == "Unsqueeze") {
    std::optional<std::vector<int64_t>> axes = opset >= 13 ? c.const_ints(1) : c.ints("axes");
    if (axes && r >= 0) {
      const int out_rank = op == "Unsqueeze" ? r + static_cast<int>(axes->size()) : r;
      c.axes_in(opset >= 13 ? c.input_desc(1) : "attribute 'axes'", *axes, out_rank);
      if (op == "Squeeze")
        for (int64_t a : *axes) {
          const int64_t d = c.dim(0, static_cast<int>(a < 0 ? a + r : a));
          if (d >= 0 && d != 1)
            c.fail("axis " + std::to_string(a) + " of " + c.input_desc(0) + " has size " + std::to_string(d) +
                   ", not 1");
        }
    }
  } else if (op.rfind("Reduce", 0) == 0) {
    std::optional<std::vector<int64_t>> axes = c.ints("axes");
    if (op == "ReduceSum" && opset >= 13) axes = c.const_ints(1);
    if (axes && r >= 0) c.axes_in("axes", *axes, r);
    c.int_in("keepdims", 0, 1);
  } else if (op == "Transpose") {
    if (auto perm = c.ints("perm"); perm && r >= 0) {
      std::vector<int64_t> sorted = *perm;
      std::sort(sorted.begin(), sorted.end());
      bool ok = static_cast<int>(perm->size()) == r;
      for (int i = 0; ok && i < r; ++i) ok = sorted[i] == i;
      if (!ok)
        c.fail("attribute 'perm' is " + shape_str(*perm) + "; for " + c.input_desc(0) +
               " it must be a permutation of 0.." + std::to_string(r - 1));
    }
  } else if (op == "Pad") {
    std::optional<std::vector<int64_t>> pads =
        opset < 11 ? (c.ints("pads") ? c.ints("pads") : c.ints("paddings")) : c.const_ints(1);
    if (pads && r >= 0) {
      if (static_cast<int>(pads->size()) != 2 * r)
        c.fail(std::string(opset < 11 ? "attribute 'pads'" : "pads " + c.input_desc(1)) + " has " +
               std::to_string(pads->size()) + " values; " + c.input_desc(0) + " has rank " + std::to_string(r) +
               ", so it needs " + std::to_string(2 * r));
      for (int k = 0; k < r; ++k) {
        const int64_t a = (*pads)[k], b = (*pads)[k + r];
        if (a < -kMaxAttr || a > kMaxAttr || b < -kMaxAttr || b > kMaxAttr)
          c.fail("pads " + shape_str(*pads) + ": each value must be in " + range_str(-kMaxAttr, kMaxAttr));
        const int64_t d = c.dim(0, k);
        if (d >= 0 && d + a + b < 0)
          c.fail("pads " + shape_str(*pads) + " remove more than axis " + std::to_string(k) + " of " + c.input_desc(0) +
                 " holds");
      }
    }
  } else if (op == "Slice") {
    const auto starts = opset < 10 ? c.ints("starts") : c.const_ints(1);
    const auto ends = opset < 10 ? c.ints("ends") : c.const_ints(2);
    const auto axes = opset < 10 ? c.ints("axes") : c.const_ints(3);
    const auto steps = opset < 10 ? std::nullopt : c.const_ints(4);
    if (starts && ends && starts->size() != ends->size())
      c.fail("starts " + shape_str(*starts) + " and ends " + shape_str(*ends) + " differ in length");
    if (axes && starts && axes->size() != starts->size())
      c.fail("axes " + shape_str(*axes) + " and starts " + shape_str(*starts) + " differ in length");
    if (steps && starts && steps->size() != starts->size())
      c.fail("steps " + shape_str(*steps) + " and starts " + shape_str(*starts) + " differ in length");
    if (steps)
      for (int64_t s : *steps)
        if (s == 0) c.fail("steps " + shape_str(*steps) + " must not hold 0");
    if (axes && r >= 0) c.axes_in("axes", *axes, r);
    if (!axes && starts && r >= 0 && static_cast<int>(starts->size()) > r)
      c.fail("starts " + shape_str(*starts) + " has more values than " + c.input_desc(0) + " has axes");
  } else if (op == "Reshape") {
    if (auto s = c.const_ints(1)) {
      const bool allowzero = opset >= 14 && c.int_attr("allowzero").value_or(0) != 0;
      int minus = 0;
      for (size_t i = 0; i < s->size(); ++i) {
        const int64_t d = (*s)[i];
        if (d < -1)
          c.fail("shape " + shape_str(*s) + " holds " + std::to_string(d) + "; sizes must be >= 0, or -1 once");
        if (d == -1 && ++minus > 1) c.fail("shape " + shape_str(*s) + " holds -1 more than once");
        if (d == 0 && !allowzero && r >= 0 && static_cast<int>(i) >= r)
          c.fail("shape " + shape_str(*s) + " copies dimension " + std::to_string(i) + " (0) but " + c.input_desc(0) +
                 " has rank " + std::to_string(r));
      }
      if (allowzero && minus && std::count(s->begin(), s->end(), 0))
        c.fail("shape " + shape_str(*s) + " holds both 0 and -1 with allowzero set");
    }
  } else if (op == "Expand" || op == "ConstantOfShape") {
    const int si = op == "Expand" ? 1 : 0;
    if (auto s = c.const_ints(si)) {
      for (int64_t d : *s)
        if (d < 0) c.fail("shape " + shape_str(*s) + " holds " + std::to_string(d) + "; sizes must be >= 0");
      c.fits(op == "Expand" && c.elem(0) ? static_cast<DType>(c.elem(0)) : DType::F32, *s,
             "shape input '" + c.node_input(si) + "'");
    }
  } else if (op == "Tile") {
    if (auto rep = c.const_ints(1); rep && r >= 0) {
      if (static_cast<int>(rep->size()) != r)
        c.fail("repeats " + shape_str(*rep) + " has " + std::to_string(rep->size()) + " values; " + c.input_desc(0) +
               " has rank " + std::to_string(r));
      for (int64_t v : *rep)
        if (v < 0 || v > kMaxAttr)
          c.fail("repeats " + shape_str(*rep) + ": each value must be in " + range_str(0, kMaxAttr));
    }
  } else if (op == "Gemm") {
    c.rank_in(0, 2, 2, "a matrix");
    c.rank_in(1, 2, 2, "a matrix");
  } else if (op == "MatMul") {
    c.rank_in(0, 1, 1 << 30, "");
    c.rank_in(1, 1, 1 << 30, "");
  } else if (op == "BatchNormalization") {
    // Opsets 7 and 8: spatial=0 keeps statistics per element (C x H x W values), which graphrun has no kernel for.
    if (c.int_attr("spatial").value_or(1) == 0)
      c.fail("attribute spatial=0 (statistics per element, opsets 7 and 8) is not supported: only spatial=1, per channel");
    c.rank_in(0, 2, 1 << 30, "N, C, ...");
    for (int i = 1; i < 5 && i < c.num_inputs(); ++i) {
      c.rank_in(i, 1, 1, "one value per channel");
      const int64_t C = c.dim(0, 1), k = c.dim(i, 0);
      if (C >= 0 && k >= 0 && C != k)
        c.fail(c.input_desc(i) + " has " + std::to_string(k) + " values but " + c.input_desc(0) + " has " +
               std::to_string(C) + " channels");
    }
  } else if (op == "DepthToSpace" || op == "SpaceToDepth") {
    c.rank_in(0, 4, 4, "N, C, H, W");
  } else if (op == "EyeLike") {
    c.rank_in(0, 2, 2, "a matrix");
  } else if (op == "Trilu" || op == "ReverseSequence") {
    c.rank_in(0, 2, 1 << 30, "");
  } else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    c.rank_in(0, 3, 1 << 30, "N, C and spatial axes");
  } else if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss") {
    c.rank_in(0, 2, 1 << 30, "N, C, ...");
    if (r >= 0 && c.rank(1) >= 0 && c.rank(1) != r - 1)
      c.fail("labels " + c.input_desc(1) + " must have rank " + std::to_string(r - 1) + " for scores " +
             c.input_desc(0));
  } else if (op == "GatherND") {
    const int64_t b = c.int_attr("batch_dims").value_or(0);
    if (r >= 0 && c.rank(1) >= 0 && (b < 0 || b >= std::min(r, c.rank(1))))
      c.fail("attribute 'batch_dims' is " + std::to_string(b) + "; it must be in " +
             range_str(0, std::min(r, c.rank(1)) - 1));
  }
}

// Element types against the op's schema: allowed types, and one type for the inputs sharing a type
// parameter (ONNX's inference checks neither unless asked to be strict).
void check_types(const NodeCheck& c, const NodeProto& n, const onnx::OpSchema& schema) {
  std::map<std::string, std::pair<int, int32_t>> bound;  // type parameter -> (input, element type)
  const auto& formals = schema.inputs();
  if (formals.empty()) return;
  for (int i = 0; i < n.input_size(); ++i) {
    const int32_t et = c.elem(i);
    if (!et) continue;
    const auto& formal = formals[std::min<size_t>(i, formals.size() - 1)];
    if (i >= static_cast<int>(formals.size()) && formal.GetOption() != onnx::OpSchema::Variadic) break;
    const TypeProto* t = c.type(i);
    if (!t || !t->has_tensor_type()) continue;
    onnx::DataType dt;
    try {
      dt = onnx::Utils::DataTypeUtils::ToType(*t);
    } catch (const std::exception&) {
      c.fail(c.input_desc(i) + " has an element type ONNX does not know");
    }
    if (!formal.GetTypes().count(dt)) {
      std::set<std::string> names;
      for (const auto* a : formal.GetTypes()) names.insert(*a);
      std::string list;
      for (const auto& s : names) list += (list.empty() ? "" : ", ") + s;
      c.fail(c.input_desc(i) + " has element type " + elem_name(et) + "; " + c.op() + " takes " + list + " there");
    }
    auto [it, fresh] = bound.emplace(formal.GetTypeStr(), std::make_pair(i, et));
    if (!fresh && it->second.second != et &&
        (formal.GetOption() != onnx::OpSchema::Variadic || formal.GetIsHomogeneous()))
      c.fail(c.input_desc(i) + " has element type " + elem_name(et) + " but " + c.input_desc(it->second.first) +
             " has " + elem_name(it->second.second) + "; " + c.op() + " needs the same type for both");
  }
}

// A model of the nodes before `end`, with large initializers replaced by typed inputs (inference reads
// only small constants' values), for inferring the types those nodes give.
onnx::ModelProto prefix_model(const onnx::ModelProto& m, int end) {
  onnx::ModelProto p;
  p.set_ir_version(m.ir_version());
  *p.mutable_opset_import() = m.opset_import();
  const auto& g = m.graph();
  auto* pg = p.mutable_graph();
  pg->set_name(g.name());
  std::set<std::string> inputs;
  for (const auto& v : g.input()) inputs.insert(v.name());
  for (const auto& t : g.initializer()) {
    const bool small = t.raw_data().size() <= 4096 && t.float_data_size() + t.int64_data_size() + t.int32_data_size() +
                                                              t.double_data_size() + t.uint64_data_size() <=
                                                          1024;
    if (small) {
      *pg->add_initializer() = t;
      continue;
    }
    if (inputs.count(t.name())) continue;
    auto* v = pg->add_input();
    v->set_name(t.name());
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto* shape = tt->mutable_shape();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
  }
  for (const auto& v : g.input()) *pg->add_input() = v;
  std::set<std::string> produced;
  for (int i = 0; i < end; ++i) {
    *pg->add_node() = g.node(i);
    for (const auto& o : g.node(i).output()) produced.insert(o);
  }
  for (const auto& v : g.value_info())
    if (produced.count(v.name())) *pg->add_value_info() = v;
  for (const auto& v : g.output())
    if (produced.count(v.name())) *pg->add_output() = v;
  return p;
}

}  // namespace

void validate_model(const onnx::ModelProto& m, const std::string& what) {
  const auto& g = m.graph();
  std::set<std::string> inputs, initializers, produced;
  for (const auto& v : g.input()) {
    GR_CHECK(!v.name().empty(), what << ": a graph input has no name");
    check_value_type(v, "input", what, true);
    inputs.insert(v.name());
  }
  for (const auto& v : g.value_info()) check_value_type(v, "value", what, false);
  for (const auto& t : g.initializer()) {
    check_tensor_proto(t, what + ": initializer '" + t.name() + "'");
    initializers.insert(t.name());
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    std::set<std::string> attrs;
    for (const auto& a : n.attribute()) {
      if (!attrs.insert(a.name()).second)
        GR_FAIL(what << ": " << proto_node_desc(n, i) << " gives attribute '" << a.name() << "' twice");
      if (a.has_t()) check_tensor_proto(a.t(), what + ": " + proto_node_desc(n, i) + ": attribute '" + a.name() + "'");
      for (const auto& t : a.tensors())
        check_tensor_proto(t, what + ": " + proto_node_desc(n, i) + ": attribute '" + a.name() + "'");
    }
    for (const auto& o : n.output())
      if (!o.empty()) produced.insert(o);
  }
  std::set<std::string> outputs;
  for (const auto& v : g.output()) {
    GR_CHECK(!v.name().empty(), what << ": a graph output has no name");
    check_value_type(v, "output", what, false);
    GR_CHECK(outputs.insert(v.name()).second, what << ": output '" << v.name() << "' is listed twice");
    if (inputs.count(v.name()) || initializers.count(v.name()))
      GR_FAIL(what << ": output '" << v.name() << "' is also a graph "
                   << (inputs.count(v.name()) ? "input" : "initializer")
                   << "; graphrun needs every output computed by a node (pass it through an Identity node)");
    GR_CHECK(produced.count(v.name()), what << ": output '" << v.name() << "' is not produced by any node");
  }

  Facts f = facts_of(m, what);
  for (int i = 0; i < g.node_size(); ++i) {
    NodeCheck c(g.node(i), i, f);
    if (sequence_or_optional_op(g.node(i))) c.fail(std::string(kSequenceRefusal) + " here " + kSequenceRefusalWhy);
    if (is_window_op(g.node(i)))
      check_window_attrs(c);
    else if (is_default_domain(g.node(i).domain()))
      check_plain_attrs(c);
  }
}

void validate_before_inference(const onnx::ModelProto& m, const std::string& what,
                               const std::function<void(onnx::ModelProto&)>& infer) {
  const auto& g = m.graph();
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  int covered = 0;  // `inferred` holds the types of the nodes before this one
  onnx::ModelProto inferred = prefix_model(m, 0);
  Facts f = facts_of(inferred, what);
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (!needs_checks_before_inference(n)) continue;
    bool stale = false;
    for (const auto& in : n.input()) {
      auto it = producer.find(in);
      stale |= it != producer.end() && it->second >= covered;
    }
    if (stale) {
      inferred = prefix_model(m, i);
      try {
        infer(inferred);
      } catch (const std::exception&) {
        // Inference of the earlier nodes failed; the full run reports it.
      }
      covered = i;
      f = facts_of(inferred, what);
    }
    NodeCheck c(n, i, f);
    if (is_window_op(n))
      check_window_ranks(c);
    else
      check_other_unsafe_ranks(c);
  }
}

void validate_inferred(const onnx::ModelProto& m, const std::string& what) {
  const auto& g = m.graph();
  Facts f = facts_of(m, what);
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (!is_default_domain(n.domain())) continue;
    NodeCheck c(n, i, f);
    check_ranks(c);
    if (const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(f.opset), ""))
      check_types(c, n, *schema);
  }
  // Every value whose shape inference knows must fit the tensor limit before anything allocates it.
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  for (const auto* list : {&g.value_info(), &g.output()})
    for (const auto& v : *list) {
      if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
      const auto& tt = v.type().tensor_type();
      Shape known;
      for (const auto& d : tt.shape().dim())
        if (d.has_dim_value()) known.push_back(d.dim_value());
      auto it = producer.find(v.name());
      const std::string who =
          it == producer.end() ? "value" : proto_node_desc(g.node(it->second), it->second) + ": output";
      const DType dt = tt.elem_type() && dtype_size(static_cast<DType>(tt.elem_type()))
                           ? static_cast<DType>(tt.elem_type())
                           : DType::U8;
      checked_numel(dt, known, what + ": " + who + " '" + v.name() + "'");
    }
}

}  // namespace graphrun
