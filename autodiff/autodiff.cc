// Autodiff entry points (placeholder until the backward builder lands).
#include "autodiff/autodiff.h"

namespace graphrun::autodiff {

std::vector<std::string> trainable_params(const Graph& g, const std::set<std::string>& freeze) {
  std::vector<std::string> r;
  for (const auto& f : freeze)
    GR_CHECK(g.initializers.count(f), "--freeze: no parameter named '" << f << "'");
  for (const auto& [name, t] : g.initializers)
    if (dtype_is_float(t.dtype()) && !freeze.count(name)) r.push_back(name);
  return r;
}

Graph attach_loss(const Graph&, const LossOptions&) { GR_FAIL("attach_loss: not implemented yet"); }
Graph backward(const Graph&, const BackwardOptions&) { GR_FAIL("backward: not implemented yet"); }

}  // namespace graphrun::autodiff
