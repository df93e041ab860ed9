// Gradient rules, collective family: ReplicaSum (--sync-bn's forward-pass sum over replicas).
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

namespace {

// R = sum over replicas q of X_q, and every replica's loss reads R: dL/dX_r = sum over q of dR_q,
// the ReplicaSum of the output gradients (SyncBatchNorm's backward reductions).
void replica_sum_grad(GradContext& ctx) {
  std::vector<std::string> dys;
  std::vector<size_t> which;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.needs(i)) continue;
    dys.push_back(ctx.dy_or_zeros(i));
    which.push_back(i);
  }
  if (dys.empty()) return;
  const std::vector<std::string> sums =
      ctx.op_n("ReplicaSum", dys, std::vector<bool>(dys.size(), true), {}, kGraphrunDomain);
  for (size_t k = 0; k < which.size(); ++k) ctx.set_dx(which[k], sums[k]);
}

}  // namespace

GR_REGISTER_OPS(collective) { ops.op(kGraphrunDomain, "ReplicaSum").gradient(replica_sum_grad); }

}  // namespace graphrun::autodiff
