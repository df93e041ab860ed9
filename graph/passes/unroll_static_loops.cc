#include "graph/passes/unroll_static_loops.h"

#include <algorithm>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_tensor.h"
#include "graph/validate.h"

namespace graphrun::passes {
namespace {

using namespace static_values;
using TP = onnx::TensorProto;

const ShapeData kNoShapeData;

const onnx::GraphProto* body_of(const onnx::NodeProto& n) {
  const auto* a = attr(n, "body");
  return a && a->has_g() ? &a->g() : nullptr;
}

std::vector<int64_t> ints_of(const onnx::NodeProto& n, const char* name, size_t count, int64_t fill) {
  const auto* a = attr(n, name);
  if (!a) return std::vector<int64_t>(count, fill);
  return {a->ints().begin(), a->ints().end()};
}

// The names a graph reads (its nodes' inputs, its nested subgraphs' reads, its outputs) that it does not define:
// the outer values a loop body uses.
void outer_reads(const onnx::GraphProto& g, std::set<std::string>& out) {
  std::set<std::string> own, ignored;
  collect_names(g, own, ignored);
  auto read = [&](const std::string& v) {
    if (!v.empty() && !own.count(v)) out.insert(v);
  };
  for (const auto& n : g.node()) {
    for (const auto& in : n.input()) read(in);
    for (const auto& a : n.attribute()) {
      std::set<std::string> sub;
      if (a.has_g()) outer_reads(a.g(), sub);
      for (const auto& s : a.graphs()) outer_reads(s, sub);
      for (const auto& v : sub) read(v);
    }
  }
  for (const auto& o : g.output()) read(o.name());
}

// Whether the body reads its own input `name` (a Loop's iteration number and condition often go unused).
bool reads(const onnx::GraphProto& body, const std::string& name) {
  if (name.empty()) return false;
  for (const auto& n : body.node()) {
    for (const auto& in : n.input())
      if (in == name) return true;
    for (const auto& a : n.attribute()) {
      std::set<std::string> sub;
      if (a.has_g()) outer_reads(a.g(), sub);
      for (const auto& s : a.graphs()) outer_reads(s, sub);
      if (sub.count(name)) return true;
    }
  }
  for (const auto& o : body.output())
    if (o.name() == name) return true;
  return false;
}

// Writes the nodes that replace one Loop or Scan, with names no other value or node of the model has.
class Emitter {
 public:
  Emitter(const onnx::GraphProto& g, int64_t opset, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out)
      : opset_(opset), out_(out) {
    collect_names(g, values_, nodes_);
  }

  std::string value(const std::string& base) { return unused(base, values_); }
  std::string node_name(const std::string& base) { return base.empty() ? base : unused(base, nodes_); }
  int added() const { return added_; }

  onnx::NodeProto& add(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                       const std::string& output) {
    onnx::NodeProto& n = *out_.Add();
    ++added_;
    n.set_op_type(op);
    n.set_name(node_name(name));
    for (const auto& in : inputs) n.add_input(in);
    n.add_output(output);
    return n;
  }

  std::string constant(const onnx::TensorProto& t, const std::string& base) {
    const std::string v = value(base);
    auto& c = add("Constant", base, {}, v);
    auto* a = c.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = t;
    a->mutable_t()->clear_name();
    return v;
  }

  std::string scalar(int64_t x, bool boolean, const std::string& base) {
    onnx::TensorProto t;
    if (boolean)
      tensor_to_proto(Tensor::scalar<bool>(x != 0), "", &t);
    else
      tensor_to_proto(Tensor::scalar<int64_t>(x), "", &t);
    return constant(t, base);
  }

  std::string gather(const std::string& x, const std::string& index, int64_t axis, const std::string& base) {
    const std::string v = value(base);
    auto* a = add("Gather", base, {x, index}, v).add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
    return v;
  }

  std::string unsqueeze(const std::string& x, int64_t axis, const std::string& base) {
    const std::string v = value(base);
    if (opset_ >= 13) {
      onnx::TensorProto t;
      tensor_to_proto(Tensor::from_vector<int64_t>({1}, {axis}), "", &t);
      add("Unsqueeze", base, {x, constant(t, base + "/axes")}, v);
    } else {
      auto* a = add("Unsqueeze", base, {x}, v).add_attribute();
      a->set_name("axes");
      a->set_type(onnx::AttributeProto::INTS);
      a->add_ints(axis);
    }
    return v;
  }

  // Stacks `parts` along a new axis `axis` into `output`.
  void stack(const std::vector<std::string>& parts, int64_t axis, const std::string& output, const std::string& base) {
    std::vector<std::string> u;
    for (size_t k = 0; k < parts.size(); ++k) u.push_back(unsqueeze(parts[k], axis, base + "/unsqueeze"));
    auto* a = add("Concat", base, u, output).add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
  }

  void identity(const std::string& x, const std::string& output, const std::string& base) {
    add("Identity", base, {x}, output);
  }

  // One copy of `body` (static_values::instantiate).
  std::vector<std::string> instantiate(const onnx::GraphProto& body, const std::vector<std::string>& inputs,
                                       const std::map<std::string, std::string>& inits, const std::string& tag) {
    added_ += body.node_size();
    return static_values::instantiate(body, inputs, inits, tag, values_, nodes_, out_);
  }

  // The body's initializers, as Constants shared by every copy: their new names by initializer name.
  std::map<std::string, std::string> initializers(const onnx::GraphProto& body, const std::string& base) {
    std::map<std::string, std::string> names;
    for (const auto& t : body.initializer()) names[t.name()] = constant(t, base + "/" + t.name());
    return names;
  }

 private:
  int64_t opset_;
  google::protobuf::RepeatedPtrField<onnx::NodeProto>& out_;
  std::set<std::string> values_, nodes_;
  int added_ = 0;
};

std::string base_name(const onnx::NodeProto& n) { return n.name().empty() ? n.op_type() : n.name(); }

[[noreturn]] void over_budget(const std::string& desc, int64_t iterations, int body_nodes) {
  GR_FAIL(desc << ": unrolled, its " << (iterations > 0 ? "at least " + std::to_string(iterations) : std::string())
               << " iterations of " << body_nodes << " nodes would pass graphrun's limit of " << kMaxUnrolledNodes
               << " unrolled nodes per model (graphrun runs a Loop or Scan by unrolling it when the model loads)");
}

// The empty scan output of a loop that runs zero times, where the body declares the shape of one iteration's part.
std::optional<onnx::TensorProto> empty_stack(const onnx::ValueInfoProto& part, int64_t axis) {
  if (!part.type().has_tensor_type() || !part.type().tensor_type().has_shape()) return std::nullopt;
  const auto& tt = part.type().tensor_type();
  std::vector<int64_t> dims;
  for (const auto& d : tt.shape().dim()) {
    if (!d.has_dim_value()) return std::nullopt;
    dims.push_back(d.dim_value());
  }
  const auto r = static_cast<int64_t>(dims.size()) + 1;
  if (axis < -r || axis >= r) return std::nullopt;
  dims.insert(dims.begin() + (axis < 0 ? axis + r : axis), 0);
  onnx::TensorProto t;
  t.set_data_type(tt.elem_type());
  for (int64_t d : dims) t.add_dims(d);
  return t;
}

// How many times Loop `n` runs, where that is known now (nullopt: it depends on the data, so it is left).
std::optional<int64_t> loop_iterations(const onnx::NodeProto& n, const onnx::GraphProto& body, Evaluator& outer,
                                       const std::string& desc, int64_t budget) {
  const int carried = n.input_size() - 2;
  const int scans = n.output_size() - carried;
  if (carried < 0 || scans < 0 || body.input_size() != 2 + carried || body.output_size() != 1 + carried + scans)
    return std::nullopt;  // malformed: the checker names it
  int64_t trips = std::numeric_limits<int64_t>::max();
  if (!n.input(0).empty()) {
    std::optional<Value> m = outer.value_of(n.input(0));
    if (!m || m->data.size() != 1) return std::nullopt;
    trips = std::max<int64_t>(m->data[0], 0);
  }
  bool cond = true;
  if (!n.input(1).empty()) {
    std::optional<Value> c = outer.value_of(n.input(1));
    if (!c || c->data.size() != 1) return std::nullopt;
    cond = c->data[0] != 0;
  }
  const int64_t cost = std::max(1, body.node_size() + 2 * scans + 2);
  std::vector<std::optional<Value>> values(static_cast<size_t>(carried));
  for (int k = 0; k < carried; ++k) values[static_cast<size_t>(k)] = outer.value_of(n.input(2 + k));
  int64_t i = 0;
  for (; cond && i < trips; ++i) {
    if ((i + 1) > budget / cost) over_budget(desc, i + 1, body.node_size());
    Evaluator ev(body, kNoShapeData, &outer);
    if (!body.input(0).name().empty()) ev.bind(body.input(0).name(), Value{TP::INT64, {}, {i}});
    if (!body.input(1).name().empty()) ev.bind(body.input(1).name(), Value{TP::BOOL, {}, {1}});
    for (int k = 0; k < carried; ++k) {
      const std::string& name = body.input(2 + k).name();
      if (values[static_cast<size_t>(k)])
        ev.bind(name, *values[static_cast<size_t>(k)]);
      else
        ev.unknown(name);
    }
    std::optional<Value> c = ev.value_of(body.output(0).name());
    if (!c || c->data.size() != 1) return std::nullopt;
    for (int k = 0; k < carried; ++k) values[static_cast<size_t>(k)] = ev.value_of(body.output(1 + k).name());
    cond = c->data[0] != 0;
  }
  return i;
}

void unroll_loop(const onnx::NodeProto& n, const onnx::GraphProto& body, int64_t trips, const std::string& desc,
                 Emitter& e) {
  const int carried = n.input_size() - 2;
  const int scans = n.output_size() - carried;
  const std::string base = base_name(n);
  const auto inits = e.initializers(body, base);
  std::vector<std::string> state(n.input().begin() + 2, n.input().end());
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(scans));
  const bool reads_i = reads(body, body.input(0).name()), reads_cond = reads(body, body.input(1).name());
  for (int64_t i = 0; i < trips; ++i) {
    const std::string tag = "/iter" + std::to_string(i);
    std::vector<std::string> inputs{reads_i ? e.scalar(i, false, base + tag + "/iteration") : std::string(),
                                    reads_cond ? e.scalar(1, true, base + tag + "/condition") : std::string()};
    inputs.insert(inputs.end(), state.begin(), state.end());
    const std::vector<std::string> outs = e.instantiate(body, inputs, inits, tag);
    for (int k = 0; k < carried; ++k) state[static_cast<size_t>(k)] = outs[static_cast<size_t>(1 + k)];
    for (int k = 0; k < scans; ++k) parts[static_cast<size_t>(k)].push_back(outs[static_cast<size_t>(1 + carried + k)]);
  }
  for (int k = 0; k < carried; ++k)
    if (!n.output(k).empty())
      e.identity(state[static_cast<size_t>(k)], n.output(k), base + "/output_" + std::to_string(k));
  for (int k = 0; k < scans; ++k) {
    const std::string& out = n.output(carried + k);
    if (out.empty()) continue;
    if (trips > 0) {
      e.stack(parts[static_cast<size_t>(k)], 0, out, base + "/scan_output_" + std::to_string(k));
      continue;
    }
    std::optional<onnx::TensorProto> t = empty_stack(body.output(1 + carried + k), 0);
    if (!t)
      GR_FAIL(desc << ": it runs zero times, so its scan output '" << out
                   << "' is empty, and its body does not declare the shape that would size it");
    e.identity(e.constant(*t, base + "/scan_output_" + std::to_string(k)), out,
               base + "/output_" + std::to_string(carried + k));
  }
}

// A Scan's geometry, where it is known now: the iteration count and each scan input's axis (opset 9 and later).
struct ScanPlan {
  int64_t length = 0;
  int64_t batch = 1;  // opset 8: the batch the body runs once per element of
  std::vector<int64_t> in_axes, in_reverse, out_axes, out_reverse;
};

std::optional<ScanPlan> scan_plan(const onnx::NodeProto& n, const onnx::GraphProto& body, int64_t opset,
                                  const std::vector<std::optional<Value>>& shapes) {
  const auto* num = attr(n, "num_scan_inputs");
  if (!num) return std::nullopt;
  const bool v8 = opset < 9;
  const int first = v8 ? 1 : 0;  // opset 8: input 0 is sequence_lens
  if (v8 && n.input_size() > 0 && !n.input(0).empty()) return std::nullopt;
  const auto m = static_cast<int>(num->i());
  const int states = n.input_size() - first - m;
  const int scans = n.output_size() - states;
  if (m < 1 || states < 0 || scans < 0 || body.input_size() != states + m || body.output_size() != states + scans)
    return std::nullopt;
  ScanPlan p;
  p.in_axes = v8 ? std::vector<int64_t>(static_cast<size_t>(m), 1) : ints_of(n, "scan_input_axes", m, 0);
  p.in_reverse = ints_of(n, v8 ? "directions" : "scan_input_directions", m, 0);
  p.out_axes = v8 ? std::vector<int64_t>(static_cast<size_t>(scans), 1) : ints_of(n, "scan_output_axes", scans, 0);
  p.out_reverse =
      v8 ? std::vector<int64_t>(static_cast<size_t>(scans), 0) : ints_of(n, "scan_output_directions", scans, 0);
  if (p.in_axes.size() != size_t(m) || p.in_reverse.size() != size_t(m) || p.out_axes.size() != size_t(scans) ||
      p.out_reverse.size() != size_t(scans))
    return std::nullopt;
  if (opset < 11)  // Unsqueeze and Concat take negative axes from opset 11
    for (int64_t a : p.out_axes)
      if (a < 0) return std::nullopt;
  p.length = -1;
  for (int j = 0; j < m; ++j) {
    const std::optional<Value>& s = shapes[static_cast<size_t>(first + states + j)];
    if (!s) return std::nullopt;
    const auto r = static_cast<int64_t>(s->data.size());
    int64_t& a = p.in_axes[static_cast<size_t>(j)];
    if (a < -r || a >= r) return std::nullopt;
    if (a < 0) a += r;
    const int64_t len = s->data[static_cast<size_t>(a)];
    if (len < 0 || (p.length >= 0 && len != p.length)) return std::nullopt;
    p.length = len;
    if (v8) {
      if (r < 2) return std::nullopt;
      if (j == 0) p.batch = s->data[0];
      if (s->data[0] != p.batch) return std::nullopt;
    }
  }
  return p;
}

void unroll_scan(const onnx::NodeProto& n, const onnx::GraphProto& body, const ScanPlan& p, bool v8,
                 const std::string& desc, Emitter& e) {
  const int first = v8 ? 1 : 0;
  const int m = static_cast<int>(p.in_axes.size());
  const int states = n.input_size() - first - m;
  const int scans = n.output_size() - states;
  const std::string base = base_name(n);
  const auto inits = e.initializers(body, base);
  std::vector<std::string> index;  // a Constant per position, shared by the scan inputs
  for (int64_t t = 0; t < std::max(p.length, p.batch); ++t)
    index.push_back(e.scalar(t, false, base + "/index_" + std::to_string(t)));
  std::vector<std::vector<std::string>> final_states(static_cast<size_t>(states)), stacked(static_cast<size_t>(scans));
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::string btag = v8 ? "/batch" + std::to_string(b) : std::string();
    std::vector<std::string> state, xs;
    for (int k = 0; k < states; ++k) {
      const std::string& s = n.input(first + k);
      state.push_back(v8 ? e.gather(s, index[size_t(b)], 0, base + btag + "/state_" + std::to_string(k)) : s);
    }
    for (int j = 0; j < m; ++j) {
      const std::string& x = n.input(first + states + j);
      xs.push_back(v8 ? e.gather(x, index[size_t(b)], 0, base + btag + "/scan_input_" + std::to_string(j)) : x);
    }
    std::vector<std::vector<std::string>> parts(static_cast<size_t>(scans));
    for (int64_t t = 0; t < p.length; ++t) {
      const std::string tag = btag + "/iter" + std::to_string(t);
      std::vector<std::string> inputs = state;
      for (int j = 0; j < m; ++j) {
        const int64_t at = p.in_reverse[size_t(j)] ? p.length - 1 - t : t;
        const int64_t axis = v8 ? 0 : p.in_axes[size_t(j)];  // opset 8: the batch axis is gone
        inputs.push_back(e.gather(xs[size_t(j)], index[size_t(at)], axis, base + tag + "/slice_" + std::to_string(j)));
      }
      const std::vector<std::string> outs = e.instantiate(body, inputs, inits, tag);
      for (int k = 0; k < states; ++k) state[size_t(k)] = outs[size_t(k)];
      for (int k = 0; k < scans; ++k) parts[size_t(k)].push_back(outs[size_t(states + k)]);
    }
    for (int k = 0; k < states; ++k) final_states[size_t(k)].push_back(state[size_t(k)]);
    for (int k = 0; k < scans; ++k) {
      auto& part = parts[size_t(k)];
      if (p.out_reverse[size_t(k)]) std::reverse(part.begin(), part.end());
      const int64_t axis = v8 ? 0 : p.out_axes[size_t(k)];
      if (p.length == 0) {
        std::optional<onnx::TensorProto> t = empty_stack(body.output(states + k), axis);
        if (!t)
          GR_FAIL(desc << ": its sequence is empty, so its scan output '" << n.output(states + k)
                       << "' is empty, and its body does not declare the shape that would size it");
        stacked[size_t(k)].push_back(e.constant(*t, base + btag + "/scan_output_" + std::to_string(k)));
        continue;
      }
      const std::string out = v8 || n.output(states + k).empty()
                                  ? e.value(base + btag + "/scan_output_" + std::to_string(k))
                                  : n.output(states + k);
      e.stack(part, axis, out, base + btag + "/scan_output_" + std::to_string(k));
      stacked[size_t(k)].push_back(out);
    }
  }
  for (int k = 0; k < states; ++k) {
    const std::string& out = n.output(k);
    if (out.empty()) continue;
    const std::string name = base + "/output_" + std::to_string(k);
    if (v8)
      e.stack(final_states[size_t(k)], 0, out, name);
    else
      e.identity(final_states[size_t(k)][0], out, name);
  }
  for (int k = 0; k < scans; ++k) {
    const std::string& out = n.output(states + k);
    if (out.empty()) continue;
    const std::string name = base + "/output_" + std::to_string(states + k);
    if (v8)
      e.stack(stacked[size_t(k)], 0, out, name);
    else if (p.length == 0)
      e.identity(stacked[size_t(k)][0], out, name);
  }
}

}  // namespace

int unroll_static_loops(onnx::ModelProto& m, const std::string& what, const InferShapeData& infer, int64_t& budget,
                        bool quiet) {
  auto& g = *m.mutable_graph();
  int64_t opset = 0;
  for (const auto& op : m.opset_import())
    if (default_domain(op.domain())) opset = op.version();
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  auto free_of_control_flow = [&](const std::set<int>& a) {
    return std::none_of(a.begin(), a.end(), [&](int j) { return opaque(g.node(j)); });
  };
  // The Loops whose trip count and condition, and the Scans whose scan inputs, no control flow computes; the
  // nodes that compute those, and the outer values their bodies read where no control flow computes them.
  std::vector<int> ready;
  std::set<int> needed;
  std::map<int, std::vector<std::string>> shape_of;  // Scan node -> the Shape values of its inputs in the prefix
  std::set<std::string> sized;                       // outer values the bodies read, whose shapes they may use
  std::set<std::string> values, node_names;
  collect_names(g, values, node_names);
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if ((n.op_type() != "Loop" && n.op_type() != "Scan") || !default_domain(n.domain())) continue;
    const onnx::GraphProto* body = body_of(n);
    if (!body || body->sparse_initializer_size()) continue;
    std::vector<std::string> control;
    if (n.op_type() == "Loop")
      for (int k = 0; k < std::min(2, n.input_size()); ++k) control.push_back(n.input(k));
    else
      control.assign(n.input().begin(), n.input().end());
    std::set<int> a;
    for (const auto& c : control)
      if (!c.empty()) {
        const std::set<int> more = ancestors(g, producer, c);
        a.insert(more.begin(), more.end());
      }
    if (!free_of_control_flow(a)) continue;
    ready.push_back(i);
    needed.insert(a.begin(), a.end());
    std::set<std::string> outer;  // what the body reads outside, and a Loop's initial loop-carried values
    outer_reads(*body, outer);
    if (n.op_type() == "Loop")
      for (int k = 2; k < n.input_size(); ++k) outer.insert(n.input(k));
    for (const auto& v : outer) {
      const std::set<int> b = ancestors(g, producer, v);
      if (!free_of_control_flow(b)) continue;
      needed.insert(b.begin(), b.end());
      sized.insert(v);
    }
  }
  if (ready.empty()) return 0;
  // A model of those nodes alone (in the file's order), with a Shape of each Scan's inputs, inferred as the whole
  // model would be.
  onnx::ModelProto prefix = model_of(m, needed);
  auto* pg = prefix.mutable_graph();
  for (int i : ready) {
    const auto& n = g.node(i);
    if (n.op_type() != "Scan") continue;
    auto& names = shape_of[i];
    for (const auto& in : n.input()) {
      if (in.empty()) {
        names.emplace_back();
        continue;
      }
      names.push_back(unused(in + "/shape", values));
      auto* s = pg->add_node();
      s->set_op_type("Shape");
      s->set_name(unused(base_name(n) + "/shape_of_input", node_names));
      s->add_input(in);
      s->add_output(names.back());
    }
  }
  std::map<std::string, std::string> shape_name;  // of each sized value
  for (const auto& v : sized) {
    shape_name[v] = unused(v + "/shape", values);
    auto* s = pg->add_node();
    s->set_op_type("Shape");
    s->set_name(unused(v + "/shape", node_names));
    s->add_input(v);
    s->add_output(shape_name[v]);
  }
  fold_constant_integers(*pg);
  const ShapeData data = infer(prefix);
  Evaluator outer(prefix.graph(), data);
  for (const auto& [v, shape] : shape_name)
    if (std::optional<Value> dims = outer.value_of(shape)) outer.set_dims(v, dims->data);
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  Emitter e(g, opset, nodes);
  int unrolled = 0;
  std::vector<std::string> done;
  std::set<int> todo(ready.begin(), ready.end());
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (!todo.count(i)) {
      *nodes.Add() = n;
      continue;
    }
    const onnx::GraphProto& body = *body_of(n);
    const std::string desc = what + ": " + proto_node_desc(n, i);
    const int before = e.added();
    int64_t count = 0;
    if (n.op_type() == "Loop") {
      std::optional<int64_t> trips = loop_iterations(n, body, outer, desc, budget);
      if (!trips) {
        *nodes.Add() = n;
        continue;
      }
      unroll_loop(n, body, *trips, desc, e);
      count = *trips;
    } else {
      std::vector<std::optional<Value>> shapes;
      for (const auto& s : shape_of[i]) shapes.push_back(s.empty() ? std::nullopt : outer.value_of(s));
      std::optional<ScanPlan> p = scan_plan(n, body, opset, shapes);
      if (!p) {
        *nodes.Add() = n;
        continue;
      }
      const int64_t cost = body.node_size() + 4;
      if (p->length > 0 && p->batch > 0 && (p->length > budget / cost || p->length * cost > budget / p->batch))
        over_budget(desc, p->length * p->batch, body.node_size());
      unroll_scan(n, body, *p, opset < 9, desc, e);
      count = p->length * p->batch;
    }
    budget -= e.added() - before;
    if (budget < 0) over_budget(desc, 0, body.node_size());
    ++unrolled;
    done.push_back("'" + base_name(n) + "' (" + n.op_type() + ", " + std::to_string(count) + " iteration" +
                   (count == 1 ? "" : "s") + ")");
  }
  if (!unrolled) return 0;
  g.mutable_node()->Swap(&nodes);
  // Said once per model file (a model is loaded more than once by some commands), the first few by name.
  static std::set<std::string> said;
  if (!quiet && said.insert(what + "\n" + done.front()).second) {
    std::string list;
    for (size_t k = 0; k < std::min<size_t>(done.size(), 3); ++k) list += (k ? ", " : "") + done[k];
    if (done.size() > 3) list += " and " + std::to_string(done.size() - 3) + " more";
    std::cerr << "graphrun: " << what << ": unrolled " << list << " when loading\n";
  }
  return unrolled;
}

}  // namespace graphrun::passes
