#include "graph/passes/vectorize_bag_loops.h"

#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_tensor.h"

namespace graphrun::passes {
namespace {

using TP = onnx::TensorProto;

bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

// Values by name in one graph: the node producing each, and the Constants' and initializers' integers.
class Scope {
 public:
  explicit Scope(const onnx::GraphProto& g) : g_(g) {
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& o : g.node(i).output()) producer_[o] = i;
    for (const auto& t : g.initializer()) inits_[t.name()] = &t;
  }
  const onnx::NodeProto* producer(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? nullptr : &g_.node(it->second);
  }
  int index(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? -1 : it->second;
  }
  bool defines(const std::string& v) const { return producer_.count(v) || inits_.count(v); }
  // The integer elements of a Constant's or initializer's value (at most 16 of them).
  std::optional<std::vector<int64_t>> ints(const std::string& v) const {
    const TP* t = nullptr;
    if (auto it = inits_.find(v); it != inits_.end()) t = it->second;
    if (const onnx::NodeProto* p = producer(v); p && p->op_type() == "Constant" && default_domain(p->domain()))
      if (const auto* a = attr(*p, "value"); a && a->has_t()) t = &a->t();
    if (!t) return std::nullopt;
    int64_t count = 1;
    for (int64_t d : t->dims()) count *= d;
    if (count > 16) return std::nullopt;
    try {
      const Tensor x = tensor_from_proto(*t, "constant '" + v + "'");
      if (x.dtype() != DType::I64 && x.dtype() != DType::I32 && x.dtype() != DType::Bool) return std::nullopt;
      return x.as_int64s();
    } catch (const Error&) {
      return std::nullopt;
    }
  }

 private:
  const onnx::GraphProto& g_;
  std::map<std::string, int> producer_;
  std::map<std::string, const TP*> inits_;
};

// The integers of a Constant or initializer of the body, or of the enclosing graph (torch puts some of
// the body's constants outside it).
struct Constants {
  const Scope& body;
  const Scope& outer;
  std::optional<std::vector<int64_t>> operator()(const std::string& v) const {
    return body.defines(v) ? body.ints(v) : outer.ints(v);
  }
};

// The axes of a node that takes them as an attribute (older opsets) or as input `at` (newer).
std::optional<std::vector<int64_t>> axes_of(const onnx::NodeProto& n, int at, const Constants& ints) {
  if (const auto* a = attr(n, "axes")) return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  if (n.input_size() > at && !n.input(at).empty()) return ints(n.input(at));
  return std::nullopt;
}

// What one bag iteration reads from the enclosing graph, and how it reduces.
struct BagLoop {
  std::string weight, text, starts, ends, per_sample;  // per_sample empty without per_sample_weights
  bool weights_first = false;                         // Mul(U, rows) rather than Mul(rows, U)
  std::string reduce;                                 // ReduceSum, ReduceMean or ReduceMax
};

// The body's node producing `v` when it is an op `op` of the default domain, else null; marks it used.
struct Matcher {
  const Scope& body;
  const onnx::GraphProto& g;
  std::set<int> used;
  const onnx::NodeProto* take(const std::string& v, const char* op) {
    const int i = body.index(v);
    if (i < 0) return nullptr;
    const onnx::NodeProto& n = g.node(i);
    if (n.op_type() != op || !default_domain(n.domain()) || n.input_size() < 1) return nullptr;
    used.insert(i);
    return &n;
  }
  // Marks the Constants a node reads (its axes) used.
  void constants_of(const onnx::NodeProto& n) {
    for (const auto& in : n.input())
      if (const int i = body.index(in); i >= 0 && g.node(i).op_type() == "Constant") used.insert(i);
  }
  bool outer(const std::string& v, const std::set<std::string>& body_inputs) const {
    return !v.empty() && !body.defines(v) && !body_inputs.count(v);
  }
};

// `v` is true whenever the loop runs: a Constant or initializer that is nonzero, or a Cast / Identity of one.
bool always_true(const std::string& v, const Scope& scope, int depth = 0) {
  if (depth > 4) return false;
  if (auto c = scope.ints(v)) return c->size() == 1 && (*c)[0] != 0;
  const onnx::NodeProto* p = scope.producer(v);
  if (!p || !default_domain(p->domain()) || p->input_size() != 1) return false;
  if (p->op_type() != "Cast" && p->op_type() != "Identity") return false;
  return always_true(p->input(0), scope, depth + 1);
}

std::optional<BagLoop> match(const onnx::NodeProto& loop, const Scope& outer) {
  if (loop.op_type() != "Loop" || !default_domain(loop.domain())) return std::nullopt;
  if (loop.input_size() != 2 || loop.input(0).empty() || loop.output_size() != 1) return std::nullopt;
  if (!loop.input(1).empty() && !always_true(loop.input(1), outer)) return std::nullopt;
  const auto* ba = attr(loop, "body");
  if (!ba || !ba->has_g()) return std::nullopt;
  const onnx::GraphProto& g = ba->g();
  if (g.input_size() != 2 || g.output_size() != 2 || g.initializer_size()) return std::nullopt;
  const Scope body(g);
  const Constants ints{body, outer};
  const std::string iter = g.input(0).name(), cond_in = g.input(1).name();
  const std::set<std::string> body_inputs{iter, cond_in};
  Matcher m{body, g, {}};
  // The condition out: the condition in, or something always true (torch: a Cast of the outer true).
  {
    std::string c = g.output(0).name();
    for (int k = 0; k < 4 && c != cond_in; ++k) {
      const int i = body.index(c);
      if (i < 0) break;
      const auto& n = g.node(i);
      if ((n.op_type() != "Cast" && n.op_type() != "Identity") || n.input_size() != 1) break;
      m.used.insert(i);
      c = n.input(0);
    }
    const bool constant_true = body.defines(c) ? always_true(c, body) : always_true(c, outer);
    if (c != cond_in && !constant_true) return std::nullopt;
    if (const int i = body.index(c); i >= 0) m.used.insert(i);
  }
  BagLoop r;
  const std::string scan = g.output(1).name();
  const onnx::NodeProto* red = nullptr;
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"})
    if ((red = m.take(scan, op))) {
      r.reduce = op;
      break;
    }
  if (!red || red->input_size() < 1) return std::nullopt;
  const auto* keep = attr(*red, "keepdims");
  if (!keep || keep->i() != 0) return std::nullopt;
  if (axes_of(*red, 1, ints) != std::vector<int64_t>{0}) return std::nullopt;
  m.constants_of(*red);
  // The rows: Gather(weight, ids), or that times Unsqueeze(Slice(per_sample_weights, a, b), [1]).
  const onnx::NodeProto* rows = m.take(red->input(0), "Gather");
  const onnx::NodeProto* psw_slice = nullptr;
  if (!rows) {
    const onnx::NodeProto* mul = m.take(red->input(0), "Mul");
    if (!mul || mul->input_size() != 2) return std::nullopt;
    for (int first = 0; first < 2 && !rows; ++first) {
      const std::set<int> before = m.used;
      const onnx::NodeProto* gth = m.take(mul->input(first), "Gather");
      const onnx::NodeProto* un = m.take(mul->input(1 - first), "Unsqueeze");
      const onnx::NodeProto* sl = un && axes_of(*un, 1, ints) == std::vector<int64_t>{1} ? m.take(un->input(0), "Slice") : nullptr;
      if (!gth || !sl) {
        m.used = before;
        continue;
      }
      m.constants_of(*un);
      rows = gth;
      psw_slice = sl;
      r.weights_first = first == 1;
    }
    if (!rows) return std::nullopt;
  }
  if (rows->input_size() != 2) return std::nullopt;
  if (const auto* ax = attr(*rows, "axis"); ax && ax->i() != 0) return std::nullopt;
  r.weight = rows->input(0);
  const onnx::NodeProto* ids = m.take(rows->input(1), "Slice");
  if (!ids || !m.outer(r.weight, body_inputs)) return std::nullopt;
  // A Slice of one outer tensor along axis 0, step 1, from Unsqueeze(Gather(starts, i)) to
  // Unsqueeze(Gather(ends, i)); the per-sample weights' Slice takes the same bounds.
  auto slice_bounds_ok = [&](const onnx::NodeProto& s) {
    if (s.input_size() < 4 || s.input_size() > 5) return false;
    if (ints(s.input(3)) != std::vector<int64_t>{0}) return false;
    if (s.input_size() == 5 && !s.input(4).empty() && ints(s.input(4)) != std::vector<int64_t>{1}) return false;
    m.constants_of(s);
    return true;
  };
  if (!slice_bounds_ok(*ids)) return std::nullopt;
  r.text = ids->input(0);
  if (!m.outer(r.text, body_inputs)) return std::nullopt;
  if (psw_slice) {
    if (!slice_bounds_ok(*psw_slice) || psw_slice->input(1) != ids->input(1) || psw_slice->input(2) != ids->input(2))
      return std::nullopt;
    r.per_sample = psw_slice->input(0);
    if (!m.outer(r.per_sample, body_inputs)) return std::nullopt;
  }
  auto bound = [&](const std::string& v, std::string& source) {
    const onnx::NodeProto* un = m.take(v, "Unsqueeze");
    if (!un || axes_of(*un, 1, ints) != std::vector<int64_t>{0}) return false;
    m.constants_of(*un);
    const onnx::NodeProto* at = m.take(un->input(0), "Gather");
    if (!at || at->input_size() != 2 || at->input(1) != iter) return false;
    if (const auto* ax = attr(*at, "axis"); ax && ax->i() != 0) return false;
    source = at->input(0);
    return m.outer(source, body_inputs);
  };
  if (!bound(ids->input(1), r.starts) || !bound(ids->input(2), r.ends)) return std::nullopt;
  // Nothing else happens in the body (unused Constants aside).
  for (int i = 0; i < g.node_size(); ++i)
    if (!m.used.count(i) && g.node(i).op_type() != "Constant") return std::nullopt;
  return r;
}

// The element type of a value of the main graph when its input, initializer or value_info says it.
int32_t elem_type(const onnx::GraphProto& g, const std::string& v) {
  for (const auto& t : g.initializer())
    if (t.name() == v) return t.data_type();
  for (const auto* list : {&g.input(), &g.value_info()})
    for (const auto& vi : *list)
      if (vi.name() == v && vi.type().has_tensor_type()) return vi.type().tensor_type().elem_type();
  return TP::UNDEFINED;
}

// Writes the nodes of one vectorized bag loop.
class Writer {
 public:
  Writer(std::vector<onnx::NodeProto>& out, std::set<std::string>& names, const std::string& base)
      : out_(out), names_(names), base_(base) {}

  std::string fresh(const std::string& hint) {
    std::string n = base_ + "/" + hint;
    for (int k = 1; names_.count(n); ++k) n = base_ + "/" + hint + "_" + std::to_string(k);
    names_.insert(n);
    return n;
  }
  std::string node(const std::string& op, const std::vector<std::string>& in, const std::string& hint,
                   const std::string& out_name = "") {
    onnx::NodeProto n;
    n.set_op_type(op);
    const std::string out = out_name.empty() ? fresh(hint) : out_name;
    n.set_name(out_name.empty() ? out : fresh(hint));
    for (const auto& i : in) n.add_input(i);
    n.add_output(out);
    out_.push_back(std::move(n));
    return out;
  }
  onnx::NodeProto& last() { return out_.back(); }
  void int_attr(const char* name, int64_t v) {
    auto* a = last().add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void ints_attr(const char* name, std::vector<int64_t> v) {
    auto* a = last().add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  std::string constant(const Tensor& t, const std::string& hint) {
    const std::string out = node("Constant", {}, hint);
    auto* a = last().add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    tensor_to_proto(t, out, a->mutable_t());
    return out;
  }
  std::string i64(std::vector<int64_t> v, bool scalar, const std::string& hint) {
    const Shape s = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
    return constant(Tensor::from_vector<int64_t>(s, v), hint);
  }

 private:
  std::vector<onnx::NodeProto>& out_;
  std::set<std::string>& names_;
  std::string base_;
};

// A value of the weight's element type: a scalar, or of shape [1] (ConstantOfShape's value).
Tensor value_of(int32_t type, double v, bool scalar = true) {
  const Shape s = scalar ? Shape{} : Shape{1};
  if (type == TP::DOUBLE) return Tensor::from_vector<double>(s, {v});
  return Tensor::from_vector<float>(s, {static_cast<float>(v)});
}

void write(const onnx::NodeProto& loop, const BagLoop& b, int32_t type, std::vector<onnx::NodeProto>& out,
           std::set<std::string>& names) {
  Writer w(out, names, (loop.name().empty() ? loop.output(0) : loop.name()) + "/bags");
  const std::string zero = w.i64({0}, true, "zero"), one = w.i64({1}, true, "one");
  // T tokens, positions [1, T]; M bags and their bounds [M, 1] as Slice reads them: negative ones count from
  // the end, then clamped to [0, T].
  const std::string t = w.node("Gather", {w.node("Shape", {b.text}, "text_shape"), zero}, "tokens");
  const std::string pos = w.node("Reshape", {w.node("Range", {zero, t, one}, "positions"), w.i64({1, -1}, false, "row")},
                                 "position_row");
  const std::string m1 = w.node("Reshape", {loop.input(0), w.i64({1}, false, "one_dim")}, "bags");
  const std::string zero1 = w.i64({0}, false, "from"), axis0 = w.i64({0}, false, "axis0");
  auto clamp = [&](const std::string& src, const std::string& hint) {
    std::string v = w.node("Slice", {src, zero1, m1, axis0}, hint);
    w.node("Cast", {v}, hint + "_i64");
    w.int_attr("to", TP::INT64);
    v = w.last().output(0);
    v = w.node("Where", {w.node("Less", {v, zero}, hint + "_negative"), w.node("Add", {v, t}, hint + "_from_end"), v},
               hint + "_counted");
    v = w.node("Where", {w.node("Less", {v, zero}, hint + "_below"), zero,
                         w.node("Where", {w.node("Greater", {v, t}, hint + "_above"), t, v}, hint + "_upper")},
               hint + "_clamped");
    return w.node("Reshape", {v, w.i64({-1, 1}, false, hint + "_col")}, hint + "_column");
  };
  const std::string starts = clamp(b.starts, "starts"), ends = clamp(b.ends, "ends");
  const std::string mask =
      w.node("And", {w.node("Not", {w.node("Less", {pos, starts}, "before_start")}, "from_start"),
                     w.node("Less", {pos, ends}, "before_end")},
             "mask");
  // The rows [T, P] of every token (the per-sample weights applied), flattened past the first axis.
  std::string rows = w.node("Gather", {b.weight, b.text}, "rows");
  w.int_attr("axis", 0);
  const std::string shape_rows = w.node("Shape", {rows}, "rows_shape");
  if (!b.per_sample.empty()) {
    const std::string ws = w.node("Reshape", {b.per_sample, w.i64({-1, 1}, false, "weight_col")}, "sample_weights");
    rows = b.weights_first ? w.node("Mul", {ws, rows}, "weighted_rows") : w.node("Mul", {rows, ws}, "weighted_rows");
  }
  rows = w.node("Flatten", {rows}, "flat_rows");
  w.int_attr("axis", 1);
  std::string r;
  if (b.reduce == "ReduceMax") {
    const std::string mask3 =
        w.node("Reshape", {mask, w.node("Concat", {w.node("Shape", {mask}, "mask_shape"), w.i64({1}, false, "unit")}, "mask3_shape")},
               "mask3");
    const std::string rows3 = w.node(
        "Reshape", {rows, w.node("Concat", {w.i64({1}, false, "unit_front"), w.node("Shape", {rows}, "flat_shape")}, "rows3_shape")},
        "rows3");
    const std::string lowest = w.constant(value_of(type, -std::numeric_limits<double>::infinity()), "minus_inf");
    r = w.node("ReduceMax", {w.node("Where", {mask3, rows3, lowest}, "masked")}, "bag_max");
    w.ints_attr("axes", {1});
    w.int_attr("keepdims", 0);
  } else {
    const std::string maskf = w.node("Cast", {mask}, "mask_values");
    w.int_attr("to", type);
    r = w.node("MatMul", {maskf, rows}, "bag_sum");
    if (b.reduce == "ReduceMean") {
      const std::string ones = w.node("ConstantOfShape", {w.node("Concat", {w.node("Reshape", {t, w.i64({1}, false, "t_dim")}, "t1"),
                                                                            w.i64({1}, false, "ones_width")},
                                                                   "ones_shape")},
                                      "ones");
      auto* a = w.last().add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      tensor_to_proto(value_of(type, 1.0, false), "one_value", a->mutable_t());
      r = w.node("Div", {r, w.node("MatMul", {maskf, ones}, "bag_sizes")}, "bag_mean");
    }
  }
  // [M, P] back to [M, the weight rows' trailing dims]: the Loop's stacked scan output.
  const std::string tail = w.node("Slice", {shape_rows, w.i64({1}, false, "tail_from"),
                                            w.i64({std::numeric_limits<int64_t>::max()}, false, "tail_to"), axis0},
                                  "row_dims");
  w.node("Reshape", {r, w.node("Concat", {m1, tail}, "out_shape")}, "out", loop.output(0));
  for (auto& n : out)
    if (n.op_type() == "Concat" && !attr(n, "axis")) {
      auto* a = n.add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(0);
    }
}

void collect_names(const onnx::GraphProto& g, std::set<std::string>& names) {
  for (const auto& v : g.input()) names.insert(v.name());
  for (const auto& t : g.initializer()) names.insert(t.name());
  for (const auto& n : g.node()) {
    names.insert(n.name());
    for (const auto& o : n.output()) names.insert(o);
    for (const auto& a : n.attribute())
      if (a.has_g()) collect_names(a.g(), names);
  }
}

}  // namespace

int vectorize_bag_loops(onnx::ModelProto& m, const std::string& what) {
  int64_t opset = 0;
  for (const auto& op : m.opset_import())
    if (default_domain(op.domain())) opset = op.version();
  if (opset < 11 || opset > 17) return 0;
  onnx::GraphProto& g = *m.mutable_graph();
  bool any = false;
  for (const auto& n : g.node()) any = any || n.op_type() == "Loop";
  if (!any) return 0;
  const Scope outer(g);
  std::set<std::string> names;
  collect_names(g, names);
  std::vector<onnx::NodeProto> out;
  int done = 0;
  std::string modes;
  for (const auto& n : g.node()) {
    std::optional<BagLoop> b = match(n, outer);
    const int32_t type = b ? elem_type(g, b->weight) : TP::UNDEFINED;
    if (!b || (type != TP::FLOAT && type != TP::DOUBLE)) {
      out.push_back(n);
      continue;
    }
    std::vector<onnx::NodeProto> nodes;
    write(n, *b, type, nodes, names);
    for (auto& x : nodes) out.push_back(std::move(x));
    modes += std::string(done ? ", " : "") + (b->reduce == "ReduceSum" ? "sum" : b->reduce == "ReduceMean" ? "mean" : "max");
    ++done;
  }
  if (!done) return 0;
  g.clear_node();
  for (auto& n : out) *g.add_node() = std::move(n);
  static std::set<std::string> said;
  if (said.insert(what).second)
    std::cerr << "graphrun: " << what << ": " << done << " nn.EmbeddingBag Loop" << (done > 1 ? "s" : "") << " (" << modes
              << ") computed without a loop, as one masked reduction over the bags\n";
  return done;
}

}  // namespace graphrun::passes
