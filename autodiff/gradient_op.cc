// ai.onnx.preview.training's Gradient op, expanded when a model loads: each Gradient node becomes the gradient
// nodes graphrun's own backward builder writes for it (autodiff::differentiate), so that `graphrun run` computes
// it on every device and `show` prints it. The spec: Gradient(xs, zs, y) gives dy/dx for each name in xs, y being a
// function of the independent values xs and zs; its inputs are the values at which to take it, one per name of xs
// then zs. Where they are those very values the forward nodes are reused (cut at xs and zs); otherwise the nodes
// computing y from xs and zs are copied, reading the inputs instead. A y that is not a scalar is differentiated as
// its sum (torch.autograd.grad with grad_outputs of ones). Gradients of Gradient (second order) need the rules of
// the gradient ops in turn: a missing one is an error naming it. Loaded for training (load_onnx_for_training), the
// model is brought to its training form before the expansion, so that the Gradient differentiates what trains.
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "autodiff/autodiff.h"
#include "autodiff/grad_context.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "graph/passes/convert_opset.h"
#include "graph/passes/train_mode.h"
#include "graph/passes/unroll_rnn.h"

namespace graphrun::autodiff {
namespace {

bool is_gradient_op(const Node& n) { return n.domain == kTrainingDomain && n.op_type == "Gradient"; }

Node make_node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
               const std::string& name, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = op;
  n.name = name;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

// `v` as a tensor of `shape`, f64 for f64, else f32 (ConstantOfShape and Constant hold it; a Cast makes it f16).
Tensor filled(DType t, double v, Shape shape) {
  if (t == DType::F64) return Tensor::from_vector<double>(std::move(shape), {v});
  return Tensor::from_vector<float>(std::move(shape), {static_cast<float>(v)});
}

// `value` cast to element type `t`, as `out`.
std::string cast_to(Graph& g, const std::string& value, DType t, const std::string& out, const std::string& base) {
  g.add_node(make_node("Cast", {value}, {out}, g.unique_name(base + "/cast"),
                       {{"to", Attribute::Int(static_cast<int64_t>(t))}}));
  return out;
}

// A tensor of `value` shaped like `like`, of element type `t`: ConstantOfShape(Shape(like)).
std::string filled_like(Graph& g, const std::string& like, DType t, double value, const std::string& out,
                        const std::string& base) {
  const std::string shape = g.unique_name(base + "/shape");
  g.add_node(make_node("Shape", {like}, {shape}, shape));
  const Tensor v = filled(t, value, {1});
  const bool cast = t != DType::Undefined && t != v.dtype();
  const std::string fill = cast ? g.unique_name(base + "/fill") : out;
  g.add_node(
      make_node("ConstantOfShape", {shape}, {fill}, g.unique_name(base + "/fill"), {{"value", Attribute::Tens(v)}}));
  return cast ? cast_to(g, fill, t, out, base) : out;
}

// The nodes writing `from` and what they read, transitively, not past the names in `stop` (nor graph inputs and
// initializers), by `producer` (Graph::producers).
std::set<int> upstream(const Graph& g, const std::unordered_map<std::string, int>& producer, const std::string& from,
                       const std::set<std::string>& stop) {
  std::set<int> seen;
  std::vector<std::string> todo{from};
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    auto it = producer.find(v);
    if (stop.count(v) || it == producer.end() || !seen.insert(it->second).second) continue;
    for (const auto& in : g.nodes[static_cast<size_t>(it->second)].inputs)
      if (!in.empty()) todo.push_back(in);
  }
  return seen;
}

void expand_one(Graph& g, size_t at, const std::string& what) {
  const Node node = g.nodes[at];
  const std::string desc = what + ": " + node.describe();
  const Attribute* xs_attr = node.attr("xs");
  const Attribute* y_attr = node.attr("y");
  GR_CHECK(xs_attr && y_attr, desc << ": needs the attributes xs and y");
  const std::vector<std::string> xs = xs_attr->strings;
  const std::vector<std::string> zs = node.attr("zs") ? node.attr("zs")->strings : std::vector<std::string>{};
  const std::string y = y_attr->s;
  GR_CHECK(!xs.empty(), desc << ": xs names no value");
  GR_CHECK(node.inputs.size() == xs.size() + zs.size(),
           desc << ": has " << node.inputs.size() << " input" << (node.inputs.size() == 1 ? "" : "s")
                << "; xs and zs name " << xs.size() + zs.size() << " value" << (xs.size() + zs.size() == 1 ? "" : "s")
                << ", one input each");
  GR_CHECK(node.outputs.size() <= xs.size(), desc << ": has " << node.outputs.size() << " output"
                                                  << (node.outputs.size() == 1 ? "" : "s") << "; xs names " << xs.size()
                                                  << " value" << (xs.size() == 1 ? "" : "s"));
  std::vector<std::string> names = xs;
  names.insert(names.end(), zs.begin(), zs.end());
  const std::unordered_map<std::string, int> made = g.producers();
  auto defined = [&](const std::string& v) { return g.is_input(v) || g.is_initializer(v) || made.count(v) != 0; };
  for (const auto& v : names) GR_CHECK(defined(v), desc << ": xs or zs names '" << v << "', which the graph lacks");
  GR_CHECK(defined(y), desc << ": y names '" << y << "', which the graph lacks");
  for (size_t k = 0; k < node.inputs.size(); ++k)
    GR_CHECK(!node.inputs[k].empty(), desc << ": input " << k << " (the value of '" << names[k] << "') is missing");
  {
    const std::set<std::string> unique(names.begin(), names.end());
    GR_CHECK(unique.size() == names.size(), desc << ": xs and zs name one value twice");
  }
  ValueTypes types(g);
  for (size_t k = 0; k < xs.size(); ++k) {
    const DType t = types.dtype(node.inputs[k]);
    GR_CHECK(t == DType::Undefined || dtype_is_float(t),
             desc << ": xs names '" << xs[k] << "' of type " << dtype_name(t) << "; only float tensors have gradients");
  }

  // The node goes once nothing sorts the graph any more: what reads its outputs stays ordered after it.
  auto erase_node = [&] {
    auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
      return is_gradient_op(n) && n.name == node.name && n.inputs == node.inputs && n.outputs == node.outputs;
    });
    if (it != g.nodes.end()) g.nodes.erase(it);
  };
  Differentiation d;
  bool same = true;
  for (size_t k = 0; k < names.size(); ++k) same &= node.inputs[k] == names[k];
  const std::string base = node.name.empty() ? "Gradient" : node.name;
  if (same) {
    // At the values themselves: the forward nodes serve, cut at xs and zs.
    d.roots = xs;
    d.cut.insert(names.begin(), names.end());
    d.y = y;
    erase_node();
  } else {
    // At other values: the nodes between xs, zs and y, copied to read the inputs.
    std::map<std::string, std::string> renamed;
    for (size_t k = 0; k < names.size(); ++k) {
      std::string v = node.inputs[k];
      if (k < xs.size()) {
        // Its own value, so that only the copy's paths reach it.
        const std::string fresh = g.unique_name(base + "/" + xs[k]);
        g.add_node(make_node("Identity", {v}, {fresh}, fresh));
        if (const ValueInfo* vi = g.info(node.inputs[k])) g.values[fresh] = *vi;
        v = fresh;
        d.roots.push_back(v);
      }
      renamed[names[k]] = v;
    }
    const std::set<int> cone = upstream(g, g.producers(), y, {names.begin(), names.end()});
    std::vector<Node> copies;
    for (int i : cone) {
      Node c = g.nodes[static_cast<size_t>(i)];
      for (auto& o : c.outputs)
        if (!o.empty()) {
          const std::string fresh = g.unique_name(o + "/at_" + base);
          renamed[o] = fresh;
          o = fresh;
        }
      c.name = g.unique_name((c.name.empty() ? c.op_type : c.name) + "/at_" + base);
      copies.push_back(std::move(c));
    }
    for (Node& c : copies) {
      for (auto& in : c.inputs) {
        auto it = renamed.find(in);
        if (!in.empty() && it != renamed.end()) in = it->second;
      }
      g.add_node(std::move(c));
    }
    d.y = renamed.count(y) ? renamed.at(y) : y;
    g.topo_sort();
    infer_shapes(g);
    erase_node();
  }

  // dy: ones like y (a scalar y: the constant 1).
  const DType yt = ValueTypes(g).dtype(d.y);
  const ValueInfo* yi = g.info(d.y);
  if (yi && yi->has_shape && yi->shape.empty()) {
    const Tensor one = filled(yt, 1, {});
    const bool cast = yt != DType::Undefined && yt != one.dtype();
    const std::string c = g.unique_name(base + (cast ? "/one" : "/dy"));
    g.add_node(make_node("Constant", {}, {c}, c, {{"value", Attribute::Tens(one)}}));
    d.seed = cast ? cast_to(g, c, yt, g.unique_name(base + "/dy"), base + "/dy") : c;
  } else {
    d.seed = filled_like(g, d.y, yt, 1, g.unique_name(base + "/dy"), base + "/dy");
  }
  std::vector<std::vector<std::string>> grads;
  try {
    grads = differentiate(g, d);
  } catch (const Error& e) {
    throw Error(desc + ": " + e.what());
  }
  ValueTypes after(g);
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const std::string& out = node.outputs[k];
    if (out.empty()) continue;
    const std::vector<std::string>& c = grads[k];
    if (c.empty()) {
      // y does not depend on it: zeros like it.
      filled_like(g, node.inputs[k], after.dtype(node.inputs[k]), 0, out, base + "/zero_" + xs[k]);
    } else {
      g.add_node(make_node(c.size() == 1 ? "Identity" : "Sum", c, {out}, g.unique_name(base + "/" + out)));
    }
  }
}

// The most nodes the expansions may add to a model. A Gradient copies and differentiates the nodes computing its y,
// and a Gradient of a Gradient's output does so again: a chain of them in a small file would grow as 3^k. Each
// expansion is refused before it is built where the nodes computing its y, times kGrowth (the gradient nodes a rule
// writes per forward node, about 2 to 3, and the copy), would pass the limit, and after it where it did.
constexpr size_t kMaxExpandedNodes = 32768;
constexpr size_t kGrowth = 4;

// The nodes computing the Gradient node's y from its xs and zs.
std::set<int> cone(const Graph& g, const std::unordered_map<std::string, int>& producer, const Node& grad) {
  std::set<std::string> stop;
  for (const char* k : {"xs", "zs"})
    if (const Attribute* a = grad.attr(k)) stop.insert(a->strings.begin(), a->strings.end());
  const Attribute* y = grad.attr("y");
  return y ? upstream(g, producer, y->s, stop) : std::set<int>{};
}

// The LSTM, GRU and RNN nodes whose gradient is differentiated again, unrolled into their time steps
// (graph/passes/unroll_rnn.h): their fused gradient node has no gradient itself. Those are the ones between a
// Gradient node's xs, zs and y, where the expanded gradient is trained (loaded for training) or where a Gradient's y
// depends on another Gradient node (a second derivative under `run`).
void unroll_twice_differentiated(Graph& g, const std::string& what, bool training) {
  const std::unordered_map<std::string, int> producer = g.producers();
  std::set<int> recurrent;
  bool nested = false;
  for (const Node& n : g.nodes) {
    if (!is_gradient_op(n)) continue;
    for (int i : cone(g, producer, n)) {
      const Node& m = g.nodes[static_cast<size_t>(i)];
      nested |= is_gradient_op(m);
      if (passes::is_recurrent(m)) recurrent.insert(i);
    }
  }
  if (recurrent.empty() || (!training && !nested)) return;
  // From the last: unroll_rnn erases its node and appends, so the indices before it hold.
  for (auto it = recurrent.rbegin(); it != recurrent.rend(); ++it)
    passes::unroll_rnn(g, static_cast<size_t>(*it), what);
  g.topo_sort();
  infer_shapes(g);
}

// Every Gradient node, each once the nodes computing its y hold no other (a Gradient of a Gradient's output
// differentiates the first one's nodes). Loaded for training, the model takes its training form first, so that a
// BatchNormalization exported in eval mode is differentiated on the batch statistics the forward trains on.
void expand_gradient_ops(Graph& g, const std::string& what, bool training) {
  if (std::none_of(g.nodes.begin(), g.nodes.end(), is_gradient_op)) return;
  auto written = std::make_shared<Graph>(g);  // Graph::as_written (its weights shared)
  if (training) g = passes::to_training(passes::convert_opset_for_training(g));
  unroll_twice_differentiated(g, what, training);
  const size_t before = g.nodes.size();
  for (;;) {
    std::optional<size_t> first, ready;
    std::unordered_map<std::string, int> producer;
    for (size_t i = 0; i < g.nodes.size() && !ready; ++i) {
      if (!is_gradient_op(g.nodes[i])) continue;
      if (!first) {
        first = i;
        producer = g.producers();
      }
      // Ready once no other Gradient node computes its y.
      const Attribute* y = g.nodes[i].attr("y");
      const std::set<int> before_y = y ? upstream(g, producer, y->s, {}) : std::set<int>{};
      if (std::none_of(before_y.begin(), before_y.end(), [&](int j) { return is_gradient_op(g.nodes[j]); })) ready = i;
    }
    if (!first) break;
    const size_t at = ready ? *ready : *first;  // none ready: expand_one names what it cannot differentiate
    const std::string name = g.nodes[at].describe();
    const size_t added = g.nodes.size() > before ? g.nodes.size() - before : 0;
    const size_t next = kGrowth * cone(g, producer, g.nodes[at]).size();
    auto too_many = [&](size_t n) {
      return Error(what + ": " + name + ": expanding the Gradient nodes up to it adds " + (n > added ? "about " : "") +
                   std::to_string(n) + " nodes, past graphrun's limit of " + std::to_string(kMaxExpandedNodes) +
                   " (each Gradient of a Gradient's output differentiates the nodes of the one before)");
    };
    if (added + next > kMaxExpandedNodes) throw too_many(added + next);
    expand_one(g, at, what);
    if (g.nodes.size() > before + kMaxExpandedNodes) throw too_many(g.nodes.size() - before);
    g.topo_sort();
    infer_shapes(g);
  }
  // A copy's BatchNormalization in training form updates the running statistics after the node it copies.
  if (training) g = passes::to_training(g);
  // ONNX infers no type for what a Gradient node computes, nor for what reads it; the expansion did: the graph as
  // written keeps those types (so that it saves as a model the checker's shape inference passes).
  for (const Node& n : written->nodes)
    for (const std::string& o : n.outputs)
      if (const ValueInfo* vi = g.info(o), *was = written->info(o); vi && (!was || was->dtype == DType::Undefined))
        written->values[o] = *vi;
  g.as_written = std::move(written);
}

const bool kRegistered = register_load_expansion(expand_gradient_ops);

}  // namespace
}  // namespace graphrun::autodiff
