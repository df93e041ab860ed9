// Pass make_batch_symbolic: an input's batch dimension made symbolic.
#include "graph/passes/make_batch_symbolic.h"

#include <set>

#include "graph/onnx_io.h"

namespace graphrun::passes {

namespace {
const PassInfo& kInfo = register_pass(
    "make_batch_symbolic",
    "the inputs' batch dimension becomes a symbol (a symbolic one kept): shards and the last batch vary in size");

const Dim* first_dim(const Graph& g, const std::string& v) {
  const ValueInfo* vi = g.info(v);
  return vi && vi->has_shape && !vi->shape.empty() ? &vi->shape[0] : nullptr;
}

// The symbol a fixed or unknown batch of `input` becomes.
std::string batch_symbol(const Graph& g, const std::string& input) {
  // The inputs share one batch: a fixed one takes the symbol of another's (tokens [batch, T], a mask [8, T]).
  for (const auto& in : g.inputs) {
    const Dim* d = first_dim(g, in);
    if (in != input && d && !d->param.empty()) return d->param;
  }
  // Else one the model does not use: "N" may be its sequence length.
  std::set<std::string> used;
  for (const auto& [v, vi] : g.values)
    for (const Dim& d : vi.shape)
      if (!d.param.empty()) used.insert(d.param);
  std::string s = "N";
  for (int k = 1; used.count(s); ++k) s = "N_" + std::to_string(k);
  return s;
}

}  // namespace

Graph make_batch_symbolic(const Graph& g, const std::string& input, const std::string& given) {
  GR_CHECK(!g.inputs.empty() || !input.empty(), "graph '" << g.name << "' has no input to batch");
  const std::string name = input.empty() ? g.inputs[0] : input;
  GR_CHECK(g.is_input(name), "graph '" << g.name << "' has no input named '" << name << "'");
  Graph r = g;
  auto it = r.values.find(name);
  if (it == r.values.end() || !it->second.has_shape || it->second.shape.empty()) return r;
  // A symbolic batch is the model's own, which its outputs share: it stays as it is.
  if (!it->second.shape[0].param.empty()) return r;
  const std::string symbol = given.empty() ? batch_symbol(g, name) : given;
  const bool was_fixed = it->second.shape[0].known();
  const int64_t fixed = it->second.shape[0].size;
  it->second.shape[0] = Dim(symbol);
  // A model exported with a fixed batch (torch.onnx.export without dynamic_axes) carries that size in
  // every value's type downstream, the output's too, which the loss's labels would take: the
  // intermediate values are inferred again from the symbolic input (from an unknown batch too, so that
  // the outputs carry its symbol). Where that fails, they stay as they were (the kernels read the sizes
  // they are given, not these).
  reinfer_shapes(r);
  if (!was_fixed) return r;
  // Another input still fixed at the same batch (a mask beside the tokens) still fixes the values it reaches:
  // the check below waits for the call that makes the last of them symbolic.
  for (const auto& in : r.inputs)
    if (const Dim* d = first_dim(r, in); d && d->size == fixed) return r;
  // A shape the exporter folded into a constant (torch's x.view(x.size(0), -1) without dynamic_axes is a
  // Reshape to [8, -1]) keeps the old batch past the symbolic input: the outputs, and the labels taken
  // from them, would refuse every other batch size. Name the node where the batch became fixed again.
  auto dim0 = [&](const std::string& v) { return first_dim(r, v); };
  for (const auto& out : r.outputs) {
    const Dim* d = dim0(out);
    if (!d || d->size != fixed) continue;
    for (const Node& n : r.nodes) {
      bool from_symbol = false, to_fixed = false;
      for (const auto& in : n.inputs) from_symbol |= !in.empty() && dim0(in) && *dim0(in) == Dim(symbol);
      for (const auto& o : n.outputs) {
        const ValueInfo* vi = r.info(o);
        to_fixed |= !o.empty() && vi && dtype_is_float(vi->dtype) && dim0(o) && dim0(o)->size == fixed;
      }
      if (from_symbol && to_fixed)
        GR_FAIL("model '" << g.name << "': " << n.describe() << " gives its output the fixed batch " << fixed
                          << " of the export, so output '" << out << "' cannot take another batch size: a shape "
                          << "folded into a constant (torch: x.view(x.size(0), -1) exported without dynamic_axes); "
                          << "export with dynamic_axes={'" << name << "': {0: 'N'}}, or use torch.flatten(x, 1)");
    }
  }
  return r;
}

Pass make_batch_symbolic_pass(const std::vector<std::string>& inputs, const std::string& symbol) {
  std::string names;
  for (const auto& n : inputs) names += (names.empty() ? "" : ",") + n;
  return make_pass(kInfo, format_options({{"input", names}, {"dim", symbol}}), [inputs, symbol](const Graph& g) {
    Graph r = g;
    for (const auto& n : inputs) r = make_batch_symbolic(r, n, symbol);
    return r;
  });
}

}  // namespace graphrun::passes
