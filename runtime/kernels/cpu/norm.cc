// CPU kernels of the normalisation family: BatchNormalization (inference and training, opsets 7-17),
// LayerNormalization (opset 17), Dropout (opsets 7-17) and graphrun's BatchNormalizationGrad and
// LayerNormalizationGrad; FusedBatchNormalization (Relu(BatchNormalization), pass fuse_relu_bn_add) and its
// gradient FusedBatchNormalizationGrad.
//
// BatchNormalization in training mode normalises with the biased batch variance and updates the
// running variance with it too, as ONNX's spec says. Training keeps PyTorch's unbiased running
// variance with nodes of its own (graph/passes/unbiased_running_var.cc), never by changing this op.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // false positives inside Eigen's AVX-512 code
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include <omp.h>

#include "runtime/kernel.h"
#include "runtime/kernels/cpu/gemm.h"
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"

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

// Mean and biased variance of feature f, two passes (deviations from the mean, not E[x^2] - m^2), the second
// corrected: the first pass's mean m0 (rows summed vectorised in T, the rows' sums in double) is off by the float
// rounding of sums of values far larger than their spread when the mean is large against the spread; the second
// sums the deviations d = x - T(m0) (exact or nearly: x is close to m0) and their squares, and
// mean = T(m0) + sum(d) / n, var = sum(d^2) / n - (sum(d) / n)^2 (Chan, Golub and LeVeque's corrected two-pass).
template <class T>
void feature_stats(const T* x, const BnShape& s, int64_t f, double* mean, double* var) {
  if (!s.count()) {
    *mean = *var = 0;
    return;
  }
  double sum = 0;
  for (int64_t n = 0; n < s.N; ++n) sum += Row<T>(x + (n * s.F + f) * s.S, s.S).sum();
  const T m0 = static_cast<T>(sum / s.count());
  double d1 = 0, d2 = 0;
  for (int64_t n = 0; n < s.N; ++n) {
    const auto d = Row<T>(x + (n * s.F + f) * s.S, s.S) - m0;
    d1 += d.sum();
    d2 += d.square().sum();
  }
  const double shift = d1 / s.count();
  *mean = static_cast<double>(m0) + shift;
  *var = std::max(0.0, d2 / s.count() - shift * shift);
}

// kRelu: FusedBatchNormalization, Relu(BatchNormalization) bit for bit: each value computed as below, then
// the Relu kernel's v < 0 ? 0 : v (NaN passes) before it is stored.
template <class T, bool kRelu = false>
void batch_norm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.input(0);
  const bool per_channel = ctx.opset() >= 9 || node.attr_i("spatial", 1) != 0;
  const BnShape s = bn_shape(x, per_channel);
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) check_param(ctx.input(i), x, s, names[i]);
  const bool training = batch_norm_training(node, ctx.opset());
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
      if (run_mean) run_mean[f] = static_cast<T>(in_mean[f] * momentum + mean * (1 - momentum));
      if (run_var) run_var[f] = static_cast<T>(in_var[f] * momentum + var * (1 - momentum));
      if (saved_mean) saved_mean[f] = static_cast<T>(mean);
      if (saved_var) saved_var[f] = static_cast<T>(var);
    }
    // Y = (x - mean) * a + B, not x * a + (B - mean * a): that form cancels two terms |mean| / std times larger
    // than Y. The mean in two floats (hi + lo): x - hi is exact or nearly, and hi's own rounding does not come back
    // multiplied by a.
    const double a = scale[f] / std::sqrt(var + eps);
    const T ta = static_cast<T>(a), tb = bias[f], hi = static_cast<T>(mean),
            lo = static_cast<T>(mean - static_cast<double>(hi));
    for (int64_t n = 0; n < s.N; ++n) {
      const T* p = xp + (n * s.F + f) * s.S;
      T* q = y + (n * s.F + f) * s.S;
      if constexpr (kRelu) {
        for (int64_t i = 0; i < s.S; ++i) {
          const T v = ((p[i] - hi) - lo) * ta + tb;
          q[i] = v < T(0) ? T(0) : v;
        }
      } else {
        for (int64_t i = 0; i < s.S; ++i) q[i] = ((p[i] - hi) - lo) * ta + tb;
      }
    }
  }
}

// BatchNormalizationGrad(dY, X, scale) -> (dX, dscale, dB) of training-mode BatchNormalization.
// kRelu: FusedBatchNormalizationGrad(dY, Y, X, scale) = BatchNormalizationGrad(ReluGrad(dY, Y), X, scale) bit
// for bit (pass fuse_relu_bn_add): each row of ReluGrad's `Y > 0 ? dY : 0` is built in a per-thread buffer at
// the same offset from a 64-byte boundary as the row of dY it replaces, so Eigen's vectorised sum adds the
// same values in the same order as it adds the unfused ReluGrad's output.
template <class T, bool kRelu = false>
void batch_norm_grad_kernel(KernelContext& ctx) {
  constexpr int kX = kRelu ? 2 : 1;
  const Tensor &dy = ctx.input(0), &x = ctx.input(kX), &scale = ctx.input(kX + 1);
  const BnShape s = bn_shape(x, true);
  GR_CHECK(dy.shape() == x.shape(), "dY " << shape_str(dy.shape()) << " and X " << shape_str(x.shape())
                                          << " must have the same shape");
  GR_CHECK(dy.dtype() == x.dtype(), "dY is " << dtype_name(dy.dtype()) << " but X is " << dtype_name(x.dtype()));
  const T* yv = nullptr;
  if constexpr (kRelu) {
    const Tensor& y = ctx.input(1);
    GR_CHECK(y.shape() == x.shape() && y.dtype() == x.dtype(),
             "Y " << dtype_name(y.dtype()) << shape_str(y.shape()) << " must be X's " << dtype_name(x.dtype())
                  << shape_str(x.shape()));
    yv = y.data<T>();
  }
  check_param(scale, x, s, "scale");
  const double eps = ctx.node().attr_f("epsilon", 1e-5f);
  const T *g = dy.data<T>(), *xp = x.data<T>(), *sc = scale.data<T>();
  T* dx = ctx.has_output(0) ? ctx.output(0, x.shape(), x.dtype()).data<T>() : nullptr;
  T* dscale = ctx.has_output(1) ? ctx.output(1, scale.shape(), x.dtype()).data<T>() : nullptr;
  T* db = ctx.has_output(2) ? ctx.output(2, scale.shape(), x.dtype()).data<T>() : nullptr;
  const double cnt = static_cast<double>(s.count());
  GR_CHECK(s.count() > 0, "an empty batch has no batch statistics");
  constexpr int64_t kLine = 64 / sizeof(T);
  const int64_t slot = (s.S + 2 * kLine - 1) / kLine * kLine;  // a row and room to shift it within a line
  T* rows = kRelu ? static_cast<T*>(ctx.scratch(sizeof(T) * slot * ctx.threads())) : nullptr;
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 1)
  for (int64_t f = 0; f < s.F; ++f) {
    T* mine = kRelu ? rows + slot * omp_get_thread_num() : nullptr;
    // Row n of dY for feature f (the masked row when kRelu).
    auto grad_row = [&](int64_t n) -> const T* {
      const T* gp = g + (n * s.F + f) * s.S;
      if constexpr (!kRelu) {
        return gp;
      } else {
        const T* yp = yv + (n * s.F + f) * s.S;
        T* r = mine + (reinterpret_cast<uintptr_t>(gp) % 64) / sizeof(T);
        // Both loaded unconditionally (as in ReluGrad's kernel): a select the loop vectorises, not a branch.
#pragma omp simd
        for (int64_t i = 0; i < s.S; ++i) {
          const T d = gp[i], v = yp[i];
          r[i] = v > T(0) ? d : T(0);
        }
        return r;
      }
    };
    double mean, var;
    feature_stats(xp, s, f, &mean, &var);
    const double invstd = 1.0 / std::sqrt(var + eps);
    double sum_g = 0, sum_gx = 0;  // sum dY, sum dY * xhat
    const T mt = static_cast<T>(mean);
    for (int64_t n = 0; n < s.N; ++n) {
      Row<T> gp(grad_row(n), s.S), p(xp + (n * s.F + f) * s.S, s.S);
      sum_g += gp.sum();
      sum_gx += (gp * (p - mt)).sum();
    }
    // sum dY * (x - mean) = sum dY * (x - T(mean)) - (mean - T(mean)) * sum dY: T(mean)'s rounding is not
    // small against x - mean when the mean is large against the spread.
    sum_gx = (sum_gx - (mean - static_cast<double>(mt)) * sum_g) * invstd;
    if (db) db[f] = static_cast<T>(sum_g);
    if (dscale) dscale[f] = static_cast<T>(sum_gx);
    if (dx) {
      // dX = scale * invstd * (dY - mean(dY) - xhat * mean(dY * xhat))
      const double k = sc[f] * invstd, mg = sum_g / cnt, mgx = sum_gx / cnt;
      for (int64_t n = 0; n < s.N; ++n) {
        const T *gp = grad_row(n), *p = xp + (n * s.F + f) * s.S;
        T* q = dx + (n * s.F + f) * s.S;
        for (int64_t i = 0; i < s.S; ++i) q[i] = static_cast<T>(k * (gp[i] - mg - (p[i] - mean) * invstd * mgx));
      }
    }
  }
}

// X seen as [outer, inner]: LayerNormalization normalises each row over the axes [axis, rank).
struct LnShape {
  int64_t outer = 1, inner = 1;
  Shape stats;  // the shape of Mean and InvStdDev: X's with 1 from axis on
};

LnShape ln_shape(const Tensor& x, int64_t axis_attr) {
  GR_CHECK(x.rank() >= 1, "X must have rank >= 1");
  const int axis = norm_axis(axis_attr, x.rank(), "LayerNormalization");
  LnShape s;
  s.stats = x.shape();
  for (int i = 0; i < x.rank(); ++i) {
    (i < axis ? s.outer : s.inner) *= x.dim(i);
    if (i >= axis) s.stats[i] = 1;
  }
  return s;
}

void check_ln_param(const Tensor& t, const Tensor& x, const LnShape& s, const char* what) {
  GR_CHECK(t.dtype() == x.dtype(), what << " is " << dtype_name(t.dtype()) << " but X is " << dtype_name(x.dtype()));
  GR_CHECK(t.numel() == s.inner, what << " " << shape_str(t.shape()) << " must hold the " << s.inner
                                      << " values of X's normalised axes (X " << shape_str(x.shape()) << ")");
}

// The element type of Mean and InvStdDev. The statistics are computed in double whatever X is.
DType ln_stash_type(const Node& n) {
  const int64_t st = n.attr_i("stash_type", 1);
  GR_CHECK(st == 1 || st == 11, "stash_type " << st << " is not supported (1: float, 11: double)");
  return st == 1 ? DType::F32 : DType::F64;
}

template <class T, class U>
void ln_forward(const T* x, const T* scale, const T* bias, double eps, const LnShape& s, T* y, U* mean_out,
                U* invstd_out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < s.outer; ++r) {
    const T* p = x + r * s.inner;
    // Sums in lanes (lane_sum): a row's one chain of additions waited on each one's latency.
    const double sum = lane_sum<double>(s.inner, [&](int64_t j) { return static_cast<double>(p[j]); });
    const double m = s.inner ? sum / s.inner : 0;
    const double sq = lane_sum<double>(s.inner, [&](int64_t j) { return (p[j] - m) * (p[j] - m); });
    const double invstd = 1.0 / std::sqrt((s.inner ? sq / s.inner : 0) + eps);
    if (mean_out) mean_out[r] = static_cast<U>(m);
    if (invstd_out) invstd_out[r] = static_cast<U>(invstd);
    T* q = y + r * s.inner;
    for (int64_t j = 0; j < s.inner; ++j)
      q[j] = static_cast<T>((p[j] - m) * invstd * scale[j] + (bias ? static_cast<double>(bias[j]) : 0.0));
  }
}

template <class T>
void layer_norm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.input(0);
  const LnShape s = ln_shape(x, node.attr_i("axis", -1));
  check_ln_param(ctx.input(1), x, s, "Scale");
  if (ctx.has_input(2)) check_ln_param(ctx.input(2), x, s, "B");
  const DType u = ln_stash_type(node);
  const double eps = node.attr_f("epsilon", 1e-5f);
  const T* bias = ctx.has_input(2) ? ctx.input(2).data<T>() : nullptr;
  T* y = ctx.output(0, x.shape(), x.dtype()).data<T>();
  void* mean = ctx.has_output(1) ? ctx.output(1, s.stats, u).raw() : nullptr;
  void* invstd = ctx.has_output(2) ? ctx.output(2, s.stats, u).raw() : nullptr;
  if (u == DType::F32)
    ln_forward(x.data<T>(), ctx.input(1).data<T>(), bias, eps, s, y, static_cast<float*>(mean),
               static_cast<float*>(invstd), ctx.threads());
  else
    ln_forward(x.data<T>(), ctx.input(1).data<T>(), bias, eps, s, y, static_cast<double*>(mean),
               static_cast<double*>(invstd), ctx.threads());
}

// LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB), from the forward's statistics:
// with xhat = (X - Mean) * InvStdDev and g = dY * Scale, per row
// dX = InvStdDev * (g - mean(g) - xhat * mean(g * xhat)); over the rows dScale = sum(dY * xhat), dB = sum(dY).
template <class T, class U>
void ln_backward(const T* dy, const T* x, const T* scale, const U* mean, const U* invstd, const LnShape& s, T* dx,
                 T* dscale, T* db, int threads) {
  if (dx) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < s.outer; ++r) {
      const T *g = dy + r * s.inner, *p = x + r * s.inner;
      const double m = mean[r], is = invstd[r];
      const double sum_g = lane_sum<double>(s.inner, [&](int64_t j) { return static_cast<double>(g[j]) * scale[j]; });
      const double sum_gx = lane_sum<double>(
          s.inner, [&](int64_t j) { return static_cast<double>(g[j]) * scale[j] * (p[j] - m) * is; });
      const double mg = sum_g / s.inner, mgx = sum_gx / s.inner;
      T* q = dx + r * s.inner;
      for (int64_t j = 0; j < s.inner; ++j)
        q[j] = static_cast<T>(is * (static_cast<double>(g[j]) * scale[j] - mg - (p[j] - m) * is * mgx));
    }
  }
  if (!dscale && !db) return;
  // Row by row, every column's sums at once (each still adds its rows in order: the same bits as a column
  // at a time, which strided a row's length per element); columns split over the threads.
  const int th = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, s.inner / 64)));
  std::vector<double> a(s.inner, 0.0), b(s.inner, 0.0);
#pragma omp parallel num_threads(th) if (th > 1)
  {
    const int t = th > 1 ? omp_get_thread_num() : 0;
    const int64_t j0 = s.inner * t / th, j1 = s.inner * (t + 1) / th;
    for (int64_t r = 0; r < s.outer; ++r) {
      const T *g = dy + r * s.inner, *p = x + r * s.inner;
      const double m = static_cast<double>(mean[r]), is = invstd[r];
      for (int64_t j = j0; j < j1; ++j) {
        const double gj = g[j];
        a[j] += gj * (p[j] - m) * is;
        b[j] += gj;
      }
    }
  }
  for (int64_t j = 0; j < s.inner; ++j) {
    if (dscale) dscale[j] = static_cast<T>(a[j]);
    if (db) db[j] = static_cast<T>(b[j]);
  }
}

template <class T>
void layer_norm_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &scale = ctx.input(2), &mean = ctx.input(3),
               &invstd = ctx.input(4);
  const LnShape s = ln_shape(x, ctx.node().attr_i("axis", -1));
  GR_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(),
           "dY " << dtype_name(dy.dtype()) << shape_str(dy.shape()) << " must match X " << dtype_name(x.dtype())
                 << shape_str(x.shape()));
  check_ln_param(scale, x, s, "Scale");
  for (const Tensor* t : {&mean, &invstd})
    GR_CHECK(t->numel() == s.outer && t->dtype() == mean.dtype() &&
                 (t->dtype() == DType::F32 || t->dtype() == DType::F64),
             "Mean and InvStdDev must be f32 or f64 " << shape_str(s.stats) << ", got " << dtype_name(t->dtype())
                                                      << shape_str(t->shape()));
  T* dx = ctx.has_output(0) ? ctx.output(0, x.shape(), x.dtype()).data<T>() : nullptr;
  T* dscale = ctx.has_output(1) ? ctx.output(1, scale.shape(), x.dtype()).data<T>() : nullptr;
  T* db = ctx.has_output(2) ? ctx.output(2, scale.shape(), x.dtype()).data<T>() : nullptr;
  if (mean.dtype() == DType::F32)
    ln_backward(dy.data<T>(), x.data<T>(), scale.data<T>(), mean.data<float>(), invstd.data<float>(), s, dx, dscale,
                db, ctx.threads());
  else
    ln_backward(dy.data<T>(), x.data<T>(), scale.data<T>(), mean.data<double>(), invstd.data<double>(), s, dx,
                dscale, db, ctx.threads());
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

// Half precision in inference only: in training mode running_mean/var take input_mean's type, which may not be X's
// (the type the widened kernel's outputs return to).
void batch_norm_any(KernelContext& ctx) {
  if (has_half_input(ctx))
    GR_CHECK(ctx.opset() >= 14 ? ctx.node().attr_i("training_mode", 0) == 0 : ctx.num_outputs() == 1,
             "BatchNormalization: training mode on " << dtype_name(ctx.input(0).dtype())
                                                     << " is not supported (half precision is inference only)");
  via_f32<by_float<0, batch_norm_kernel<float>, batch_norm_kernel<double>>>(ctx);
}

// FusedBatchNormalization: f32 and f64 only (pass fuse_relu_bn_add fuses no other type).
void fused_batch_norm_kernel(KernelContext& ctx) {
  check_fused_activation(ctx.node());
  by_float<0, batch_norm_kernel<float, true>, batch_norm_kernel<double, true>>(ctx);
}

void fused_batch_norm_grad_kernel(KernelContext& ctx) {
  check_fused_activation(ctx.node());
  by_float<2, batch_norm_grad_kernel<float, true>, batch_norm_grad_kernel<double, true>>(ctx);
}

}  // namespace

GR_REGISTER_OPS(norm) {
  ops.op("BatchNormalization").cpu(batch_norm_any);
  ops.op("Dropout").cpu(by_float<0, dropout_kernel<float>, dropout_kernel<double>>);
  ops.op("LayerNormalization").cpu(via_f32<by_float<0, layer_norm_kernel<float>, layer_norm_kernel<double>>, 0b110>);
  ops.op(kGraphrunDomain, "LayerNormalizationGrad")
      .cpu(by_float<1, layer_norm_grad_kernel<float>, layer_norm_grad_kernel<double>>)
      .schema(OpSchemaSpec("gradients of LayerNormalization from the forward's saved Mean and InvStdDev (the "
                           "statistics are not recomputed)")
                  .attr("axis", "as LayerNormalization", Attribute::Int(-1))
                  .input("dY", "gradient of Y", "T")
                  .input("X", "the forward's input", "T")
                  .input("Scale", "the forward's Scale", "T")
                  .input("Mean", "the forward's Mean output", "U")
                  .input("InvStdDev", "the forward's InvStdDev output", "U")
                  .output("dX", "gradient of X", "T", OpSchemaSpec::Arity::Optional)
                  .output("dScale", "gradient of Scale", "T", OpSchemaSpec::Arity::Optional)
                  .output("dB", "gradient of B (shaped like Scale)", "T", OpSchemaSpec::Arity::Optional)
                  .type("T", float_tensor_types(), "X and its gradients")
                  .type("U", {"tensor(float)", "tensor(double)"}, "the saved statistics")
                  .output_like(0, 1)
                  .output_like(1, 2)
                  .output_like(2, 2));
  ops.op(kGraphrunDomain, "FusedBatchNormalization")
      .cpu(fused_batch_norm_kernel)
      .schema(OpSchemaSpec("`Relu(BatchNormalization(X, scale, B, input_mean, input_var))` in one kernel: the Relu "
                           "applied to each value as it is stored (internal: pass fuse_relu_bn_add makes it of "
                           "BatchNormalization + Relu; exported graphs keep those)")
                  .attr("activation", "the activation: Relu", Attribute::Str("Relu"))
                  .attr("epsilon", "as BatchNormalization", Attribute::Float(1e-5f))
                  .attr("momentum", "as BatchNormalization", Attribute::Float(0.9f))
                  .attr("training_mode", "as BatchNormalization (opset 14+)", Attribute::Int(0))
                  .attr("spatial", "as BatchNormalization (opsets 7-8)", Attribute::Int(1))
                  .input("X", "as BatchNormalization", "T")
                  .input("scale", "as BatchNormalization", "T")
                  .input("B", "as BatchNormalization", "T")
                  .input("input_mean", "as BatchNormalization", "T")
                  .input("input_var", "as BatchNormalization", "T")
                  .output("Y", "Relu of BatchNormalization's Y", "T")
                  .output("running_mean", "as BatchNormalization", "T", OpSchemaSpec::Arity::Optional)
                  .output("running_var", "as BatchNormalization", "T", OpSchemaSpec::Arity::Optional)
                  .output("saved_mean", "as BatchNormalization before opset 14", "T", OpSchemaSpec::Arity::Optional)
                  .output("saved_var", "as BatchNormalization before opset 14", "T", OpSchemaSpec::Arity::Optional)
                  .type("T", {"tensor(float)", "tensor(double)"}, "f32 or f64")
                  .output_like(0, 0)
                  .output_like(1, 3)
                  .output_like(2, 4)
                  .output_like(3, 3)
                  .output_like(4, 4));
  ops.op(kGraphrunDomain, "BatchNormalizationGrad")
      .cpu(by_float<1, batch_norm_grad_kernel<float>, batch_norm_grad_kernel<double>>)
      .schema(OpSchemaSpec("gradients of training-mode BatchNormalization (batch statistics over all axes but 1, "
                           "recomputed from X: one pass, cheaper than keeping them)")
                  .attr("epsilon", "as BatchNormalization", Attribute::Float(1e-5f))
                  .layer_gradient("scale")
                  .output_like(2, 2));
  ops.op(kGraphrunDomain, "FusedBatchNormalizationGrad")
      .cpu(fused_batch_norm_grad_kernel)
      .schema(OpSchemaSpec("`BatchNormalizationGrad(ReluGrad(dY, Y), X, scale)`, the gradients of FusedBatchNormalization, "
                           "in one kernel: the Relu's mask applied to dY as it is read (internal: pass fuse_relu_bn_add "
                           "makes it of ReluGrad + BatchNormalizationGrad)")
                  .attr("activation", "the activation: Relu", Attribute::Str("Relu"))
                  .attr("epsilon", "as BatchNormalization", Attribute::Float(1e-5f))
                  .input("dY", "gradient of the Relu's output", "T")
                  .input("Y", "the Relu's output", "T")
                  .input("X", "BatchNormalization's input", "T")
                  .input("scale", "BatchNormalization's scale", "T")
                  .output("dX", "gradient of X", "T", OpSchemaSpec::Arity::Optional)
                  .output("dscale", "gradient of scale", "T", OpSchemaSpec::Arity::Optional)
                  .output("dB", "gradient of B (shaped like scale)", "T", OpSchemaSpec::Arity::Optional)
                  .type("T", {"tensor(float)", "tensor(double)"}, "f32 or f64")
                  .output_like(0, 2)
                  .output_like(1, 3)
                  .output_like(2, 3));
}

}  // namespace graphrun::runtime::cpu
