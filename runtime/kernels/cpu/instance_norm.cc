// CPU kernels of InstanceNormalization (opsets 6-17; torch's GroupNorm exports through it) and of
// graphrun's InstanceNormalizationGrad, which recomputes the per-(n, c) statistics from X.
#include <cmath>

#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"

namespace graphrun::runtime::cpu {
namespace {

// X seen as [N * C rows, S positions]; row r has channel r % C.
struct InShape {
  int64_t rows = 0, c = 0, s = 1;
};

InShape in_shape(const Tensor& x, const Tensor& scale, const char* what) {
  GR_CHECK(x.rank() >= 3, what << ": input must have shape [N, C, D1, ...] (rank >= 3), got " << shape_str(x.shape()));
  InShape s;
  s.c = x.dim(1);
  s.rows = x.dim(0) * s.c;
  for (int i = 2; i < x.rank(); ++i) s.s *= x.dim(i);
  GR_CHECK(scale.dtype() == x.dtype() && scale.shape() == Shape{s.c},
           what << ": scale must be " << dtype_name(x.dtype()) << "[" << s.c << "], got " << dtype_name(scale.dtype())
                << shape_str(scale.shape()));
  return s;
}

// Mean and 1/sqrt(biased variance + eps) of one row, in double, two passes.
template <class T>
void row_stats(const T* p, int64_t n, double eps, double* mean, double* invstd) {
  double sum = 0, sq = 0;
  for (int64_t j = 0; j < n; ++j) sum += p[j];
  const double m = n ? sum / n : 0;
  for (int64_t j = 0; j < n; ++j) sq += (p[j] - m) * (p[j] - m);
  *mean = m;
  *invstd = 1.0 / std::sqrt((n ? sq / n : 0) + eps);
}

template <class T>
void instance_norm(KernelContext& ctx) {
  const char* what = "InstanceNormalization";
  const Tensor &x = ctx.input(0), &scale = ctx.input(1), &b = ctx.input(2);
  const InShape s = in_shape(x, scale, what);
  GR_CHECK(b.dtype() == x.dtype() && b.shape() == Shape{s.c},
           what << ": B must be " << dtype_name(x.dtype()) << "[" << s.c << "], got " << shape_str(b.shape()));
  const double eps = ctx.node().attr_f("epsilon", 1e-5f);
  const T *px = ptr<T>(x), *ps = ptr<T>(scale), *pb = ptr<T>(b);
  T* py = ptr<T>(ctx.output(0, x.shape(), x.dtype()));
#pragma omp parallel for num_threads(threads_for(ctx, x.numel())) schedule(static)
  for (int64_t r = 0; r < s.rows; ++r) {
    double m, is;
    row_stats(px + r * s.s, s.s, eps, &m, &is);
    const double a = is * ps[r % s.c], c0 = pb[r % s.c];
    for (int64_t j = 0; j < s.s; ++j) py[r * s.s + j] = static_cast<T>((px[r * s.s + j] - m) * a + c0);
  }
}

// InstanceNormalizationGrad(dY, X, scale) -> (dX, dscale, dB). Per row, with xhat = (X - mean) * invstd and
// g = dY * scale[c]: dX = invstd * (g - mean(g) - xhat * mean(g * xhat)); dscale[c] = sum(dY * xhat), dB[c] =
// sum(dY) over the rows of channel c.
template <class T>
void instance_norm_grad(KernelContext& ctx) {
  const char* what = "InstanceNormalizationGrad";
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &scale = ctx.input(2);
  const InShape s = in_shape(x, scale, what);
  GR_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(),
           what << ": dY " << shape_str(dy.shape()) << " must match X " << shape_str(x.shape()));
  const double eps = ctx.node().attr_f("epsilon", 1e-5f);
  const T *pg = ptr<T>(dy), *px = ptr<T>(x), *ps = ptr<T>(scale);
  T* dx = ctx.has_output(0) ? ptr<T>(ctx.output(0, x.shape(), x.dtype())) : nullptr;
  std::vector<double> row_dscale(s.rows), row_db(s.rows);
#pragma omp parallel for num_threads(threads_for(ctx, x.numel())) schedule(static)
  for (int64_t r = 0; r < s.rows; ++r) {
    const T *g = pg + r * s.s, *p = px + r * s.s;
    double m, is;
    row_stats(p, s.s, eps, &m, &is);
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < s.s; ++j) {
      sum_g += g[j];
      sum_gx += g[j] * (p[j] - m) * is;
    }
    row_dscale[r] = sum_gx;
    row_db[r] = sum_g;
    if (!dx) continue;
    const double sc = ps[r % s.c], mg = sum_g / s.s, mgx = sum_gx / s.s;
    for (int64_t j = 0; j < s.s; ++j) dx[r * s.s + j] = static_cast<T>(is * sc * (g[j] - mg - (p[j] - m) * is * mgx));
  }
  for (int out = 1; out <= 2; ++out) {
    if (!ctx.has_output(out)) continue;
    T* d = ptr<T>(ctx.output(out, scale.shape(), x.dtype()));
    const std::vector<double>& per_row = out == 1 ? row_dscale : row_db;
    for (int64_t c = 0; c < s.c; ++c) {
      double acc = 0;
      for (int64_t r = c; r < s.rows; r += s.c) acc += per_row[r];
      d[c] = static_cast<T>(acc);
    }
  }
}

template <void (*F32)(KernelContext&), void (*F64)(KernelContext&), int kX>
void by_float(KernelContext& ctx) {
  dispatch_float(ctx.input(kX).dtype(), ctx.node().op_type.c_str(), [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), float>) F32(ctx);
    else F64(ctx);
  });
}

}  // namespace

GR_REGISTER_OPS(instance_norm) {
  ops.op("InstanceNormalization").cpu(via_f32<by_float<instance_norm<float>, instance_norm<double>, 0>>);
  ops.op(kGraphrunDomain, "InstanceNormalizationGrad")
      .cpu(by_float<instance_norm_grad<float>, instance_norm_grad<double>, 1>)
      .schema(OpSchemaSpec("gradients of InstanceNormalization (per-(n, c) statistics recomputed from X)")
                  .attr("epsilon", "as InstanceNormalization", Attribute::Float(1e-5f))
                  .layer_gradient("scale")
                  .output_like(2, 2));
}

}  // namespace graphrun::runtime::cpu
