// Pass sync_batchnorm: BatchNormalization on the statistics of the global batch (see the header).
#include "graph/passes/sync_batchnorm.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "graph/passes/train_mode.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "sync_batchnorm", "--sync-bn: BatchNorm normalises over the global batch (ReplicaSum of counts, sums, squares)");

// Emits the nodes of one BatchNormalization into `out`; names derive from the node's.
class Emitter {
 public:
  Emitter(Graph& g, std::vector<Node>& out, std::string base) : g_(g), out_(out), base_(std::move(base)) {}

  std::string op(const char* type, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {},
                 const std::string& domain = "") {
    return op_n(type, std::move(inputs), 1, std::move(attrs), domain)[0];
  }
  std::vector<std::string> op_n(const char* type, std::vector<std::string> inputs, size_t outputs,
                                std::map<std::string, Attribute> attrs = {}, const std::string& domain = "") {
    Node n;
    n.op_type = type;
    n.domain = domain;
    n.name = g_.unique_name(base_ + "/sync_bn/" + type);
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    for (size_t i = 0; i < outputs; ++i) n.outputs.push_back(g_.unique_name(n.name + "_output_" + std::to_string(i)));
    out_.push_back(n);
    return out_.back().outputs;
  }
  // A node whose one output is named `name`.
  void op_to(const std::string& name, const char* type, std::vector<std::string> inputs) {
    op(type, std::move(inputs));
    out_.back().outputs[0] = name;
  }
  // A Constant node (not an initializer: initializers of float type would count as parameters).
  template <class T> std::string constant(const char* what, Shape shape, std::vector<T> v) {
    const std::string out = op("Constant", {}, {{"value", Attribute::Tens(Tensor::from_vector<T>(std::move(shape), v))}});
    out_.back().name = g_.unique_name(base_ + "/sync_bn/" + what);
    return out;
  }

 private:
  Graph& g_;
  std::vector<Node>& out_;
  std::string base_;
};

// (`roots`: running_stat_initializers of the graph before the rewrite.)
void rewrite(Graph& g, const Node& bn, const std::map<std::string, std::string>& roots, std::vector<Node>& out) {
  GR_CHECK(bn.inputs.size() == 5 && g.is_initializer(bn.inputs[1]),
           bn.describe() << ": --sync-bn needs the scale (and B, mean, var) as inputs, the scale an initializer");
  const Tensor& scale = g.initializers.at(bn.inputs[1]);
  GR_CHECK(scale.rank() == 1 && (scale.dtype() == DType::F32 || scale.dtype() == DType::F64),
           bn.describe() << ": --sync-bn needs an f32 (or f64) scale of shape [C], got " << dtype_name(scale.dtype()) << " "
                         << shape_str(scale.shape()));
  const int64_t c = scale.shape()[0];
  const float eps = bn.attr_f("epsilon", 1e-5f), momentum = bn.attr_f("momentum", 0.9f);
  const std::string &x = bn.inputs[0], &b = bn.inputs[2], &rmean = bn.inputs[3], &rvar = bn.inputs[4];
  Emitter e(g, out, bn.name.empty() ? "batchnorm" : bn.name);
  // The statistics in the scale's type: f32, or f64 (a float64 model, `graphrun train --float64`).
  const DType t = scale.dtype();
  const auto to_t = Attribute::Int(static_cast<int64_t>(t));
  const auto scalar = [&](const char* what, double v) {
    return t == DType::F64 ? e.constant<double>(what, {}, {v}) : e.constant<float>(what, {}, {static_cast<float>(v)});
  };

  const std::string ncl = e.constant<int64_t>("ncl", {3}, {0, c, -1});
  const std::string c11 = e.constant<int64_t>("c11", {3}, {1, c, 1});
  const std::string cshape = e.constant<int64_t>("c", {1}, {c});
  const std::string axes = e.constant<int64_t>("axes", {2}, {0, 2});
  const std::string channels = e.constant<int64_t>("channels", {}, {c});
  // (eps and momentum are float attributes: their f32 values, widened exactly, as BatchNormalization's f64 kernel.)
  const std::string one = scalar("one", 1.0);
  const std::string epsilon = scalar("epsilon", eps);
  const std::string mom = scalar("momentum", momentum);
  const std::string rest = t == DType::F64 ? scalar("one_minus_momentum", 1.0 - double(momentum))
                                           : scalar("one_minus_momentum", 1.f - momentum);

  const std::string x3 = e.op("Reshape", {x, ncl});
  const std::string s1 = e.op("ReduceSum", {x3, axes}, {{"keepdims", Attribute::Int(1)}});
  const std::string n_local = e.op("Cast", {e.op("Div", {e.op("Size", {x3}), channels})}, {{"to", to_t}});
  const auto sums = e.op_n("ReplicaSum", {s1, n_local}, 2, {}, kGraphrunDomain);
  const std::string& n = sums[1];
  const std::string mean = e.op("Div", {sums[0], n});
  const std::string d = e.op("Sub", {x3, mean});
  const std::string s2 = e.op("ReduceSum", {e.op("Mul", {d, d}), axes}, {{"keepdims", Attribute::Int(1)}});
  const std::string var = e.op("Div", {e.op_n("ReplicaSum", {s2}, 1, {}, kGraphrunDomain)[0], n});
  const std::string invstd = e.op("Reciprocal", {e.op("Sqrt", {e.op("Add", {var, epsilon})})});
  const std::string gain = e.op("Mul", {invstd, e.op("Reshape", {bn.inputs[1], c11})});
  const std::string y3 = e.op("Add", {e.op("Mul", {d, gain}), e.op("Reshape", {b, c11})});
  // The outputs keep the BatchNormalization's names: its readers and the value infos are unchanged.
  e.op_to(bn.outputs[0], "Reshape", {y3, e.op("Shape", {x})});
  const auto running = [&](int k, const std::string& stat, const std::string& batch) {
    if (!bn.has_output(k)) return;
    e.op_to(bn.outputs[k], "Add", {e.op("Mul", {stat, mom}), e.op("Mul", {e.op("Reshape", {batch, cshape}), rest})});
    // What the step persists (of a chain, to_training: its last node's update).
    const auto root = roots.find(stat);
    const std::string& init = root != roots.end() ? root->second : stat;
    const auto it = std::find_if(g.state_updates.begin(), g.state_updates.end(),
                                 [&](const std::pair<std::string, std::string>& u) { return u.second == init; });
    if (it != g.state_updates.end()) {
      it->first = bn.outputs[k];
    } else {
      g.state_updates.emplace_back(bn.outputs[k], init);
    }
    // An output, so that no pass drops the update for reaching no other output.
    if (!g.is_output(bn.outputs[k])) g.outputs.push_back(bn.outputs[k]);
  };
  running(1, rmean, mean);
  running(2, rvar, e.op("Div", {e.op("Mul", {var, n}), e.op("Max", {e.op("Sub", {n, one}), one})}));
}

}  // namespace

Graph sync_batchnorm(const Graph& graph) {
  Graph g = graph;
  std::vector<Node> nodes;
  bool any = false;
  const std::map<std::string, std::string> roots = running_stat_initializers(graph);
  for (const Node& n : graph.nodes) {
    if (n.domain.empty() && n.op_type == "BatchNormalization" && n.attr_i("training_mode", 0) == 1) {
      rewrite(g, n, roots, nodes);
      any = true;
    } else {
      nodes.push_back(n);
    }
  }
  if (any) g.opsets[kGraphrunDomain] = 1;
  g.nodes = std::move(nodes);
  return g;
}

Pass sync_batchnorm_pass() { return make_pass(kInfo, "", sync_batchnorm); }

}  // namespace graphrun::passes
