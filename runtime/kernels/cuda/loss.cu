// CUDA kernels: loss family (the CPU's loss.cc op set): SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss
// and their gradients (ai.graphrun SoftmaxCrossEntropyLossGrad, NegativeLogLikelihoodLossGrad; docs/ops.md).
// Scores are [N, C, d1...], labels [N, d1...].
#include <cfloat>

#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime::cuda {
namespace {

enum class Reduction { None, Sum, Mean };

Reduction reduction_of(const Node& n) {
  std::string r = n.attr_s("reduction", "mean");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  GR_CHECK(r == "mean", "reduction must be none, sum or mean, got '" << r << "'");
  return Reduction::Mean;
}

struct LossShape {
  int64_t n = 0, c = 0, d = 1;  // scores [n, c, d] after flattening the trailing dims
};

LossShape loss_shape(const Tensor& scores, const Tensor& labels) {
  GR_CHECK(scores.rank() >= 2, "scores must be [N, C, ...], got " << shape_str(scores.shape()));
  LossShape s;
  s.n = scores.dim(0);
  s.c = scores.dim(1);
  for (int i = 2; i < scores.rank(); ++i) s.d *= scores.dim(i);
  Shape want{s.n};
  for (int i = 2; i < scores.rank(); ++i) want.push_back(scores.dim(i));
  GR_CHECK(labels.shape() == want, "labels must have shape " << shape_str(want) << " for scores "
                                                             << shape_str(scores.shape()) << ", got " << shape_str(labels.shape()));
  GR_CHECK(labels.dtype() == DType::I64 || labels.dtype() == DType::I32, "labels must be i64 or i32");
  return s;
}

template <class L>
__device__ bool label_weight(const L* labels, const float* weights, int64_t r, int64_t c, bool has_ignore,
                             int64_t ignore, int64_t* label, float* w) {
  int64_t l = static_cast<int64_t>(labels[r]);
  *label = l;
  if (has_ignore && l == ignore) { *w = 0.f; return false; }
  *w = (l >= 0 && l < c) ? (weights ? weights[l] : 1.f) : NAN;  // a bad label poisons the loss visibly
  return true;
}

template <class L>
__global__ void sce_forward_rows(const float* x, const L* labels, const float* weights, float* logp, float* row_loss,
                                 float* row_w, LossShape s, bool has_ignore, int64_t ignore) {
  GR_GRID_STRIDE(r, s.n * s.d) {
    int64_t n = r / s.d, d = r % s.d;
    const float* xr = x + n * s.c * s.d + d;
    float* lr = logp + n * s.c * s.d + d;
    float m = -FLT_MAX;
    for (int64_t k = 0; k < s.c; ++k) m = fmaxf(m, xr[k * s.d]);
    float sum = 0.f;
    for (int64_t k = 0; k < s.c; ++k) sum += expf(xr[k * s.d] - m);
    float lse = m + logf(sum);
    for (int64_t k = 0; k < s.c; ++k) lr[k * s.d] = xr[k * s.d] - lse;
    int64_t l;
    float w;
    if (!label_weight(labels, weights, r, s.c, has_ignore, ignore, &l, &w)) {
      row_loss[r] = 0.f;
    } else {
      row_loss[r] = (l >= 0 && l < s.c) ? -w * lr[l * s.d] : NAN;
    }
    if (row_w) row_w[r] = w;
  }
}

// One block: out[0] = sum(a) (or sum(a) / sum(b) when b is given).
__global__ void sum_ratio_kernel(const float* a, const float* b, int64_t n, float* out) {
  __shared__ float sa[kThreads], sb[kThreads];
  float x = 0.f, y = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    x += a[i];
    if (b) y += b[i];
  }
  sa[threadIdx.x] = x;
  sb[threadIdx.x] = y;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      sa[threadIdx.x] += sa[threadIdx.x + w];
      sb[threadIdx.x] += sb[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = b ? sa[0] / sb[0] : sa[0];
}

template <class F>
void dispatch_label(const Tensor& labels, F f) {
  if (labels.dtype() == DType::I64) f(int64_t{});
  else f(int32_t{});
}

const float* weights_of(KernelContext& ctx, int i, int64_t c) {
  if (!ctx.has_input(i)) return nullptr;
  const Tensor& W = ctx.input(i);
  GR_CHECK(W.dtype() == DType::F32 && W.shape() == Shape{c}, "weights must be f32[" << c << "], got "
                                                                                    << dtype_name(W.dtype()) << shape_str(W.shape()));
  return dptr<float>(W);
}

void sce_loss_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& Lb = ctx.input(1);
  GR_CHECK(X.dtype() == DType::F32, "scores on CUDA must be f32, got " << dtype_name(X.dtype()));
  LossShape s = loss_shape(X, Lb);
  const float* weights = weights_of(ctx, 2, s.c);
  Reduction red = reduction_of(ctx.node());
  bool has_ignore = ctx.node().has_attr("ignore_index");
  int64_t ignore = ctx.node().attr_i("ignore_index", 0);
  Shape loss_shape_none = Lb.shape();
  Tensor& loss = ctx.output(0, red == Reduction::None ? loss_shape_none : Shape{}, DType::F32);
  int64_t rows = s.n * s.d;
  cudaStream_t st = stream_of(ctx);
  // One scratch request per call (the planned scratch is one block): the per-row losses and weights
  // of a reduction, and log_prob when the node has no output for it (optional in ONNX).
  const bool logp_out = ctx.num_outputs() > 1;
  const int64_t row_floats = red == Reduction::None ? 0 : 2 * std::max<int64_t>(rows, 1);
  const int64_t floats = row_floats + (logp_out ? 0 : X.numel());
  float* scratch = floats ? static_cast<float*>(ctx.scratch(floats * sizeof(float))) : nullptr;
  float* logp = logp_out ? dptr<float>(ctx.output(1, X.shape(), DType::F32)) : scratch + row_floats;
  float* row_loss = nullptr;
  float* row_w = nullptr;
  if (red == Reduction::None) {
    row_loss = dptr<float>(loss);
  } else {
    row_loss = scratch;
    row_w = scratch + std::max<int64_t>(rows, 1);
  }
  if (rows > 0) {
    dispatch_label(Lb, [&](auto tag) {
      using L = decltype(tag);
      sce_forward_rows<L><<<grid_for(rows), kThreads, 0, st>>>(dptr<float>(X), dptr<L>(Lb), weights, logp,
                                                               row_loss, row_w, s, has_ignore, ignore);
    });
    GR_LAUNCH_CHECK("sce_forward_rows");
  }
  if (red != Reduction::None) {
    // Mean divides by the summed weights of the counted rows (their number without weights), as ONNX does.
    sum_ratio_kernel<<<1, kThreads, 0, st>>>(row_loss, red == Reduction::Mean ? row_w : nullptr, rows, dptr<float>(loss));
    GR_LAUNCH_CHECK("sum_ratio");
  }
}

template <class L>
__global__ void row_weights_kernel(const L* labels, const float* weights, float* row_w, int64_t rows, int64_t c,
                                   bool has_ignore, int64_t ignore) {
  GR_GRID_STRIDE(r, rows) {
    int64_t l;
    float w;
    label_weight(labels, weights, r, c, has_ignore, ignore, &l, &w);
    row_w[r] = w;
  }
}

// The summed weights of the counted rows (a device scalar in scratch), by which reduction mean divides.
float* mean_weight_sum(KernelContext& ctx, const Tensor& Lb, const float* weights, LossShape s, bool has_ignore,
                       int64_t ignore) {
  const int64_t rows = s.n * s.d;
  cudaStream_t st = stream_of(ctx);
  float* scratch = static_cast<float*>(ctx.scratch((std::max<int64_t>(rows, 1) + 1) * sizeof(float)));
  float* weight_sum = scratch + std::max<int64_t>(rows, 1);
  if (rows > 0) {
    dispatch_label(Lb, [&](auto tag) {
      using L = decltype(tag);
      row_weights_kernel<L><<<grid_for(rows), kThreads, 0, st>>>(dptr<L>(Lb), weights, scratch, rows, s.c, has_ignore, ignore);
    });
    GR_LAUNCH_CHECK("row_weights");
  }
  sum_ratio_kernel<<<1, kThreads, 0, st>>>(scratch, nullptr, rows, weight_sum);
  GR_LAUNCH_CHECK("sum_ratio");
  return weight_sum;
}

template <class L>
__global__ void sce_grad_kernel(const float* dloss, const float* logp, const L* labels, const float* weights,
                                const float* weight_sum, float* dx, LossShape s, int red, bool has_ignore, int64_t ignore) {
  GR_GRID_STRIDE(i, s.n * s.c * s.d) {
    int64_t d = i % s.d;
    int64_t c = (i / s.d) % s.c;
    int64_t n = i / (s.c * s.d);
    int64_t r = n * s.d + d;
    int64_t l;
    float w;
    if (!label_weight(labels, weights, r, s.c, has_ignore, ignore, &l, &w)) {
      dx[i] = 0.f;
      continue;
    }
    float g = red == 0 ? dloss[r] : dloss[0];
    if (red == 2) g /= weight_sum[0];
    dx[i] = (expf(logp[i]) - (c == l ? 1.f : 0.f)) * w * g;
  }
}

void sce_grad_op(KernelContext& ctx) {
  const Tensor& dL = ctx.input(0);
  const Tensor& logp = ctx.input(1);
  const Tensor& Lb = ctx.input(2);
  GR_CHECK(logp.dtype() == DType::F32 && dL.dtype() == DType::F32, "SoftmaxCrossEntropyLossGrad on CUDA takes f32");
  LossShape s = loss_shape(logp, Lb);
  const float* weights = weights_of(ctx, 3, s.c);
  Reduction red = reduction_of(ctx.node());
  bool has_ignore = ctx.node().has_attr("ignore_index");
  int64_t ignore = ctx.node().attr_i("ignore_index", 0);
  int64_t rows = s.n * s.d;
  if (red == Reduction::None)
    GR_CHECK(dL.numel() == rows, "dloss must have " << rows << " values for reduction none, got " << shape_str(dL.shape()));
  else
    GR_CHECK(dL.numel() == 1, "dloss must be a scalar, got " << shape_str(dL.shape()));
  Tensor& dX = ctx.output(0, logp.shape(), DType::F32);
  cudaStream_t st = stream_of(ctx);
  float* weight_sum = red == Reduction::Mean ? mean_weight_sum(ctx, Lb, weights, s, has_ignore, ignore) : nullptr;
  int64_t n = dX.numel();
  if (n == 0) return;
  dispatch_label(Lb, [&](auto tag) {
    using L = decltype(tag);
    sce_grad_kernel<L><<<grid_for(n), kThreads, 0, st>>>(dptr<float>(dL), dptr<float>(logp), dptr<L>(Lb), weights, weight_sum,
                                                        dptr<float>(dX), s, static_cast<int>(red), has_ignore, ignore);
  });
  GR_LAUNCH_CHECK("sce_grad");
}

// ---- NegativeLogLikelihoodLoss: input [N, C, d...] holds log-probabilities; loss = -weight[l] * input[n, l, d] ----
template <class L>
__global__ void nll_rows_kernel(const float* x, const L* labels, const float* weights, float* row_loss, float* row_w,
                                LossShape s, bool has_ignore, int64_t ignore) {
  GR_GRID_STRIDE(r, s.n * s.d) {
    const int64_t n = r / s.d, d = r % s.d;
    int64_t l;
    float w;
    if (!label_weight(labels, weights, r, s.c, has_ignore, ignore, &l, &w)) row_loss[r] = 0.f;
    else row_loss[r] = (l >= 0 && l < s.c) ? -w * x[(n * s.c + l) * s.d + d] : NAN;
    if (row_w) row_w[r] = w;
  }
}

struct LossAttrs {
  Reduction red;
  bool has_ignore;
  int64_t ignore;
};

LossAttrs loss_attrs(const Node& n) {
  return {reduction_of(n), n.has_attr("ignore_index"), n.attr_i("ignore_index", 0)};
}

void nll_loss_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &Lb = ctx.input(1);
  GR_CHECK(X.dtype() == DType::F32, "NegativeLogLikelihoodLoss on CUDA takes f32 input, got " << dtype_name(X.dtype()));
  const LossShape s = loss_shape(X, Lb);
  const float* weights = weights_of(ctx, 2, s.c);
  const LossAttrs a = loss_attrs(ctx.node());
  Tensor& loss = ctx.output(0, a.red == Reduction::None ? Lb.shape() : Shape{}, DType::F32);
  const int64_t rows = s.n * s.d;
  cudaStream_t st = stream_of(ctx);
  float* row_loss = dptr<float>(loss);
  float* row_w = nullptr;
  if (a.red != Reduction::None) {
    row_loss = static_cast<float*>(ctx.scratch(2 * std::max<int64_t>(rows, 1) * sizeof(float)));
    row_w = row_loss + std::max<int64_t>(rows, 1);
  }
  if (rows > 0) {
    dispatch_label(Lb, [&](auto tag) {
      using L = decltype(tag);
      nll_rows_kernel<L><<<grid_for(rows), kThreads, 0, st>>>(dptr<float>(X), dptr<L>(Lb), weights, row_loss, row_w, s,
                                                              a.has_ignore, a.ignore);
    });
    GR_LAUNCH_CHECK("nll_rows");
  }
  if (a.red != Reduction::None) {
    sum_ratio_kernel<<<1, kThreads, 0, st>>>(row_loss, a.red == Reduction::Mean ? row_w : nullptr, rows, dptr<float>(loss));
    GR_LAUNCH_CHECK("sum_ratio");
  }
}

// dinput = -weight[l] * dloss at the label's position (divided by the weight sum for mean), 0 elsewhere.
template <class L>
__global__ void nll_grad_kernel(const float* dloss, const L* labels, const float* weights, const float* weight_sum,
                                float* dx, LossShape s, int red, bool has_ignore, int64_t ignore) {
  GR_GRID_STRIDE(i, s.n * s.c * s.d) {
    const int64_t d = i % s.d, c = (i / s.d) % s.c, n = i / (s.c * s.d), r = n * s.d + d;
    int64_t l;
    float w;
    if (!label_weight(labels, weights, r, s.c, has_ignore, ignore, &l, &w) || c != l) {
      dx[i] = 0.f;
      continue;
    }
    float g = red == 0 ? dloss[r] : dloss[0];
    if (red == 2) g /= weight_sum[0];
    dx[i] = -w * g;
  }
}

void nll_grad_op(KernelContext& ctx) {
  const Tensor &dL = ctx.input(0), &X = ctx.input(1), &Lb = ctx.input(2);
  GR_CHECK(X.dtype() == DType::F32 && dL.dtype() == DType::F32, "NegativeLogLikelihoodLossGrad on CUDA takes f32");
  const LossShape s = loss_shape(X, Lb);
  const float* weights = weights_of(ctx, 3, s.c);
  const LossAttrs a = loss_attrs(ctx.node());
  const int64_t rows = s.n * s.d;
  if (a.red == Reduction::None)
    GR_CHECK(dL.shape() == Lb.shape(), "dloss must have the labels' shape " << shape_str(Lb.shape()) << " for reduction none, got "
                                                                           << shape_str(dL.shape()));
  else
    GR_CHECK(dL.numel() == 1, "dloss must be a scalar, got " << shape_str(dL.shape()));
  Tensor& dX = ctx.output(0, X.shape(), DType::F32);
  float* weight_sum = a.red == Reduction::Mean ? mean_weight_sum(ctx, Lb, weights, s, a.has_ignore, a.ignore) : nullptr;
  const int64_t n = dX.numel();
  if (n == 0 || rows == 0) return;
  dispatch_label(Lb, [&](auto tag) {
    using L = decltype(tag);
    nll_grad_kernel<L><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(dL), dptr<L>(Lb), weights, weight_sum,
                                                                     dptr<float>(dX), s, static_cast<int>(a.red), a.has_ignore,
                                                                     a.ignore);
  });
  GR_LAUNCH_CHECK("nll_grad");
}

}  // namespace

GR_REGISTER_OPS(loss) {
  ops.op("SoftmaxCrossEntropyLoss").cuda(locked<sce_loss_op>);
  ops.op(kGraphrunDomain, "SoftmaxCrossEntropyLossGrad").cuda(locked<sce_grad_op>);
  ops.op("NegativeLogLikelihoodLoss").cuda(locked<nll_loss_op>);
  ops.op(kGraphrunDomain, "NegativeLogLikelihoodLossGrad").cuda(locked<nll_grad_op>);
}

}  // namespace graphrun::runtime::cuda
