// Gradient rule of Det (torch.det, torch.logdet as Log(Det)): ai.graphrun DetGrad, dY times the cofactor matrix
// of X (det(X) inverse(X)^T where X is invertible; from the minors where it is singular).
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void det_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  ctx.set_dx(0, ctx.op("DetGrad", {ctx.dy(), ctx.in(0)}, {}, kGraphrunDomain));
}

}  // namespace

GR_REGISTER_OPS(det) {
  ops.op("Det").gradient(det_grad);
}

}  // namespace graphrun::autodiff
