// Pass bucket_allreduce: gradients in backward order, cut into buckets, one AllReduce node each.
#include "graph/passes/bucket_allreduce.h"

#include <algorithm>
#include <map>

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "bucket_allreduce", "sums the gradients over the replicas: one AllReduce per bucket, after its last gradient");

struct Param {
  std::string name, grad;
  int producer;  // index of the node producing the gradient; -1 when none does
  size_t bytes;
  DType dtype;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Graph bucket_allreduce(const Graph& training, const BucketAllReduceOptions& opts) {
  const std::vector<std::string> names =
      opts.params.empty() ? gradient_params(training, opts.grad_suffix) : opts.params;
  GR_CHECK(!names.empty(), "bucket_allreduce: graph '" << training.name
                                                       << "' has no parameter gradients (outputs named <param>"
                                                       << opts.grad_suffix << ")");
  // The parameters in the order the backward pass produces their gradients.
  std::vector<Param> params;
  for (const auto& p : names) {
    GR_CHECK(training.is_initializer(p), "bucket_allreduce: '" << p << "' is not a parameter (initializer) of graph '"
                                                               << training.name << "'");
    const Tensor& t = training.initializers.at(p);
    GR_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64,
             "bucket_allreduce: parameter '" << p << "' is " << dtype_name(t.dtype())
                                             << "; graphrun trains f32 (or f64) parameters only"
                                                                         " (--freeze "
                                                                      << p << " keeps it as it is)");
    std::string g = p + opts.grad_suffix;
    GR_CHECK(training.is_output(g),
             "bucket_allreduce: graph '" << training.name << "' has no gradient output '" << g << "'");
    params.push_back({p, g, training.producer(g), t.nbytes(), t.dtype()});
  }
  std::stable_sort(params.begin(), params.end(),
                   [](const Param& a, const Param& b) { return a.producer < b.producer; });

  std::vector<std::vector<Param>> buckets(1);
  size_t bytes = 0;
  for (const Param& p : params) {
    // A bucket is one buffer of one type: f32 and f64 parameters (rare) go in buckets of their own.
    const bool other_type = !buckets.back().empty() && buckets.back().back().dtype != p.dtype;
    if ((bytes >= opts.bucket_bytes || other_type) && !buckets.back().empty()) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(p);
    bytes += p.bytes;
  }

  Graph g = training;
  g.opsets[kGraphrunDomain] = 1;
  if (g.opset("") == 0) g.opsets[""] = 17;
  // Nodes to insert after original node i (key -1: before the first node).
  std::map<int, std::vector<Node>> inserts;
  for (size_t b = 0; b < buckets.size(); ++b) {
    int at = -1;
    for (const Param& p : buckets[b]) at = std::max(at, p.producer);
    Node ar;
    ar.name = g.unique_name("allreduce_" + std::to_string(b));
    ar.op_type = "AllReduce";
    ar.domain = kGraphrunDomain;
    ar.attrs["reduction"] = Attribute::Str("sum");
    for (const Param& p : buckets[b]) {
      ar.inputs.push_back(p.grad);
      const std::string sum = g.unique_name(p.grad + ".sum");
      g.values[sum] = value_info_of(g.initializers.at(p.name));
      ar.outputs.push_back(sum);
    }
    inserts[at].push_back(ar);
  }
  std::vector<Node> nodes = inserts[-1];
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    nodes.push_back(g.nodes[i]);
    auto it = inserts.find(i);
    if (it != inserts.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
  }
  g.nodes = std::move(nodes);
  return g;
}

Pass bucket_allreduce_pass(const BucketAllReduceOptions& opts) {
  return make_pass(kInfo, format_options({{"bucket_bytes", std::to_string(opts.bucket_bytes)}}),
                   [opts](const Graph& g) { return bucket_allreduce(g, opts); });
}

std::vector<std::string> gradient_params(const Graph& g, const std::string& grad_suffix) {
  std::vector<std::string> r;
  for (const auto& out : g.outputs)
    if (ends_with(out, grad_suffix) && g.is_initializer(out.substr(0, out.size() - grad_suffix.size())))
      r.push_back(out.substr(0, out.size() - grad_suffix.size()));
  return r;
}

std::vector<std::vector<ReducedGradient>> reduced_gradients(const Graph& g, const std::string& grad_suffix) {
  std::vector<std::vector<ReducedGradient>> r;
  for (const Node& n : g.nodes) {
    if (n.domain != kGraphrunDomain || n.op_type != "AllReduce") continue;
    std::vector<ReducedGradient> bucket;
    for (size_t i = 0; i < n.inputs.size() && i < n.outputs.size(); ++i) {
      const std::string& grad = n.inputs[i];
      GR_CHECK(ends_with(grad, grad_suffix), n.describe() << ": input '" << grad << "' is not a gradient (<param>"
                                                          << grad_suffix << ")");
      bucket.push_back({grad.substr(0, grad.size() - grad_suffix.size()), grad, n.outputs[i]});
    }
    r.push_back(std::move(bucket));
  }
  return r;
}

}  // namespace graphrun::passes
