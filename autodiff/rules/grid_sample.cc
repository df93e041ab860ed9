// Gradient rule of GridSample (F.grid_sample, spatial transformers): ai.graphrun GridSampleGrad gives the
// gradients of X and of the grid from dY, X and the grid, recomputing the forward's taps.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void grid_sample_grad(GradContext& ctx) {
  if (ctx.dy().empty() || (!ctx.needs(0) && !ctx.needs(1))) return;
  std::map<std::string, Attribute> attrs;
  for (const char* k : {"mode", "padding_mode", "align_corners"})
    if (const Attribute* a = ctx.fwd().attr(k)) attrs[k] = *a;
  auto d = ctx.op_n("GridSampleGrad", {ctx.dy(), ctx.in(0), ctx.in(1)}, {ctx.needs(0), ctx.needs(1)}, attrs,
                    kGraphrunDomain);
  for (size_t i = 0; i < 2; ++i)
    if (!d[i].empty()) ctx.set_dx(i, d[i]);
}

}  // namespace

GR_REGISTER_OPS(grid_sample) {
  ops.op("GridSample").gradient(grid_sample_grad);
}

}  // namespace graphrun::autodiff
