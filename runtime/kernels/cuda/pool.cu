// CUDA kernels: pool family (the CPU's pool.cc op set): MaxPool (+Indices), AveragePool, GlobalAveragePool,
// and ai.graphrun MaxPoolGrad / AveragePoolGrad (docs/ops.md). Own kernels, 2-D (X of rank 4).
#include <cfloat>

#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime::cuda {
namespace {

struct PoolGeom {
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;  // pads: top, left, bottom, right
  int64_t oh, ow;
  bool count_include_pad;
};

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1, bool ceil_mode) {
  int64_t eff = (k - 1) * d + 1;
  int64_t span = in + p0 + p1 - eff;
  GR_CHECK(span >= 0, "pool window " << eff << " exceeds the padded input " << in + p0 + p1);
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // A last window that would start in the end padding is dropped (as PyTorch and the ONNX reference do).
  if (ceil_mode && (out - 1) * s >= in + p0) --out;
  return out;
}

PoolGeom pool_geom(const Node& node, const Tensor& X, bool dilations_allowed) {
  GR_CHECK(X.rank() == 4, node.op_type << " on CUDA supports 2-D pooling (X of rank 4), got " << shape_str(X.shape()));
  GR_CHECK(X.dtype() == DType::F32, node.op_type << " on CUDA takes f32");
  PoolGeom g;
  g.n = X.dim(0); g.c = X.dim(1); g.h = X.dim(2); g.w = X.dim(3);
  std::vector<int64_t> k = node.attr_ints("kernel_shape");
  GR_CHECK(k.size() == 2, node.op_type << ": kernel_shape must have 2 entries");
  std::vector<int64_t> s = node.attr_ints("strides", {1, 1}), d = node.attr_ints("dilations", {1, 1});
  std::vector<int64_t> p = node.attr_ints("pads", {0, 0, 0, 0});
  GR_CHECK(s.size() == 2 && d.size() == 2 && p.size() == 4, node.op_type << ": strides, dilations or pads of the wrong length");
  // Checked here: a zero stride would divide by zero in pool_out (a crash, not an error).
  for (int64_t v : k) GR_CHECK(v >= 1, node.op_type << ": kernel_shape must be >= 1, got " << shape_str(k));
  for (int64_t v : s) GR_CHECK(v >= 1, node.op_type << ": strides must be >= 1, got " << shape_str(s));
  for (int64_t v : d) GR_CHECK(v >= 1, node.op_type << ": dilations must be >= 1, got " << shape_str(d));
  for (int64_t v : p) GR_CHECK(v >= 0, node.op_type << ": pads must be >= 0, got " << shape_str(p));
  GR_CHECK(dilations_allowed || (d[0] == 1 && d[1] == 1), node.op_type << " on CUDA supports dilations 1 only");
  GR_CHECK(node.attr_i("storage_order", 0) == 0, node.op_type << " on CUDA supports storage_order 0 only");
  bool ceil_mode = node.attr_i("ceil_mode", 0) != 0;
  g.kh = k[0]; g.kw = k[1]; g.sh = s[0]; g.sw = s[1]; g.dh = d[0]; g.dw = d[1];
  std::string ap = node.attr_s("auto_pad", "NOTSET");
  if (ap == "VALID") {
    p = {0, 0, 0, 0};
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    int64_t in[2] = {g.h, g.w};
    for (int i = 0; i < 2; ++i) {
      int64_t out = (in[i] + s[i] - 1) / s[i];
      int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i]);
      int64_t small = total / 2, big = total - small;
      p[i] = ap == "SAME_UPPER" ? small : big;
      p[i + 2] = ap == "SAME_UPPER" ? big : small;
    }
  } else {
    GR_CHECK(ap == "NOTSET", node.op_type << ": unknown auto_pad '" << ap << "'");
  }
  g.pt = p[0]; g.pl = p[1]; g.pb = p[2]; g.pr = p[3];
  g.oh = pool_out(g.h, g.kh, g.sh, g.dh, g.pt, g.pb, ceil_mode);
  g.ow = pool_out(g.w, g.kw, g.sw, g.dw, g.pl, g.pr, ceil_mode);
  g.count_include_pad = node.attr_i("count_include_pad", 0) != 0;
  return g;
}

// The flat index of output o's maximum in x (-1 for a window wholly in the padding), and its value.
__device__ int64_t window_argmax(const float* x, const PoolGeom& g, int64_t o, float* value) {
  int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, nc = o / (g.ow * g.oh);
  int64_t h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
  float best = -INFINITY;
  int64_t arg = -1;
  for (int64_t i = 0; i < g.kh; ++i) {
    int64_t h = h0 + i * g.dh;
    if (h < 0 || h >= g.h) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      int64_t w = w0 + j * g.dw;
      if (w < 0 || w >= g.w) continue;
      int64_t flat = (nc * g.h + h) * g.w + w;
      float v = x[flat];
      if (arg < 0 || v > best || v != v) {  // first maximum wins; NaN propagates
        best = v;
        arg = flat;
        if (v != v) break;
      }
    }
  }
  *value = best;
  return arg;
}

__global__ void maxpool_kernel(const float* x, float* y, int64_t* idx, PoolGeom g) {
  GR_GRID_STRIDE(o, g.n * g.c * g.oh * g.ow) {
    float best;
    const int64_t arg = window_argmax(x, g, o, &best);
    y[o] = best;
    if (idx) idx[o] = arg;
  }
}

// MaxPoolGrad without Indices (pass recompute_maxpool_argmax: windows that do not overlap): each
// window's argmax found again in X, by the forward's own window_argmax, and 0 + dY stored there (the
// scatter's sum bit for bit, -0 included) over a zeroed dX.
__global__ void maxpool_grad_recompute_kernel(const float* dy, const float* x, float* dx, PoolGeom g) {
  GR_GRID_STRIDE(o, g.n * g.c * g.oh * g.ow) {
    float best;
    const int64_t arg = window_argmax(x, g, o, &best);
    if (arg >= 0) dx[arg] = 0.f + dy[o];
  }
}

void maxpool_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  PoolGeom g = pool_geom(ctx.node(), X, true);
  Shape out{g.n, g.c, g.oh, g.ow};
  Tensor& Y = ctx.output(0, out, DType::F32);
  int64_t* idx = ctx.has_output(1) ? dptr<int64_t>(ctx.output(1, out, DType::I64)) : nullptr;
  int64_t n = Y.numel();
  if (n == 0) return;
  maxpool_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), idx, g);
  GR_LAUNCH_CHECK("maxpool");
}

// The relu attribute of the pooling gradients (pass fuse_pool_relu_grad): X is a Relu's output and dX
// continues through its gradient.
bool relu_attr(const Node& n) {
  const int64_t r = n.attr_i("relu", 0);
  GR_CHECK(r == 0 || r == 1, "attribute 'relu' must be 0 or 1, got " << r);
  return r == 1;
}

__global__ void relu_mask_kernel(float* dx, const float* x, int64_t n) {
  GR_GRID_STRIDE(i, n) dx[i] = x[i] > 0.f ? dx[i] : 0.f;
}

__global__ void scatter_add_kernel(const float* dy, const int64_t* idx, float* dx, int64_t n, int64_t nx) {
  GR_GRID_STRIDE(i, n) {
    int64_t k = idx[i];
    if (k >= 0 && k < nx) atomicAdd(dx + k, dy[i]);
  }
}

// Deterministic form: one thread per (n, c) plane adds that plane's dY into dX in output order (a
// window's argmax lies in its own plane), so overlapping windows sum in a fixed order.
__global__ void scatter_add_planes_kernel(const float* dy, const int64_t* idx, float* dx, int64_t planes,
                                          int64_t per_plane, int64_t nx) {
  GR_GRID_STRIDE(p, planes) {
    for (int64_t j = p * per_plane; j < (p + 1) * per_plane; ++j) {
      int64_t k = idx[j];
      if (k >= 0 && k < nx) dx[k] += dy[j];
    }
  }
}

// dX = 0, then each dY adds into its argmax. Overlapping windows that share a maximum add through
// atomics, so the order of those (rare) sums may vary from run to run; with --deterministic the
// per-plane form keeps it fixed (bitwise repeatable, as the flag promises).
void maxpool_grad_op(KernelContext& ctx) {
  const Tensor& dY = ctx.input(0);
  const Tensor& X = ctx.input(2);
  if (!ctx.has_input(1)) {
    GR_CHECK(dY.dtype() == DType::F32 && X.dtype() == DType::F32, "MaxPoolGrad on CUDA takes f32");
    PoolGeom g = pool_geom(ctx.node(), X, true);
    GR_CHECK(g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.pt == 0 && g.pl == 0 && g.pb == 0 && g.pr == 0 &&
                 2 * g.oh <= g.h && 2 * g.ow <= g.w,
             "MaxPoolGrad without Indices takes 2x2 windows of stride 2 without pads (the attributes of its MaxPool)");
    GR_CHECK(dY.shape() == (Shape{g.n, g.c, g.oh, g.ow}), "MaxPoolGrad: dY " << shape_str(dY.shape())
                                                                             << " does not match MaxPool's output");
    Tensor& dX = ctx.output(0, X.shape(), DType::F32);
    cudaStream_t s = stream_of(ctx);
    if (dX.nbytes()) GR_CUDA_CHECK(cudaMemsetAsync(dX.raw(), 0, dX.nbytes(), s));
    const int64_t n = dY.numel();
    if (n == 0) return;
    maxpool_grad_recompute_kernel<<<grid_for(n), kThreads, 0, s>>>(dptr<float>(dY), dptr<float>(X), dptr<float>(dX), g);
    GR_LAUNCH_CHECK("maxpool_grad recompute");
    if (relu_attr(ctx.node())) {
      relu_mask_kernel<<<grid_for(dX.numel()), kThreads, 0, s>>>(dptr<float>(dX), dptr<float>(X), dX.numel());
      GR_LAUNCH_CHECK("maxpool_grad relu");
    }
    return;
  }
  const Tensor& I = ctx.input(1);
  GR_CHECK(I.dtype() == DType::I64 && I.shape() == dY.shape(), "MaxPoolGrad: Indices must be i64 of dY's shape "
                                                                   << shape_str(dY.shape()));
  GR_CHECK(dY.dtype() == DType::F32, "MaxPoolGrad on CUDA takes f32");
  GR_CHECK(X.dtype() == DType::F32, "MaxPoolGrad on CUDA takes f32");
  Tensor& dX = ctx.output(0, X.shape(), DType::F32);
  cudaStream_t s = stream_of(ctx);
  if (dX.nbytes()) GR_CUDA_CHECK(cudaMemsetAsync(dX.raw(), 0, dX.nbytes(), s));
  int64_t n = dY.numel();
  if (n == 0) return;
  const int64_t planes = X.rank() >= 2 ? X.dim(0) * X.dim(1) : 0;
  if (deterministic() && planes > 0 && dY.rank() >= 2 && dY.dim(0) * dY.dim(1) == planes) {
    scatter_add_planes_kernel<<<grid_for(planes), kThreads, 0, s>>>(dptr<float>(dY), dptr<int64_t>(I), dptr<float>(dX),
                                                                   planes, n / planes, dX.numel());
  } else {
    scatter_add_kernel<<<grid_for(n), kThreads, 0, s>>>(dptr<float>(dY), dptr<int64_t>(I), dptr<float>(dX), n, dX.numel());
  }
  GR_LAUNCH_CHECK("maxpool_grad");
  if (relu_attr(ctx.node())) {  // then the Relu's gradient, in place: dX where X > 0 (as ReluGrad selects)
    relu_mask_kernel<<<grid_for(dX.numel()), kThreads, 0, s>>>(dptr<float>(dX), dptr<float>(X), dX.numel());
    GR_LAUNCH_CHECK("maxpool_grad relu");
  }
}

// The number of elements an average divides by: the window clipped to the padded input
// (count_include_pad) or to the input itself.
__device__ float avg_divisor(const PoolGeom& g, int64_t h0, int64_t w0) {
  int64_t h1 = h0 + g.kh, w1 = w0 + g.kw;
  if (g.count_include_pad) {
    int64_t hs = max(h0, -g.pt), he = min(h1, g.h + g.pb), ws = max(w0, -g.pl), we = min(w1, g.w + g.pr);
    return static_cast<float>((he - hs) * (we - ws));
  }
  int64_t hs = max(h0, int64_t(0)), he = min(h1, g.h), ws = max(w0, int64_t(0)), we = min(w1, g.w);
  return static_cast<float>(max(he - hs, int64_t(0)) * max(we - ws, int64_t(0)));
}

__global__ void avgpool_kernel(const float* x, float* y, PoolGeom g) {
  GR_GRID_STRIDE(o, g.n * g.c * g.oh * g.ow) {
    int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, nc = o / (g.ow * g.oh);
    int64_t h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
    float acc = 0.f;
    for (int64_t h = max(h0, int64_t(0)); h < min(h0 + g.kh, g.h); ++h)
      for (int64_t w = max(w0, int64_t(0)); w < min(w0 + g.kw, g.w); ++w) acc += x[(nc * g.h + h) * g.w + w];
    y[o] = acc / avg_divisor(g, h0, w0);
  }
}

void avgpool_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  PoolGeom g = pool_geom(ctx.node(), X, false);
  Tensor& Y = ctx.output(0, {g.n, g.c, g.oh, g.ow}, DType::F32);
  int64_t n = Y.numel();
  if (n == 0) return;
  avgpool_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), g);
  GR_LAUNCH_CHECK("avgpool");
}

// Gather form (one thread per input element, no atomics): deterministic.
__global__ void avgpool_grad_kernel(const float* dy, float* dx, PoolGeom g, const float* relu_x) {
  GR_GRID_STRIDE(i, g.n * g.c * g.h * g.w) {
    int64_t w = i % g.w, h = (i / g.w) % g.h, nc = i / (g.w * g.h);
    // Windows [oh*sh - pt, oh*sh - pt + kh) that contain h.
    int64_t lo_h = h + g.pt - g.kh + 1, hi_h = h + g.pt;
    int64_t oh0 = lo_h <= 0 ? 0 : (lo_h + g.sh - 1) / g.sh, oh1 = min(hi_h / g.sh, g.oh - 1);
    int64_t lo_w = w + g.pl - g.kw + 1, hi_w = w + g.pl;
    int64_t ow0 = lo_w <= 0 ? 0 : (lo_w + g.sw - 1) / g.sw, ow1 = min(hi_w / g.sw, g.ow - 1);
    float acc = 0.f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow)
        acc += dy[(nc * g.oh + oh) * g.ow + ow] / avg_divisor(g, oh * g.sh - g.pt, ow * g.sw - g.pl);
    dx[i] = relu_x && !(relu_x[i] > 0.f) ? 0.f : acc;  // relu = 1: and the Relu's gradient
  }
}

void avgpool_grad_op(KernelContext& ctx) {
  const Tensor& dY = ctx.input(0);
  const Tensor& X = ctx.input(1);
  PoolGeom g = pool_geom(ctx.node(), X, false);
  Shape yshape{g.n, g.c, g.oh, g.ow};
  GR_CHECK(dY.shape() == yshape, "AveragePoolGrad: dY is " << shape_str(dY.shape()) << ", the pooling gives " << shape_str(yshape));
  Tensor& dX = ctx.output(0, X.shape(), DType::F32);
  int64_t n = dX.numel();
  if (n == 0) return;
  const float* relu_x = relu_attr(ctx.node()) ? dptr<float>(X) : nullptr;
  avgpool_grad_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(dY), dptr<float>(dX), g, relu_x);
  GR_LAUNCH_CHECK("avgpool_grad");
}

__global__ void global_avg_kernel(const float* x, float* y, int64_t nc, int64_t hw) {
  GR_GRID_STRIDE(o, nc) {
    const float* p = x + o * hw;
    float acc = 0.f;
    for (int64_t k = 0; k < hw; ++k) acc += p[k];
    y[o] = acc / static_cast<float>(hw);
  }
}

void global_avgpool_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.rank() >= 3 && X.dtype() == DType::F32, "GlobalAveragePool on CUDA takes f32 [N, C, ...], got "
                                                         << dtype_name(X.dtype()) << shape_str(X.shape()));
  Shape out{X.dim(0), X.dim(1)};
  int64_t hw = 1;
  for (int d = 2; d < X.rank(); ++d) {
    out.push_back(1);
    hw *= X.dim(d);
  }
  Tensor& Y = ctx.output(0, out, DType::F32);
  int64_t nc = X.dim(0) * X.dim(1);
  if (nc == 0) return;
  global_avg_kernel<<<grid_for(nc), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), nc, hw);
  GR_LAUNCH_CHECK("global_avgpool");
}

// GlobalMaxPool: the largest value of each plane, by the CPU's rule (a NaN, once met, stays).
template <class T>
__global__ void global_max_kernel(const T* x, T* y, int64_t nc, int64_t hw) {
  GR_GRID_STRIDE(o, nc) {
    const T* p = x + o * hw;
    T acc = -INFINITY;
    for (int64_t k = 0; k < hw; ++k) acc = (p[k] > acc || isnan(p[k])) ? p[k] : acc;
    y[o] = acc;
  }
}

void global_maxpool_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.rank() >= 3 && (X.dtype() == DType::F32 || X.dtype() == DType::F64),
           "GlobalMaxPool on CUDA takes f32 or f64 [N, C, ...], got " << dtype_name(X.dtype()) << shape_str(X.shape()));
  Shape out{X.dim(0), X.dim(1)};
  int64_t hw = 1;
  for (int d = 2; d < X.rank(); ++d) {
    out.push_back(1);
    hw *= X.dim(d);
  }
  const int64_t nc = X.dim(0) * X.dim(1);
  GR_CHECK(hw > 0 || nc == 0, "X " << shape_str(X.shape()) << " has empty spatial axes");
  Tensor& Y = ctx.output(0, out, X.dtype());
  if (nc == 0) return;
  if (X.dtype() == DType::F32)
    global_max_kernel<float><<<grid_for(nc), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), nc, hw);
  else
    global_max_kernel<double><<<grid_for(nc), kThreads, 0, stream_of(ctx)>>>(dptr<double>(X), dptr<double>(Y), nc, hw);
  GR_LAUNCH_CHECK("global_maxpool");
}

}  // namespace

GR_REGISTER_OPS(pool) {
  ops.op("MaxPool").cuda(locked<maxpool_op>);
  ops.op("AveragePool").cuda(locked<avgpool_op>);
  ops.op("GlobalAveragePool").cuda(locked<global_avgpool_op>);
  ops.op("GlobalMaxPool").cuda(locked<global_maxpool_op>);
  ops.op(kGraphrunDomain, "MaxPoolGrad").cuda(locked<maxpool_grad_op>);
  ops.op(kGraphrunDomain, "AveragePoolGrad").cuda(locked<avgpool_grad_op>);
}

}  // namespace graphrun::runtime::cuda
