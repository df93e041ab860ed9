// Gradient rule of LRN (runtime/kernels/lrn_window.h): with s = bias + alpha / size * window_sum(X^2), the
// window of channel c from c - before to c + after (before = (size - 1) / 2, after = size - 1 - before),
//   Y = X * s^-beta,
//   dX = dY * s^-beta - (2 * alpha * beta / size) * X * window_sum'(dY * X * s^(-beta - 1)),
// where window_sum' is the adjoint window (channel j gathers the c whose window holds j: from j - after
// to j + before). A window sum is the channel axis zero-padded, then the sum of `size` shifted slices:
// standard nodes that need no static channel count (the slices end relative to the padded axis's end).
#include <limits>

#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

// Sum over channels c - before .. c + after of t (channel axis 1 of a rank-`rank` value).
std::string window_sum(GradContext& ctx, const std::string& t, int rank, int64_t size, int64_t before, int64_t after) {
  std::vector<int64_t> pads(static_cast<size_t>(2 * rank), 0);
  pads[1] = before;
  pads[static_cast<size_t>(rank) + 1] = after;
  const std::string padded = before || after ? ctx.pad(t, pads) : t;
  std::vector<std::string> slices;
  for (int64_t k = 0; k < size; ++k) {
    // Slice k of the padded axis (length C + size - 1): [k, k + C), its end counted from the axis's end.
    const int64_t from_end = size - 1 - k;
    slices.push_back(size == 1 ? padded
                               : ctx.slice(padded, {k}, {from_end ? -from_end : std::numeric_limits<int64_t>::max()},
                                           {1}));
  }
  return slices.size() == 1 ? slices[0] : ctx.op("Sum", slices);
}

void lrn_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  const int rank = ctx.rank(x);
  GR_CHECK(rank >= 3, n.describe() << ": the LRN gradient needs the rank of '" << x << "' (at least 3)");
  GR_CHECK(n.has_attr("size") && n.attr_i("size", 0) >= 1, n.describe() << ": LRN needs a size of at least 1");
  const int64_t size = n.attr_i("size", 1), before = (size - 1) / 2, after = size - 1 - before;
  const double alpha = n.attr_f("alpha", 1e-4f), beta = n.attr_f("beta", 0.75f), bias = n.attr_f("bias", 1.f);
  const DType t = ctx.dtype(x);
  const std::string s = ctx.op(
      "Add", {ctx.scalar(bias, t),
              ctx.op("Mul", {ctx.scalar(alpha / static_cast<double>(size), t),
                             window_sum(ctx, ctx.op("Mul", {x, x}), rank, size, before, after)})});
  const std::string p = ctx.op("Pow", {s, ctx.scalar(-beta, t)});                                 // s^-beta
  const std::string g = ctx.op("Div", {ctx.op("Mul", {ctx.op("Mul", {ctx.dy(), x}), p}), s});    // dY X s^(-beta-1)
  const std::string back = window_sum(ctx, g, rank, size, after, before);
  ctx.set_dx(0, ctx.op("Sub", {ctx.op("Mul", {ctx.dy(), p}),
                               ctx.op("Mul", {ctx.scalar(2 * alpha * beta / static_cast<double>(size), t),
                                              ctx.op("Mul", {x, back})})}));
}

}  // namespace

GR_REGISTER_OPS(lrn) { ops.op("LRN").gradient(lrn_grad); }

}  // namespace graphrun::autodiff
