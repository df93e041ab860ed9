// Gradient rule of InstanceNormalization (and so of torch's GroupNorm export, Reshape + InstanceNormalization
// + Reshape + Mul + Add): ai.graphrun InstanceNormalizationGrad, which recomputes the statistics from X.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void instance_norm_grad(GradContext& ctx) {
  if (ctx.dy().empty() || (!ctx.needs(0) && !ctx.needs(1) && !ctx.needs(2))) return;
  auto d = ctx.op_n("InstanceNormalizationGrad", {ctx.dy(), ctx.in(0), ctx.in(1)},
                    {ctx.needs(0), ctx.needs(1), ctx.needs(2)},
                    {{"epsilon", Attribute::Float(ctx.fwd().attr_f("epsilon", 1e-5f))}}, kGraphrunDomain);
  for (size_t i = 0; i < 3; ++i)
    if (!d[i].empty()) ctx.set_dx(i, d[i]);
}

}  // namespace

GR_REGISTER_OPS(instance_norm) {
  ops.op("InstanceNormalization").gradient(instance_norm_grad);
}

}  // namespace graphrun::autodiff
