// Pass fold_constants: all-constant subgraphs of the executor's graph computed once, at load time.
#include "graph/passes/fold_constants.h"

#include <set>

#include "graph/passes/remove_noops.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "fold_constants", "executor only: nodes whose inputs are all constants (not trained) become Constants of their result");

bool is_random(const std::string& op) {
  static const std::set<std::string> kRandom = {"Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform",
                                                "RandomUniformLike", "Multinomial", "Bernoulli"};
  return kRandom.count(op) != 0;
}

}  // namespace

Graph fold_constants(const Graph& g, const FoldConstantsOptions& opts) {
  GR_CHECK(opts.evaluate, "fold_constants: no evaluator bound");
  Graph r = g;
  std::set<std::string> changing;
  for (const auto& [v, init] : g.state_updates) changing.insert(init);
  auto constant = [&](const std::string& v) -> const Tensor* {
    if (v.empty() || r.is_input(v)) return nullptr;
    auto it = r.initializers.find(v);
    if (it != r.initializers.end())
      return changing.count(v) || dtype_is_float(it->second.dtype()) ? nullptr : &it->second;
    return constant_of(r, v);
  };
  int folded = 0;
  for (Node& n : r.nodes) {
    if (!n.domain.empty() || n.op_type == "Constant" || is_random(n.op_type) || n.outputs.size() != 1 ||
        n.outputs[0].empty() || n.inputs.empty())
      continue;
    std::vector<const Tensor*> ins;
    bool all = true;
    for (const auto& in : n.inputs) {
      const Tensor* t = in.empty() ? nullptr : constant(in);
      all = all && (in.empty() || t);
      ins.push_back(t);
    }
    if (!all) continue;
    std::vector<Tensor> out;
    try {
      out = opts.evaluate(r, n, ins);
    } catch (const Error&) {
      continue;
    }
    if (out.size() != 1 || !out[0].defined() || out[0].nbytes() > opts.max_bytes) continue;
    Node c{n.name, "Constant", "", {}, n.outputs, {}};
    c.attrs["value"] = Attribute::Tens(std::move(out[0]));
    n = std::move(c);
    ++folded;
  }
  if (folded) drop_unread_constants(r);
  return r;
}

Pass fold_constants_pass(FoldConstantsOptions opts) {
  return make_pass(kInfo, format_options({{"max_bytes", std::to_string(opts.max_bytes)}}),
                   [opts](const Graph& g) { return fold_constants(g, opts); });
}

}  // namespace graphrun::passes
