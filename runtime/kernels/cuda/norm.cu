// CUDA kernels: norm family (the CPU's norm.cc op set): BatchNormalization (training and inference),
// LayerNormalization, ai.graphrun BatchNormalizationGrad and LayerNormalizationGrad, the fused
// FusedBatchNormalization and FusedBatchNormalizationGrad (pass fuse_relu_bn_add), Dropout, and the CPU's
// instance_norm.cc pair InstanceNormalization / InstanceNormalizationGrad. Own kernels: one block per
// channel (BatchNormalization) or per row (LayerNormalization, InstanceNormalization's (n, c) rows) for
// the statistics; parameter gradients sum per-row partials in a fixed order (no atomics: deterministic).
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/cuda/fused.cuh"

namespace graphrun::runtime::cuda {
namespace {

// Sum of v over the block, returned to every thread. `sh` holds kThreads floats.
__device__ float block_sum(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

struct ChannelShape {
  int64_t n, c, hw;
  __device__ int64_t at(int64_t ch, int64_t j) const { return ((j / hw) * c + ch) * hw + j % hw; }  // j-th element of channel ch
};

ChannelShape channel_shape(const Tensor& X) {
  GR_CHECK(X.rank() >= 2 && X.dtype() == DType::F32, "BatchNormalization on CUDA takes f32 [N, C, ...], got "
                                                         << dtype_name(X.dtype()) << shape_str(X.shape()));
  ChannelShape s{X.dim(0), X.dim(1), 1};
  for (int d = 2; d < X.rank(); ++d) s.hw *= X.dim(d);
  return s;
}

// Batch mean and biased variance of each channel (two passes over the channel: stable).
__device__ void channel_stats(const float* x, ChannelShape s, int64_t ch, float* sh, float* mean, float* var) {
  int64_t m = s.n * s.hw;
  float acc = 0.f;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) acc += x[s.at(ch, j)];
  float mu = block_sum(acc, sh) / static_cast<float>(m);
  acc = 0.f;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    float d = x[s.at(ch, j)] - mu;
    acc += d * d;
  }
  *mean = mu;
  *var = block_sum(acc, sh) / static_cast<float>(m);
}

__global__ void bn_train_stats_kernel(const float* x, ChannelShape s, const float* in_mean, const float* in_var,
                                      float momentum, float* mean_out, float* var_out, float* run_mean, float* run_var) {
  __shared__ float sh[kThreads];
  for (int64_t ch = blockIdx.x; ch < s.c; ch += gridDim.x) {
    float mu, var;
    channel_stats(x, s, ch, sh, &mu, &var);
    if (threadIdx.x == 0) {
      mean_out[ch] = mu;
      var_out[ch] = var;
      // running = input * momentum + batch * (1 - momentum), the batch variance biased (ONNX's spec).
      if (run_mean) run_mean[ch] = in_mean[ch] * momentum + mu * (1.f - momentum);
      if (run_var) run_var[ch] = in_var[ch] * momentum + var * (1.f - momentum);
    }
  }
}

// relu: FusedBatchNormalization, the Relu kernel's v < 0 ? 0 : v applied before the store.
__global__ void bn_apply_kernel(const float* x, const float* scale, const float* bias, const float* mean,
                                const float* var, float eps, float* y, ChannelShape s, bool relu) {
  GR_GRID_STRIDE(i, s.n * s.c * s.hw) {
    int64_t ch = (i / s.hw) % s.c;
    const float v = (x[i] - mean[ch]) * rsqrtf(var[ch] + eps) * scale[ch] + bias[ch];
    y[i] = relu && v < 0.f ? 0.f : v;
  }
}

void check_channel_param(const Tensor& t, int64_t c, const char* what) {
  GR_CHECK(t.dtype() == DType::F32 && t.numel() == c, "BatchNormalization: " << what << " must be f32[" << c << "], got "
                                                                             << dtype_name(t.dtype()) << shape_str(t.shape()));
}

// BatchNormalization, or FusedBatchNormalization (Relu(BatchNormalization), pass fuse_relu_bn_add).
void batchnorm_op(KernelContext& ctx) {
  const bool relu = ctx.node().domain == kGraphrunDomain;
  if (relu) check_fused_activation(ctx.node());
  const Tensor& X = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor& B = ctx.input(2);
  const Tensor& in_mean = ctx.input(3);
  const Tensor& in_var = ctx.input(4);
  ChannelShape s = channel_shape(X);
  check_channel_param(scale, s.c, "scale");
  check_channel_param(B, s.c, "B");
  check_channel_param(in_mean, s.c, "input_mean");
  check_channel_param(in_var, s.c, "input_var");
  const Node& n = ctx.node();
  GR_CHECK(ctx.opset() >= 9 || n.attr_i("spatial", 1) != 0, "BatchNormalization on CUDA supports spatial=1 only");
  float eps = n.attr_f("epsilon", 1e-5f), momentum = n.attr_f("momentum", 0.9f);
  // Opset 14 made the mode an attribute; before it, asking for any statistics output meant training.
  bool training = ctx.opset() >= 14 ? n.attr_i("training_mode", 0) != 0
                                    : ctx.has_output(1) || ctx.has_output(2) || ctx.has_output(3) || ctx.has_output(4);
  if (ctx.opset() >= 14)
    GR_CHECK(training || (!ctx.has_output(1) && !ctx.has_output(2)),
             "running_mean/running_var outputs need training_mode=1");
  Tensor& Y = ctx.output(0, X.shape(), DType::F32);
  cudaStream_t st = stream_of(ctx);
  int64_t total = X.numel();
  if (!training) {
    if (total)
      bn_apply_kernel<<<grid_for(total), kThreads, 0, st>>>(dptr<float>(X), dptr<float>(scale), dptr<float>(B),
                                                            dptr<float>(in_mean), dptr<float>(in_var), eps, dptr<float>(Y), s, relu);
    GR_LAUNCH_CHECK("bn_apply");
    return;
  }
  GR_CHECK(s.n * s.hw > 0, "BatchNormalization in training needs a non-empty batch, got " << shape_str(X.shape()));
  float* run_mean = ctx.has_output(1) ? dptr<float>(ctx.output(1, {s.c}, DType::F32)) : nullptr;
  float* run_var = ctx.has_output(2) ? dptr<float>(ctx.output(2, {s.c}, DType::F32)) : nullptr;
  // The batch mean and (biased) variance: scratch; before opset 14 also outputs 3 and 4 (saved_mean,
  // saved_var), each written when the node has it.
  float* batch_mean = static_cast<float*>(ctx.scratch(2 * s.c * sizeof(float)));
  float* batch_var = batch_mean + s.c;
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(s.c, 65535));
  bn_train_stats_kernel<<<blocks, kThreads, 0, st>>>(dptr<float>(X), s, dptr<float>(in_mean), dptr<float>(in_var), momentum,
                                                     batch_mean, batch_var, run_mean, run_var);
  GR_LAUNCH_CHECK("bn_train_stats");
  bn_apply_kernel<<<grid_for(total), kThreads, 0, st>>>(dptr<float>(X), dptr<float>(scale), dptr<float>(B), batch_mean,
                                                        batch_var, eps, dptr<float>(Y), s, relu);
  GR_LAUNCH_CHECK("bn_apply");
  for (int i : {3, 4})
    if (ctx.opset() < 14 && ctx.has_output(i))
      GR_CUDA_CHECK(cudaMemcpyAsync(ctx.output(i, {s.c}, DType::F32).raw(), i == 3 ? batch_mean : batch_var,
                                    s.c * sizeof(float), cudaMemcpyDeviceToDevice, st));
}

// Gradients of training-mode BatchNormalization, one block per channel:
// dX = scale * invstd * (dY - mean(dY) - xhat * mean(dY * xhat)), dscale = sum(dY * xhat), dB = sum(dY).
// y (FusedBatchNormalizationGrad, pass fuse_relu_bn_add): dY is first masked by ReluGrad's select, y > 0 ? dY : 0.
__device__ inline float grad_at(const float* dy, const float* y, int64_t k) {
  return y ? (y[k] > 0.f ? dy[k] : 0.f) : dy[k];
}

__global__ void bn_grad_kernel(const float* dy, const float* y, const float* x, const float* scale, float eps,
                               ChannelShape s, float* dx, float* dscale, float* dbias) {
  __shared__ float sh[kThreads];
  int64_t m = s.n * s.hw;
  for (int64_t ch = blockIdx.x; ch < s.c; ch += gridDim.x) {
    float mu, var;
    channel_stats(x, s, ch, sh, &mu, &var);
    float invstd = rsqrtf(var + eps);
    float a = 0.f, b = 0.f;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      int64_t k = s.at(ch, j);
      const float g = grad_at(dy, y, k);
      a += g;
      b += g * (x[k] - mu) * invstd;
    }
    float sum_dy = block_sum(a, sh), sum_dy_xhat = block_sum(b, sh);
    if (threadIdx.x == 0) {
      if (dscale) dscale[ch] = sum_dy_xhat;
      if (dbias) dbias[ch] = sum_dy;
    }
    if (dx) {
      float k1 = scale[ch] * invstd, mean_dy = sum_dy / static_cast<float>(m), mean_dyx = sum_dy_xhat / static_cast<float>(m);
      for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
        int64_t k = s.at(ch, j);
        float xhat = (x[k] - mu) * invstd;
        dx[k] = k1 * (grad_at(dy, y, k) - mean_dy - xhat * mean_dyx);
      }
    }
  }
}

// BatchNormalizationGrad(dY, X, scale), or FusedBatchNormalizationGrad(dY, Y, X, scale) (ReluGrad folded in).
void batchnorm_grad_op(KernelContext& ctx) {
  const bool relu = ctx.node().domain == kGraphrunDomain && ctx.node().op_type == "FusedBatchNormalizationGrad";
  if (relu) check_fused_activation(ctx.node());
  const int kx = relu ? 2 : 1;
  const Tensor& dY = ctx.input(0);
  const Tensor& X = ctx.input(kx);
  const Tensor& scale = ctx.input(kx + 1);
  ChannelShape s = channel_shape(X);
  GR_CHECK(dY.shape() == X.shape() && dY.dtype() == DType::F32, "BatchNormalizationGrad: dY must be f32 " << shape_str(X.shape()));
  if (relu)
    GR_CHECK(ctx.input(1).shape() == X.shape() && ctx.input(1).dtype() == DType::F32,
             "FusedBatchNormalizationGrad: Y must be f32 " << shape_str(X.shape()));
  const float* y = relu ? dptr<float>(ctx.input(1)) : nullptr;
  check_channel_param(scale, s.c, "scale");
  float eps = ctx.node().attr_f("epsilon", 1e-5f);
  float* dx = ctx.has_output(0) ? dptr<float>(ctx.output(0, X.shape(), DType::F32)) : nullptr;
  float* dscale = ctx.has_output(1) ? dptr<float>(ctx.output(1, {s.c}, DType::F32)) : nullptr;
  float* dbias = ctx.has_output(2) ? dptr<float>(ctx.output(2, {s.c}, DType::F32)) : nullptr;
  if (s.c == 0) return;
  GR_CHECK(s.n * s.hw > 0, "BatchNormalizationGrad needs a non-empty batch");
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(s.c, 65535));
  bn_grad_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(dptr<float>(dY), y, dptr<float>(X), dptr<float>(scale), eps,
                                                          s, dx, dscale, dbias);
  GR_LAUNCH_CHECK("bn_grad");
}

// ---- LayerNormalization: X as [outer, inner] rows, one block per row; f32 X and statistics ----
struct RowShape {
  int64_t outer = 1, inner = 1;
  Shape stats;
};

RowShape row_shape(const Tensor& X, int64_t axis_attr, const char* what) {
  GR_CHECK(X.rank() >= 1 && X.dtype() == DType::F32, what << " on CUDA takes f32 X of rank >= 1, got "
                                                          << dtype_name(X.dtype()) << shape_str(X.shape()));
  const int64_t axis = normalize_axis(axis_attr, X.rank(), what);
  RowShape s;
  s.stats = X.shape();
  for (int64_t i = 0; i < X.rank(); ++i) {
    (i < axis ? s.outer : s.inner) *= X.dim(static_cast<int>(i));
    if (i >= axis) s.stats[i] = 1;
  }
  return s;
}

void check_row_param(const Tensor& t, const RowShape& s, const char* what) {
  GR_CHECK(t.dtype() == DType::F32 && t.numel() == s.inner,
           what << " must be f32 with " << s.inner << " values, got " << dtype_name(t.dtype()) << shape_str(t.shape()));
}

__global__ void ln_forward_kernel(const float* x, const float* scale, const float* bias, float eps, int64_t outer,
                                  int64_t inner, float* y, float* mean_out, float* invstd_out) {
  __shared__ float sh[kThreads];
  for (int64_t r = blockIdx.x; r < outer; r += gridDim.x) {
    const float* p = x + r * inner;
    float acc = 0.f;
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) acc += p[j];
    const float mu = block_sum(acc, sh) / static_cast<float>(inner);
    acc = 0.f;
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) acc += (p[j] - mu) * (p[j] - mu);
    const float is = rsqrtf(block_sum(acc, sh) / static_cast<float>(inner) + eps);
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = mu;
      if (invstd_out) invstd_out[r] = is;
    }
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x)
      y[r * inner + j] = (p[j] - mu) * is * scale[j] + (bias ? bias[j] : 0.f);
  }
}

void layernorm_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  RowShape s = row_shape(X, ctx.node().attr_i("axis", -1), "LayerNormalization");
  check_row_param(ctx.input(1), s, "LayerNormalization: Scale");
  if (ctx.has_input(2)) check_row_param(ctx.input(2), s, "LayerNormalization: B");
  GR_CHECK(ctx.node().attr_i("stash_type", 1) == 1, "LayerNormalization on CUDA supports stash_type=1 (float) only");
  float eps = ctx.node().attr_f("epsilon", 1e-5f);
  Tensor& Y = ctx.output(0, X.shape(), DType::F32);
  float* mean = ctx.has_output(1) ? dptr<float>(ctx.output(1, s.stats, DType::F32)) : nullptr;
  float* invstd = ctx.has_output(2) ? dptr<float>(ctx.output(2, s.stats, DType::F32)) : nullptr;
  if (s.outer == 0) return;
  GR_CHECK(s.inner > 0, "LayerNormalization: the normalised axes are empty");
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(s.outer, 65535));
  ln_forward_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(
      dptr<float>(X), dptr<float>(ctx.input(1)), ctx.has_input(2) ? dptr<float>(ctx.input(2)) : nullptr, eps, s.outer,
      s.inner, dptr<float>(Y), mean, invstd);
  GR_LAUNCH_CHECK("layernorm_forward");
}

// dX per row (one block each): InvStdDev * (g - mean(g) - xhat * mean(g * xhat)), g = dY * Scale.
__global__ void ln_grad_x_kernel(const float* dy, const float* x, const float* scale, const float* mean,
                                 const float* invstd, int64_t outer, int64_t inner, float* dx) {
  __shared__ float sh[kThreads];
  for (int64_t r = blockIdx.x; r < outer; r += gridDim.x) {
    const float mu = mean[r], is = invstd[r];
    float a = 0.f, b = 0.f;
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) {
      const float g = dy[r * inner + j] * scale[j];
      a += g;
      b += g * (x[r * inner + j] - mu) * is;
    }
    const float mg = block_sum(a, sh) / static_cast<float>(inner), mgx = block_sum(b, sh) / static_cast<float>(inner);
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) {
      const int64_t k = r * inner + j;
      dx[k] = is * (dy[k] * scale[j] - mg - (x[k] - mu) * is * mgx);
    }
  }
}

// dScale and dB per column (one block each), summed over the rows.
__global__ void ln_grad_params_kernel(const float* dy, const float* x, const float* mean, const float* invstd,
                                      int64_t outer, int64_t inner, float* dscale, float* dbias) {
  __shared__ float sh[kThreads];
  for (int64_t j = blockIdx.x; j < inner; j += gridDim.x) {
    float a = 0.f, b = 0.f;
    for (int64_t r = threadIdx.x; r < outer; r += blockDim.x) {
      const float g = dy[r * inner + j];
      a += g * (x[r * inner + j] - mean[r]) * invstd[r];
      b += g;
    }
    a = block_sum(a, sh);
    b = block_sum(b, sh);
    if (threadIdx.x == 0) {
      if (dscale) dscale[j] = a;
      if (dbias) dbias[j] = b;
    }
  }
}

void layernorm_grad_op(KernelContext& ctx) {
  const Tensor &dY = ctx.input(0), &X = ctx.input(1), &scale = ctx.input(2), &mean = ctx.input(3),
               &invstd = ctx.input(4);
  RowShape s = row_shape(X, ctx.node().attr_i("axis", -1), "LayerNormalizationGrad");
  GR_CHECK(dY.shape() == X.shape() && dY.dtype() == DType::F32, "LayerNormalizationGrad: dY must be f32 " << shape_str(X.shape()));
  check_row_param(scale, s, "LayerNormalizationGrad: Scale");
  for (const Tensor* t : {&mean, &invstd})
    GR_CHECK(t->dtype() == DType::F32 && t->numel() == s.outer,
             "LayerNormalizationGrad: Mean and InvStdDev must be f32 " << shape_str(s.stats) << ", got "
                                                                       << dtype_name(t->dtype()) << shape_str(t->shape()));
  float* dx = ctx.has_output(0) ? dptr<float>(ctx.output(0, X.shape(), DType::F32)) : nullptr;
  float* dscale = ctx.has_output(1) ? dptr<float>(ctx.output(1, scale.shape(), DType::F32)) : nullptr;
  float* dbias = ctx.has_output(2) ? dptr<float>(ctx.output(2, scale.shape(), DType::F32)) : nullptr;
  cudaStream_t st = stream_of(ctx);
  if (dx && s.outer > 0 && s.inner > 0) {
    ln_grad_x_kernel<<<static_cast<unsigned>(std::min<int64_t>(s.outer, 65535)), kThreads, 0, st>>>(
        dptr<float>(dY), dptr<float>(X), dptr<float>(scale), dptr<float>(mean), dptr<float>(invstd), s.outer, s.inner, dx);
    GR_LAUNCH_CHECK("layernorm_grad_x");
  }
  if ((dscale || dbias) && s.inner > 0) {
    ln_grad_params_kernel<<<static_cast<unsigned>(std::min<int64_t>(s.inner, 65535)), kThreads, 0, st>>>(
        dptr<float>(dY), dptr<float>(X), dptr<float>(mean), dptr<float>(invstd), s.outer, s.inner, dscale, dbias);
    GR_LAUNCH_CHECK("layernorm_grad_params");
  }
}

// ---- Dropout: a counter-based hash of (seed, element) draws the mask; seed from the executor's RNG ----
__device__ inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void dropout_kernel(const float* x, float* y, uint8_t* mask, int64_t n, const float* ratio_p,
                               float ratio_attr, const uint8_t* training_p, bool training_attr, uint64_t seed) {
  float ratio = ratio_p ? *ratio_p : ratio_attr;
  bool training = training_p ? *training_p != 0 : training_attr;
  float scale = ratio < 1.f ? 1.f / (1.f - ratio) : 0.f;
  // A ratio outside [0, 1] (the CPU kernel's error) cannot raise here: it poisons Y visibly instead.
  bool bad_ratio = training && !(ratio >= 0.f && ratio <= 1.f);
  GR_GRID_STRIDE(i, n) {
    if (bad_ratio) {
      y[i] = NAN;
      if (mask) mask[i] = 0;
      continue;
    }
    bool keep = true;
    if (training && ratio > 0.f) {
      float u = static_cast<float>(splitmix64(seed ^ (static_cast<uint64_t>(i) * 0xd1b54a32d192ed03ULL)) >> 40) * (1.f / 16777216.f);
      keep = u >= ratio;
    }
    y[i] = keep ? (training ? x[i] * scale : x[i]) : 0.f;
    if (mask) mask[i] = keep;
  }
}

void dropout_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.dtype() == DType::F32, "Dropout on CUDA takes f32, got " << dtype_name(X.dtype()));
  const float* ratio_p = nullptr;
  const uint8_t* training_p = nullptr;
  float ratio_attr = 0.5f;
  bool training_attr = false;  // before opset 12 Dropout has no training input: inference, the identity
  if (ctx.opset() >= 12) {
    if (ctx.has_input(1)) {
      GR_CHECK(ctx.input(1).dtype() == DType::F32 && ctx.input(1).numel() == 1, "Dropout: ratio must be a f32 scalar");
      ratio_p = dptr<float>(ctx.input(1));
    }
    if (ctx.has_input(2)) {
      GR_CHECK(ctx.input(2).dtype() == DType::Bool && ctx.input(2).numel() == 1, "Dropout: training_mode must be a bool scalar");
      training_p = dptr<uint8_t>(ctx.input(2));
    }
  } else {
    ratio_attr = ctx.node().attr_f("ratio", 0.5f);
  }
  GR_CHECK(ctx.opset() >= 10 || !ctx.has_output(1), "Dropout on CUDA: the float mask of opsets before 10 is not supported");
  if (ctx.opset() < 12)
    GR_CHECK(ratio_attr >= 0.f && ratio_attr <= 1.f, "Dropout: ratio must be in [0, 1], got " << ratio_attr);
  Tensor& Y = ctx.output(0, X.shape(), DType::F32);
  uint8_t* mask = ctx.has_output(1) ? dptr<uint8_t>(ctx.output(1, X.shape(), DType::Bool)) : nullptr;
  uint64_t seed = ctx.rng()();
  int64_t n = X.numel();
  if (n == 0) return;
  dropout_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), mask, n, ratio_p, ratio_attr,
                                                               training_p, training_attr, seed);
  GR_LAUNCH_CHECK("dropout");
}

// ---- InstanceNormalization: X [N, C, D...] as N*C rows of S positions, one block per row; f32 ----
struct InstanceShape {
  int64_t rows = 0, c = 0, s = 1;
};

InstanceShape instance_shape(const Tensor& X, const Tensor& scale, const char* what) {
  GR_CHECK(X.rank() >= 3 && X.dtype() == DType::F32,
           what << " on CUDA takes f32 [N, C, D1, ...] (rank >= 3), got " << dtype_name(X.dtype()) << shape_str(X.shape()));
  InstanceShape s;
  s.c = X.dim(1);
  s.rows = X.dim(0) * s.c;
  for (int i = 2; i < X.rank(); ++i) s.s *= X.dim(i);
  GR_CHECK(scale.dtype() == DType::F32 && scale.shape() == Shape{s.c},
           what << ": scale must be f32[" << s.c << "], got " << dtype_name(scale.dtype()) << shape_str(scale.shape()));
  return s;
}

// Mean and 1/sqrt(biased variance + eps) of one row of n values, two passes (stable), on every thread.
__device__ void row_mean_invstd(const float* p, int64_t n, float eps, float* sh, float* mean, float* invstd) {
  float acc = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += p[j];
  const float mu = n ? block_sum(acc, sh) / static_cast<float>(n) : 0.f;
  acc = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += (p[j] - mu) * (p[j] - mu);
  const float var = n ? block_sum(acc, sh) / static_cast<float>(n) : 0.f;
  *mean = mu;
  *invstd = rsqrtf(var + eps);
}

__global__ void in_forward_kernel(const float* x, const float* scale, const float* bias, float eps, InstanceShape s, float* y) {
  __shared__ float sh[kThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const float* p = x + r * s.s;
    float mu, is;
    row_mean_invstd(p, s.s, eps, sh, &mu, &is);
    const float a = is * scale[r % s.c], b = bias[r % s.c];
    for (int64_t j = threadIdx.x; j < s.s; j += blockDim.x) y[r * s.s + j] = (p[j] - mu) * a + b;
  }
}

void instance_norm_op(KernelContext& ctx) {
  const char* what = "InstanceNormalization";
  const Tensor &X = ctx.input(0), &scale = ctx.input(1), &B = ctx.input(2);
  const InstanceShape s = instance_shape(X, scale, what);
  GR_CHECK(B.dtype() == DType::F32 && B.shape() == Shape{s.c},
           what << ": B must be f32[" << s.c << "], got " << dtype_name(B.dtype()) << shape_str(B.shape()));
  const float eps = ctx.node().attr_f("epsilon", 1e-5f);
  Tensor& Y = ctx.output(0, X.shape(), DType::F32);
  if (s.rows == 0 || s.s == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(s.rows, 65535));
  in_forward_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(scale), dptr<float>(B), eps, s,
                                                            dptr<float>(Y));
  GR_LAUNCH_CHECK("instance_norm_forward");
}

// Per row (one block each), with xhat = (X - mean) * invstd: dX = invstd * scale[c] * (dY - mean(dY) -
// xhat * mean(dY * xhat)); the row's sum(dY * xhat) and sum(dY) go to row_dscale / row_db.
__global__ void in_grad_rows_kernel(const float* dy, const float* x, const float* scale, float eps, InstanceShape s,
                                    float* dx, float* row_dscale, float* row_db) {
  __shared__ float sh[kThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const float *p = x + r * s.s, *g = dy + r * s.s;
    float mu, is;
    row_mean_invstd(p, s.s, eps, sh, &mu, &is);
    float a = 0.f, b = 0.f;
    for (int64_t j = threadIdx.x; j < s.s; j += blockDim.x) {
      a += g[j];
      b += g[j] * (p[j] - mu) * is;
    }
    const float sum_g = block_sum(a, sh), sum_gx = block_sum(b, sh);
    if (threadIdx.x == 0) {
      row_db[r] = sum_g;
      row_dscale[r] = sum_gx;
    }
    if (!dx) continue;
    const float k = is * scale[r % s.c], mg = sum_g / static_cast<float>(s.s), mgx = sum_gx / static_cast<float>(s.s);
    for (int64_t j = threadIdx.x; j < s.s; j += blockDim.x) dx[r * s.s + j] = k * (g[j] - mg - (p[j] - mu) * is * mgx);
  }
}

// dscale[c] and dB[c]: the rows of channel c (n = 0, 1, ...) summed in order by one thread.
__global__ void in_grad_params_kernel(const float* row_dscale, const float* row_db, InstanceShape s, float* dscale, float* db) {
  GR_GRID_STRIDE(c, s.c) {
    float a = 0.f, b = 0.f;
    for (int64_t r = c; r < s.rows; r += s.c) {
      a += row_dscale[r];
      b += row_db[r];
    }
    if (dscale) dscale[c] = a;
    if (db) db[c] = b;
  }
}

void instance_norm_grad_op(KernelContext& ctx) {
  const char* what = "InstanceNormalizationGrad";
  const Tensor &dY = ctx.input(0), &X = ctx.input(1), &scale = ctx.input(2);
  const InstanceShape s = instance_shape(X, scale, what);
  GR_CHECK(dY.shape() == X.shape() && dY.dtype() == DType::F32,
           what << ": dY " << dtype_name(dY.dtype()) << shape_str(dY.shape()) << " must be f32 like X " << shape_str(X.shape()));
  const float eps = ctx.node().attr_f("epsilon", 1e-5f);
  float* dx = ctx.has_output(0) ? dptr<float>(ctx.output(0, X.shape(), DType::F32)) : nullptr;
  float* dscale = ctx.has_output(1) ? dptr<float>(ctx.output(1, scale.shape(), DType::F32)) : nullptr;
  float* db = ctx.has_output(2) ? dptr<float>(ctx.output(2, scale.shape(), DType::F32)) : nullptr;
  cudaStream_t st = stream_of(ctx);
  if (s.rows == 0) return;
  if (s.s == 0) {  // empty rows: every gradient is zero
    for (float* p : {dscale, db})
      if (p) GR_CUDA_CHECK(cudaMemsetAsync(p, 0, s.c * sizeof(float), st));
    return;
  }
  float* row_dscale = static_cast<float*>(ctx.scratch(2 * s.rows * sizeof(float)));
  float* row_db = row_dscale + s.rows;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(s.rows, 65535));
  in_grad_rows_kernel<<<blocks, kThreads, 0, st>>>(dptr<float>(dY), dptr<float>(X), dptr<float>(scale), eps, s, dx,
                                                    row_dscale, row_db);
  GR_LAUNCH_CHECK("instance_norm_grad_rows");
  if (!dscale && !db) return;
  in_grad_params_kernel<<<grid_for(s.c), kThreads, 0, st>>>(row_dscale, row_db, s, dscale, db);
  GR_LAUNCH_CHECK("instance_norm_grad_params");
}

}  // namespace

GR_REGISTER_OPS(norm) {
  ops.op("BatchNormalization").cuda(locked<batchnorm_op>);
  ops.op(kGraphrunDomain, "FusedBatchNormalization").cuda(locked<batchnorm_op>);
  ops.op(kGraphrunDomain, "BatchNormalizationGrad").cuda(locked<batchnorm_grad_op>);
  ops.op(kGraphrunDomain, "FusedBatchNormalizationGrad").cuda(locked<batchnorm_grad_op>);
  ops.op("Dropout").cuda(locked<dropout_op>);
  ops.op("LayerNormalization").cuda(locked<layernorm_op>);
  ops.op(kGraphrunDomain, "LayerNormalizationGrad").cuda(locked<layernorm_grad_op>);
  ops.op("InstanceNormalization").cuda(locked<instance_norm_op>);
  ops.op(kGraphrunDomain, "InstanceNormalizationGrad").cuda(locked<instance_norm_grad_op>);
}

}  // namespace graphrun::runtime::cuda
