// The backward builder: finds the nodes between the trainable parameters and the loss, walks them in
// reverse topological order asking each op's rule for the gradient nodes, sums fan-out gradients and
// exposes one `<param>_grad` output per parameter. Dead nodes are removed at the end.
#include <cstdlib>
#include <unordered_set>

#include "autodiff/autodiff.h"
#include "autodiff/grad_context.h"
#include "autodiff/rules/rules.h"
#include "graph/passes/eliminate_dead_nodes.h"

namespace graphrun::autodiff {

namespace {

const passes::PassInfo& kInfo = passes::register_pass(
    "backward", "appends the gradient nodes and one <param>_grad output per trainable parameter");

std::string emit(Graph& g, const std::string& op, const std::vector<std::string>& inputs, const std::string& out,
                 std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = op;
  n.name = out;
  n.inputs = inputs;
  n.outputs = {out};
  n.attrs = std::move(attrs);
  g.add_node(std::move(n));
  return out;
}

Tensor scalar_of(DType t, double v, Shape shape) {
  Tensor r(t, std::move(shape));
  GR_CHECK(r.numel() == 1, "internal error: scalar_of");
  switch (t) {
    case DType::F32: r.data<float>()[0] = static_cast<float>(v); break;
    case DType::F64: r.data<double>()[0] = v; break;
    default: GR_FAIL("backward: the loss must be f32 or f64, not " << dtype_name(t));
  }
  return r;
}

bool is_float_or_unknown(DType t) { return t == DType::Undefined || dtype_is_float(t); }

}  // namespace

std::vector<std::vector<std::string>> differentiate(Graph& g, const Differentiation& d) {
  const auto& rules = gradient_rules();
  ValueTypes types(g);
  const size_t nfwd = g.nodes.size();
  // A cut value is independent: nothing flows through the node that writes it.
  auto cut = [&](const std::string& v) { return d.cut.count(v) != 0; };

  // Values that depend on a root through differentiable ops.
  std::unordered_set<std::string> depends(d.roots.begin(), d.roots.end());
  for (const Node& n : g.nodes) {
    bool any = false;
    for (const auto& in : n.inputs) any |= !in.empty() && depends.count(in);
    if (!any) continue;
    auto it = rules.find(n.op_key());
    if (it != rules.end() && !it->second.differentiable) continue;
    for (const auto& o : n.outputs)
      if (!o.empty() && !cut(o) && is_float_or_unknown(types.dtype(o))) depends.insert(o);
  }
  // Values y depends on.
  std::unordered_set<std::string> reaches{d.y};
  for (size_t i = nfwd; i-- > 0;) {
    const Node& n = g.nodes[i];
    bool any = false;
    for (const auto& o : n.outputs) any |= !o.empty() && !cut(o) && reaches.count(o);
    if (any)
      for (const auto& in : n.inputs)
        if (!in.empty()) reaches.insert(in);
  }
  // Nodes on a path from a root to y; each needs a rule.
  std::vector<bool> active(nfwd, false);
  std::string missing;
  for (size_t i = 0; i < nfwd; ++i) {
    const Node& n = g.nodes[i];
    bool in_dep = false, out_useful = false;
    for (const auto& in : n.inputs) in_dep |= !in.empty() && depends.count(in);
    for (const auto& o : n.outputs) out_useful |= !o.empty() && !cut(o) && depends.count(o) && reaches.count(o);
    active[i] = in_dep && out_useful;
    if (!active[i]) continue;
    auto it = rules.find(n.op_key());
    if (it == rules.end() || !it->second.rule)
      missing += std::string(missing.empty() ? "" : "; ") + "no gradient rule for op '" + n.op_key() + "' (node '" +
                 n.name + "')";
  }
  if (!missing.empty()) throw Error(missing);

  std::map<std::string, std::vector<std::string>> contrib;
  contrib[d.y].push_back(d.seed);

  // The gradient of a value: its contributions summed.
  auto gradient_of = [&](const std::string& v) -> std::string {
    auto it = contrib.find(v);
    if (it == contrib.end() || it->second.empty()) return "";
    if (it->second.size() == 1) return it->second[0];
    std::string s = emit(g, "Sum", it->second, g.unique_name(v + "_grad_sum"));
    if (const ValueInfo* vi = g.info(v)) g.values[s] = *vi;
    it->second = {s};
    return s;
  };

  for (size_t i = nfwd; i-- > 0;) {
    if (!active[i]) continue;
    const Node n = g.nodes[i];
    std::vector<std::string> dys;
    bool any = false;
    for (const auto& o : n.outputs) {
      dys.push_back(o.empty() || cut(o) ? "" : gradient_of(o));
      any |= !dys.back().empty();
    }
    if (!any) continue;
    std::vector<bool> needs;
    for (const auto& in : n.inputs)
      needs.push_back(!in.empty() && depends.count(in) && is_float_or_unknown(types.dtype(in)));
    GradContext ctx(g, static_cast<int>(i), types, dys, needs);
    rules.at(n.op_key()).rule(ctx);
    for (const auto& [j, dx] : ctx.dx()) {
      if (dx.empty()) continue;
      // Tests of numeric gradient checks (graphrun check) break one op's rule: its gradients doubled.
      static const char* broken = std::getenv("GRAPHRUN_TEST_BREAK_GRADIENT");
      contrib[n.inputs[j]].push_back(
          broken && n.op_key() == broken ? emit(g, "Add", {dx, dx}, g.unique_name(dx + "_broken")) : dx);
    }
  }
  std::vector<std::vector<std::string>> r;
  for (const auto& x : d.roots) r.push_back(contrib[x]);
  return r;
}

Graph backward(const Graph& with_loss, const BackwardOptions& opts) {
  Graph g = with_loss;
  // The candidates once (trainable_params reads every weight), the frozen names resolved (and checked) on them.
  const std::vector<std::string> all = trainable_params(g, {});
  const std::set<std::string> frozen = resolve_freeze(all, g, opts.freeze);
  std::vector<std::string> params;
  for (const auto& p : opts.params.empty() ? all : opts.params)
    if (!frozen.count(p)) params.push_back(p);
  for (const auto& p : params)
    GR_CHECK(g.is_initializer(p), "backward: '" << p << "' is not a parameter (initializer) of the graph");
  GR_CHECK(g.producer(opts.loss) >= 0,
           "backward: no node computes the loss '" << opts.loss << "' (attach a loss first)");
  const size_t nfwd = g.nodes.size();

  // The seed: d loss / d loss.
  const DType loss_type = ValueTypes(g).dtype(opts.loss);
  const ValueInfo* li = g.info(opts.loss);
  GR_CHECK(!li || !li->has_shape || li->shape.empty(),
           "backward: the loss '" << opts.loss << "' must be a scalar, not " << li->str());
  std::string seed;
  if (!opts.loss_grad_input.empty()) {
    GR_CHECK(!g.is_input(opts.loss_grad_input) && !g.info(opts.loss_grad_input),
             "backward: the loss-gradient input name '" << opts.loss_grad_input << "' is already used");
    g.inputs.push_back(opts.loss_grad_input);
    // f32, or f64 for an f64 loss (a float64 model: its shards' scales, e.g. 3/10, exact to f64).
    const DType seed_type = loss_type == DType::F64 ? DType::F64 : DType::F32;
    g.values[opts.loss_grad_input] = ValueInfo{seed_type, true, {}};
    seed = opts.loss_grad_input;
    if (loss_type != seed_type && loss_type != DType::Undefined)
      seed = emit(g, "Cast", {seed}, g.unique_name(opts.loss + "_grad_seed"),
                  {{"to", Attribute::Int(static_cast<int64_t>(loss_type))}});
  } else {
    DType t = loss_type == DType::Undefined ? DType::F32 : loss_type;
    seed = emit(g, "Constant", {}, g.unique_name(opts.loss + "_grad_seed"),
                {{"value", Attribute::Tens(scalar_of(t, 1, {}))}});
    g.values[seed] = ValueInfo{t, true, {}};
  }
  Differentiation diff;
  diff.roots = params;
  diff.y = opts.loss;
  diff.seed = seed;
  const std::vector<std::vector<std::string>> grads = differentiate(g, diff);
  std::map<std::string, std::vector<std::string>> contrib;
  for (size_t k = 0; k < params.size(); ++k) contrib[params[k]] = grads[k];

  // One output per parameter, named <param>_grad.
  std::unordered_set<std::string> consumed;
  for (const Node& n : g.nodes)
    for (const auto& in : n.inputs) consumed.insert(in);
  std::unordered_set<std::string> claimed;
  for (const auto& p : params) {
    const std::string want = p + opts.grad_suffix;
    GR_CHECK(!g.info(want) && g.producer(want) < 0 && !g.is_input(want) && !g.is_initializer(want),
             "backward: the gradient output name '" << want << "' is already used in the graph");
    const Tensor& w = g.initializers.at(p);
    auto& c = contrib[p];
    std::string name;
    if (c.empty() && opts.skip_unreached) continue;
    if (c.empty()) {
      // The loss does not depend on this parameter: its gradient is zero.
      std::string shape = emit(g, "Constant", {}, g.unique_name(want + "_shape"),
                               {{"value", Attribute::Tens(Tensor::from_vector<int64_t>(
                                              {static_cast<int64_t>(w.rank())}, w.shape()))}});
      name = emit(g, "ConstantOfShape", {shape}, g.unique_name(want),
                  {{"value", Attribute::Tens(scalar_of(w.dtype(), 0, {1}))}});
    } else if (c.size() > 1) {
      name = emit(g, "Sum", c, g.unique_name(want));
    } else {
      const std::string& v = c[0];
      int prod = g.producer(v);
      if (prod >= static_cast<int>(nfwd) && !consumed.count(v) && !claimed.count(v) && !g.is_output(v)) {
        // Rename the value the rule produced rather than adding an Identity.
        name = g.unique_name(want);
        for (auto& o : g.nodes[prod].outputs)
          if (o == v) o = name;
        g.values.erase(v);
      } else {
        name = emit(g, "Identity", {v}, g.unique_name(want));
      }
      claimed.insert(v);
    }
    GR_CHECK(name == want, "backward: the gradient output name '" << want << "' is already used in the graph");
    ValueInfo vi{w.dtype(), true, {}};
    for (int64_t d : w.shape()) vi.shape.push_back(Dim(d));
    g.values[name] = vi;
    g.outputs.push_back(name);
  }
  g.topo_sort();
  return eliminate_dead_nodes(g);
}

passes::Pass backward_pass(const BackwardOptions& opts) {
  std::string freeze;
  for (const auto& f : opts.freeze) freeze += (freeze.empty() ? "" : ",") + f;
  return passes::make_pass(
      kInfo,
      passes::format_options({{"seed", opts.loss_grad_input.empty() ? "1" : opts.loss_grad_input},
                              {"freeze", freeze},
                              {"unreached", opts.skip_unreached ? "untrained" : ""}}),
      [opts](const Graph& g) { return backward(g, opts); });
}

}  // namespace graphrun::autodiff
