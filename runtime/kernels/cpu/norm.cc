// CPU kernels of the normalisation family: BatchNormalization (inference and training, opsets 7-17),
// Dropout (opsets 7-17) and graphrun's BatchNormalizationGrad.
//
// BatchNormalization in training mode normalises with the biased batch variance but updates the
// running variance with the unbiased one (times n/(n-1)), as PyTorch's BatchNorm does: graphrun
// trains models exported from PyTorch and must keep the same running statistics. (ONNX's own
// reference for opset 14/15 uses the biased variance there; only the running_var output differs.)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // false positives inside Eigen's AVX-512 code
#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <random>

#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {
namespace {

// X seen as [N, F, S]: F features with their own statistics, S positions each (per-channel
// statistics: F = C and S = spatial size; opset 7's spatial=0: F = C * spatial, S = 1).
struct BnShape {
  int64_t N = 0, F = 0, S = 1;
  Shape param;  // the shape of scale, B, mean, var
  int64_t count() const { return N * S; }
};

BnShape bn_shape(const Tensor& x, bool per_channel) {
  GR_CHECK(x.rank() >= 2, "X must have rank >= 2 (N, C, ...), got " << shape_str(x.shape()));
  BnShape s;
  s.N = x.dim(0);
  s.F = x.dim(1);
  for (int i = 2; i < x.rank(); ++i) s.S *= x.dim(i);
  s.param = {x.dim(1)};
  if (!per_channel) {
    s.param = Shape(x.shape().begin() + 1, x.shape().end());
    s.F *= s.S;
    s.S = 1;
  }
  return s;
}

void check_param(const Tensor& t, const Tensor& x, const BnShape& s, const char* what) {
  GR_CHECK(t.dtype() == x.dtype(), what << " is " << dtype_name(t.dtype()) << " but X is " << dtype_name(x.dtype()));
  GR_CHECK(t.shape() == s.param || (t.numel() == s.F && t.rank() == 1),
           what << " " << shape_str(t.shape()) << " must have shape " << shape_str(s.param) << " for X "
                << shape_str(x.shape()));
}

template <class T> using Row = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Mean and biased variance of feature f, two passes (deviations from the mean, not E[x^2] - m^2).
// Each row of S values is summed vectorised in T, the rows' sums in double.
template <class T>
void feature_stats(const T* x, const BnShape& s, int64_t f, double* mean, double* var) {
  double sum = 0;
  for (int64_t n = 0; n < s.N; ++n) sum += Row<T>(x + (n * s.F + f) * s.S, s.S).sum();
  const double m = s.count() ? sum / s.count() : 0;
  const T mt = static_cast<T>(m);
  double sq = 0;
  for (int64_t n = 0; n < s.N; ++n) sq += (Row<T>(x + (n * s.F + f) * s.S, s.S) - mt).square().sum();
  *mean = m;
  *var = s.count() ? sq / s.count() : 0;
}

template <class T>
void batch_norm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.input(0);
  const bool per_channel = ctx.opset() >= 9 || node.attr_i("spatial", 1) != 0;
  const BnShape s = bn_shape(x, per_channel);
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) check_param(ctx.input(i), x, s, names[i]);
  const bool training = ctx.opset() >= 14 ? node.attr_i("training_mode", 0) != 0
                                          : (ctx.has_output(1) || ctx.has_output(2) || ctx.has_output(3) ||
                                             ctx.has_output(4));
  if (ctx.opset() >= 14)
    GR_CHECK(training || (!ctx.has_output(1) && !ctx.has_output(2)),
             "running_mean/running_var outputs need training_mode=1");
  const double eps = node.attr_f("epsilon", 1e-5f), momentum = node.attr_f("momentum", 0.9f);
  const T *xp = x.data<T>(), *scale = ctx.input(1).data<T>(), *bias = ctx.input(2).data<T>(),
          *in_mean = ctx.input(3).data<T>(), *in_var = ctx.input(4).data<T>();
  T* y = ctx.output(0, x.shape(), x.dtype()).data<T>();
  T *run_mean = nullptr, *run_var = nullptr, *saved_mean = nullptr, *saved_var = nullptr;
  if (training) {
    if (ctx.has_output(1)) run_mean = ctx.output(1, ctx.input(3).shape(), x.dtype()).data<T>();
    if (ctx.has_output(2)) run_var = ctx.output(2, ctx.input(4).shape(), x.dtype()).data<T>();
    if (ctx.has_output(3)) saved_mean = ctx.output(3, ctx.input(3).shape(), x.dtype()).data<T>();
    if (ctx.has_output(4)) saved_var = ctx.output(4, ctx.input(4).shape(), x.dtype()).data<T>();
    GR_CHECK(s.count() > 0, "training mode needs a non-empty batch");
  }
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 1)
  for (int64_t f = 0; f < s.F; ++f) {
    double mean = in_mean[f], var = in_var[f];
    if (training) {
      feature_stats(xp, s, f, &mean, &var);
      const double unbiased = s.count() > 1 ? var * s.count() / (s.count() - 1) : var;
      if (run_mean) run_mean[f] = static_cast<T>(in_mean[f] * momentum + mean * (1 - momentum));
      if (run_var) run_var[f] = static_cast<T>(in_var[f] * momentum + unbiased * (1 - momentum));
      if (saved_mean) saved_mean[f] = static_cast<T>(mean);
      if (saved_var) saved_var[f] = static_cast<T>(var);
    }
    const double a = scale[f] / std::sqrt(var + eps), b = bias[f] - mean * a;
    const T ta = static_cast<T>(a), tb = static_cast<T>(b);
    for (int64_t n = 0; n < s.N; ++n) {
      const T* p = xp + (n * s.F + f) * s.S;
      T* q = y + (n * s.F + f) * s.S;
      for (int64_t i = 0; i < s.S; ++i) q[i] = p[i] * ta + tb;
    }
  }
}

// BatchNormalizationGrad(dY, X, scale) -> (dX, dscale, dB) of training-mode BatchNormalization.
template <class T>
void batch_norm_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &scale = ctx.input(2);
  const BnShape s = bn_shape(x, true);
  GR_CHECK(dy.shape() == x.shape(), "dY " << shape_str(dy.shape()) << " and X " << shape_str(x.shape())
                                          << " must have the same shape");
  GR_CHECK(dy.dtype() == x.dtype(), "dY is " << dtype_name(dy.dtype()) << " but X is " << dtype_name(x.dtype()));
  check_param(scale, x, s, "scale");
  const double eps = ctx.node().attr_f("epsilon", 1e-5f);
  const T *g = dy.data<T>(), *xp = x.data<T>(), *sc = scale.data<T>();
  T* dx = ctx.has_output(0) ? ctx.output(0, x.shape(), x.dtype()).data<T>() : nullptr;
  T* dscale = ctx.has_output(1) ? ctx.output(1, scale.shape(), x.dtype()).data<T>() : nullptr;
  T* db = ctx.has_output(2) ? ctx.output(2, scale.shape(), x.dtype()).data<T>() : nullptr;
  const double cnt = static_cast<double>(s.count());
  GR_CHECK(s.count() > 0, "an empty batch has no batch statistics");
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 1)
  for (int64_t f = 0; f < s.F; ++f) {
    double mean, var;
    feature_stats(xp, s, f, &mean, &var);
    const double invstd = 1.0 / std::sqrt(var + eps);
    double sum_g = 0, sum_gx = 0;  // sum dY, sum dY * xhat
    const T mt = static_cast<T>(mean);
    for (int64_t n = 0; n < s.N; ++n) {
      Row<T> gp(g + (n * s.F + f) * s.S, s.S), p(xp + (n * s.F + f) * s.S, s.S);
      sum_g += gp.sum();
      sum_gx += (gp * (p - mt)).sum();
    }
    sum_gx *= invstd;
    if (db) db[f] = static_cast<T>(sum_g);
    if (dscale) dscale[f] = static_cast<T>(sum_gx);
    if (dx) {
      // dX = scale * invstd * (dY - mean(dY) - xhat * mean(dY * xhat))
      const double k = sc[f] * invstd, mg = sum_g / cnt, mgx = sum_gx / cnt;
      for (int64_t n = 0; n < s.N; ++n) {
        const T *gp = g + (n * s.F + f) * s.S, *p = xp + (n * s.F + f) * s.S;
        T* q = dx + (n * s.F + f) * s.S;
        for (int64_t i = 0; i < s.S; ++i) q[i] = static_cast<T>(k * (gp[i] - mg - (p[i] - mean) * invstd * mgx));
      }
    }
  }
}

bool scalar_true(const Tensor& t, const char* what) {
  GR_CHECK(t.numel() == 1, what << " must hold one value, got " << shape_str(t.shape()));
  if (t.dtype() == DType::Bool) return *static_cast<const uint8_t*>(t.raw()) != 0;
  return t.as_doubles()[0] != 0;
}

// Dropout: identity in inference (opsets < 12 always; 12+ unless training_mode is true).
// Training keeps each element with probability 1 - ratio and scales it by 1 / (1 - ratio).
template <class T>
void dropout_kernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.input(0);
  double ratio = node.attr_f("ratio", 0.5f);
  bool training = false;
  if (ctx.opset() >= 12) {
    ratio = ctx.has_input(1) ? ctx.input(1).as_doubles().at(0) : 0.5;
    if (ctx.has_input(1)) GR_CHECK(ctx.input(1).numel() == 1, "ratio must be a scalar");
    training = ctx.has_input(2) && scalar_true(ctx.input(2), "training_mode");
  }
  GR_CHECK(ratio >= 0 && ratio <= 1, "ratio must be in [0, 1], got " << ratio);
  const int64_t n = x.numel();
  const T* xp = x.data<T>();
  T* y = ctx.output(0, x.shape(), x.dtype()).data<T>();
  const DType mask_type = ctx.opset() >= 10 ? DType::Bool : x.dtype();
  void* mask = ctx.has_output(1) ? ctx.output(1, x.shape(), mask_type).raw() : nullptr;
  auto set_mask = [&](int64_t i, bool keep) {
    if (!mask) return;
    if (mask_type == DType::Bool) static_cast<uint8_t*>(mask)[i] = keep;
    else static_cast<T*>(mask)[i] = keep ? T(1) : T(0);
  };
  if (!training || ratio == 0) {
    if (y != xp) std::memcpy(y, xp, sizeof(T) * n);
    for (int64_t i = 0; i < n; ++i) set_mask(i, true);
    return;
  }
  std::mt19937_64 seeded(static_cast<uint64_t>(node.attr_i("seed", 0)));
  std::mt19937_64& rng = node.has_attr("seed") ? seeded : ctx.rng();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const T scale = ratio < 1 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = uniform(rng) >= ratio;
    y[i] = keep ? xp[i] * scale : T(0);
    set_mask(i, keep);
  }
}

template <int kX, void (*F32)(KernelContext&), void (*F64)(KernelContext&)>
void by_float(KernelContext& ctx) {
  const Tensor& x = ctx.input(kX);
  GR_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, "X must be f32 or f64, got " << dtype_name(x.dtype()));
  if (x.dtype() == DType::F32) F32(ctx);
  else F64(ctx);
}

}  // namespace

GR_REGISTER_OPS(norm) {
  ops.op("BatchNormalization").cpu(by_float<0, batch_norm_kernel<float>, batch_norm_kernel<double>>);
  ops.op("Dropout").cpu(by_float<0, dropout_kernel<float>, dropout_kernel<double>>);
  ops.op(kGraphrunDomain, "BatchNormalizationGrad")
      .cpu(by_float<1, batch_norm_grad_kernel<float>, batch_norm_grad_kernel<double>>)
      .schema(OpSchemaSpec("gradients of training-mode BatchNormalization (batch statistics over all axes but 1, "
                           "recomputed from X: one pass, cheaper than keeping them)")
                  .attr("epsilon", "as BatchNormalization", Attribute::Float(1e-5f))
                  .layer_gradient("scale")
                  .output_like(2, 2));
}

}  // namespace graphrun::runtime::cpu
