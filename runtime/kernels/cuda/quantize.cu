// CUDA kernels: quantize family (the CPU's quantize.cc op set, and ConvInteger and QLinearConv, whose CPU kernels
// are conv.cc's): QuantizeLinear, DequantizeLinear, MatMulInteger, QLinearMatMul and ai.graphrun FakeQuantize, with the CPU's arithmetic (runtime/kernels/quantize_math.h). Scales and zero points are
// read on the device; MatMulInteger and QLinearMatMul take a thread per output element (for the small
// quantized layers of inference, not for speed).
#include "runtime/kernels/cpu/window.h"
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/quantize_math.h"

namespace graphrun::runtime::cuda {
namespace {

// A zero point's value at channel c: per tensor (one element) or per channel; 0 without one.
template <class Z>
__device__ double zp_at(const Z* zp, int64_t count, int64_t c) {
  return zp ? static_cast<double>(zp[count == 1 ? 0 : c]) : 0.0;
}

template <class X, class S, class Q>
__global__ void quantize_kernel(const X* x, const S* s, const Q* zp, Q* y, int64_t n, int64_t c, int64_t inner,
                                QuantRange r) {
  GR_GRID_STRIDE(i, n) {
    const int64_t ch = quant_channel(i, c, inner);
    // The division in the scale's precision, as the CPU (and the spec's reference) divides.
    const double scaled = static_cast<double>(static_cast<S>(x[i]) / s[ch]);
    y[i] = quantize_value<Q>(scaled, zp_at(zp, c, ch), r);
  }
}

void quantize_linear_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const QuantLayout l = quant_inputs(ctx, QuantOp::Quantize);
  const QuantRange r = quant_range(l.q, "QuantizeLinear");
  Tensor& Y = ctx.output(0, X.shape(), l.q);
  const int64_t n = X.numel();
  if (n == 0) return;
  auto go = [&](auto xtag, auto stag, auto qtag) {
    using XT = decltype(xtag);
    using S = decltype(stag);
    using Q = decltype(qtag);
    quantize_kernel<XT, S, Q><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        dptr<XT>(X), dptr<S>(scale), zp ? dptr<Q>(*zp) : nullptr, dptr<Q>(Y), n, l.c, l.inner, r);
  };
  auto with_q = [&](auto xtag, auto stag) {
    if (l.q == DType::U8) go(xtag, stag, uint8_t{});
    else go(xtag, stag, int8_t{});
  };
  auto with_s = [&](auto xtag) {
    if (scale.dtype() == DType::F32) with_q(xtag, float{});
    else with_q(xtag, double{});
  };
  if (X.dtype() == DType::F32) with_s(float{});
  else if (X.dtype() == DType::F64) with_s(double{});
  else with_s(int32_t{});
  GR_LAUNCH_CHECK("quantize_linear");
}

template <class Q, class T>
__global__ void dequantize_kernel(const Q* x, const T* s, const Q* zp, T* y, int64_t n, int64_t c, int64_t inner) {
  GR_GRID_STRIDE(i, n) {
    const int64_t ch = quant_channel(i, c, inner);
    y[i] = (static_cast<T>(x[i]) - static_cast<T>(zp_at(zp, c, ch))) * s[ch];
  }
}

void dequantize_linear_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const QuantLayout l = quant_inputs(ctx, QuantOp::Dequantize);
  Tensor& Y = ctx.output(0, X.shape(), scale.dtype());
  const int64_t n = X.numel();
  if (n == 0) return;
  auto go = [&](auto qtag, auto ttag) {
    using Q = decltype(qtag);
    using T = decltype(ttag);
    dequantize_kernel<Q, T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<Q>(X), dptr<T>(scale),
                                                                          zp ? dptr<Q>(*zp) : nullptr, dptr<T>(Y), n, l.c, l.inner);
  };
  auto with_t = [&](auto qtag) {
    if (scale.dtype() == DType::F32) go(qtag, float{});
    else go(qtag, double{});
  };
  if (X.dtype() == DType::U8) with_t(uint8_t{});
  else if (X.dtype() == DType::I8) with_t(int8_t{});
  else with_t(int32_t{});
  GR_LAUNCH_CHECK("dequantize_linear");
}

// ai.graphrun FakeQuantize: DequantizeLinear(QuantizeLinear(X)) in one pass, rounding X * (1 / scale) as the
// CPU (and PyTorch's fake_quantize) does.
template <class T, class Q>
__global__ void fake_quantize_kernel(const T* x, const T* s, const Q* zp, T* y, int64_t n, int64_t c, int64_t inner,
                                     QuantRange r) {
  GR_GRID_STRIDE(i, n) {
    const int64_t ch = quant_channel(i, c, inner);
    const double z = zp_at(zp, c, ch);
    const Q q = quantize_value<Q>(static_cast<double>(x[i] * (T(1) / s[ch])), z, r);  // PyTorch's x * inv_scale
    y[i] = (static_cast<T>(q) - static_cast<T>(z)) * s[ch];
  }
}

void fake_quantize_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const QuantLayout l = quant_inputs(ctx, QuantOp::Fake);
  const QuantRange r = fake_quant_range(ctx.node(), l.q);
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  const int64_t n = X.numel();
  if (n == 0) return;
  auto go = [&](auto ttag, auto qtag) {
    using T = decltype(ttag);
    using Q = decltype(qtag);
    fake_quantize_kernel<T, Q><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<T>(scale),
                                                                             zp ? dptr<Q>(*zp) : nullptr, dptr<T>(Y), n,
                                                                             l.c, l.inner, r);
  };
  auto with_q = [&](auto ttag) {
    if (l.q == DType::U8) go(ttag, uint8_t{});
    else go(ttag, int8_t{});
  };
  if (X.dtype() == DType::F32) with_q(float{});
  else with_q(double{});
  GR_LAUNCH_CHECK("fake_quantize");
}

// ---- MatMulInteger, QLinearMatMul ----

// What a thread needs of the plan: sizes, the zero points' element counts, and per output matrix the offsets
// of its A and B matrices (in scratch memory).
struct IntMM {
  int64_t m, k, n, mats;
  int64_t azp_count, bzp_count;
  const int64_t* offsets;  // [mats, 2]
};

template <class A, class B>
__device__ int32_t int_product(const A* a, const B* b, const A* azp, const B* bzp, IntMM p, int64_t e) {
  const int64_t t = e / (p.m * p.n), i = e / p.n % p.m, j = e % p.n;
  const A* ar = a + p.offsets[2 * t] + i * p.k;
  const B* bc = b + p.offsets[2 * t + 1] + j;
  const int32_t za = azp ? static_cast<int32_t>(azp[p.azp_count == 1 ? 0 : i]) : 0;
  const int32_t zb = bzp ? static_cast<int32_t>(bzp[p.bzp_count == 1 ? 0 : j]) : 0;
  int32_t acc = 0;
  for (int64_t q = 0; q < p.k; ++q) acc += (static_cast<int32_t>(ar[q]) - za) * (static_cast<int32_t>(bc[q * p.n]) - zb);
  return acc;
}

template <class A, class B>
__global__ void matmul_integer_kernel(const A* a, const B* b, const A* azp, const B* bzp, int32_t* y, IntMM p) {
  GR_GRID_STRIDE(e, p.mats * p.m * p.n) y[e] = int_product(a, b, azp, bzp, p, e);
}

template <class A, class B, class Q>
__global__ void qlinear_matmul_kernel(const A* a, const float* as, int64_t as_count, const A* azp, const B* b,
                                      const float* bs, int64_t bs_count, const B* bzp, const float* ys, const Q* yzp,
                                      Q* y, IntMM p, QuantRange r) {
  GR_GRID_STRIDE(e, p.mats * p.m * p.n) {
    const int64_t i = e / p.n % p.m, j = e % p.n;
    y[e] = requantize<Q>(int_product(a, b, azp, bzp, p, e), as[as_count == 1 ? 0 : i], bs[bs_count == 1 ? 0 : j], ys[0],
                         static_cast<double>(yzp[0]), r);
  }
}

// The plan on the host, its offsets copied into scratch (sized by the shapes alone).
IntMM int_matmul_plan(KernelContext& ctx, const IntMatMul& p, const Tensor* azp, const Tensor* bzp, const char* what) {
  GR_CHECK(!azp || azp->numel() == 1 || azp->numel() == p.m, what << ": a's zero point must be a scalar or hold " << p.m);
  GR_CHECK(!bzp || bzp->numel() == 1 || bzp->numel() == p.n, what << ": b's zero point must be a scalar or hold " << p.n);
  IntMM d{p.m, p.k, p.n, static_cast<int64_t>(p.a_off.size()), azp ? azp->numel() : 1, bzp ? bzp->numel() : 1, nullptr};
  std::vector<int64_t> off;
  for (size_t t = 0; t < p.a_off.size(); ++t) {
    off.push_back(p.a_off[t]);
    off.push_back(p.b_off[t]);
  }
  auto* dev = static_cast<int64_t*>(ctx.scratch(std::max<size_t>(off.size(), 1) * sizeof(int64_t)));
  if (!off.empty())
    GR_CUDA_CHECK(cudaMemcpyAsync(dev, off.data(), off.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream_of(ctx)));
  d.offsets = dev;
  return d;
}

// Calls f(A{}, B{}) for the operand types (uint8 or int8 each).
template <class F>
void with_operands(const Tensor& a, const Tensor& b, const char* what, F f) {
  auto ok = [](DType t) { return t == DType::U8 || t == DType::I8; };
  GR_CHECK(ok(a.dtype()) && ok(b.dtype()), what << ": operands must be uint8 or int8, got " << dtype_name(a.dtype())
                                                << " and " << dtype_name(b.dtype()));
  auto with_b = [&](auto atag) {
    if (b.dtype() == DType::U8) f(atag, uint8_t{});
    else f(atag, int8_t{});
  };
  if (a.dtype() == DType::U8) with_b(uint8_t{});
  else with_b(int8_t{});
}

void matmul_integer_op(KernelContext& ctx) {
  const Tensor &A = ctx.input(0), &B = ctx.input(1);
  const Tensor* azp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Tensor* bzp = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const IntMatMul p = plan_int_matmul(A.shape(), B.shape(), "MatMulInteger");
  Tensor& Y = ctx.output(0, p.out, DType::I32);
  const IntMM d = int_matmul_plan(ctx, p, azp, bzp, "MatMulInteger");
  const int64_t n = Y.numel();
  if (n == 0) return;
  with_operands(A, B, "MatMulInteger", [&](auto atag, auto btag) {
    using AT = decltype(atag);
    using BT = decltype(btag);
    matmul_integer_kernel<AT, BT><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        dptr<AT>(A), dptr<BT>(B), azp ? dptr<AT>(*azp) : nullptr, bzp ? dptr<BT>(*bzp) : nullptr, dptr<int32_t>(Y), d);
  });
  GR_LAUNCH_CHECK("matmul_integer");
}

void qlinear_matmul_op(KernelContext& ctx) {
  const Tensor &A = ctx.input(0), &As = ctx.input(1), &Azp = ctx.input(2), &B = ctx.input(3), &Bs = ctx.input(4),
               &Bzp = ctx.input(5), &Ys = ctx.input(6), &Yzp = ctx.input(7);
  const IntMatMul p = plan_int_matmul(A.shape(), B.shape(), "QLinearMatMul");
  GR_CHECK(As.numel() == 1 || As.numel() == p.m, "QLinearMatMul: a_scale must be a scalar or hold " << p.m);
  GR_CHECK(Bs.numel() == 1 || Bs.numel() == p.n, "QLinearMatMul: b_scale must be a scalar or hold " << p.n);
  GR_CHECK(Ys.numel() == 1 && Yzp.numel() == 1, "QLinearMatMul: y_scale and y_zero_point must be scalars");
  for (const Tensor* s : {&As, &Bs, &Ys})
    GR_CHECK(s->dtype() == DType::F32, "QLinearMatMul on CUDA takes f32 scales, got " << dtype_name(s->dtype()));
  const QuantRange r = quant_range(Yzp.dtype(), "QLinearMatMul");
  Tensor& Y = ctx.output(0, p.out, Yzp.dtype());
  const IntMM d = int_matmul_plan(ctx, p, &Azp, &Bzp, "QLinearMatMul");
  const int64_t n = Y.numel();
  if (n == 0) return;
  with_operands(A, B, "QLinearMatMul", [&](auto atag, auto btag) {
    using AT = decltype(atag);
    using BT = decltype(btag);
    auto go = [&](auto qtag) {
      using Q = decltype(qtag);
      qlinear_matmul_kernel<AT, BT, Q><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
          dptr<AT>(A), dptr<float>(As), As.numel(), dptr<AT>(Azp), dptr<BT>(B), dptr<float>(Bs), Bs.numel(),
          dptr<BT>(Bzp), dptr<float>(Ys), dptr<Q>(Yzp), dptr<Q>(Y), d, r);
    };
    if (Yzp.dtype() == DType::U8) go(uint8_t{});
    else go(int8_t{});
  });
  GR_LAUNCH_CHECK("qlinear_matmul");
}

// ---- ConvInteger, QLinearConv: a thread per output element sums (x - x_zp) * (w - w_zp) over its window in
// int32 (exact, as the CPU's), then QLinearConv requantizes as QLinearMatMul does. For the small quantized
// convolutions of inference, not for speed. ----

struct IntConv {
  int64_t N, C, M, group;
  cpu::Window w;
  int64_t wzp_count;
};

template <class X, class W>
__device__ int32_t int_conv_at(const X* x, const W* wt, const X* xzp, const W* wzp, const IntConv& p, int64_t e,
                               int64_t* m_out) {
  const int64_t P = p.w.out[0] * p.w.out[1] * p.w.out[2];
  const int64_t pix = e % P, m = e / P % p.M, n = e / (P * p.M);
  const int64_t o0 = pix / (p.w.out[1] * p.w.out[2]), o1 = pix / p.w.out[2] % p.w.out[1], o2 = pix % p.w.out[2];
  const int64_t Cg = p.C / p.group, g = m / (p.M / p.group);
  const int32_t zx = xzp ? static_cast<int32_t>(xzp[0]) : 0;
  const int32_t zw = wzp ? static_cast<int32_t>(wzp[p.wzp_count == 1 ? 0 : m]) : 0;
  const int64_t I = p.w.in[0] * p.w.in[1] * p.w.in[2], K = p.w.k[0] * p.w.k[1] * p.w.k[2];
  int32_t acc = 0;
  for (int64_t c = 0; c < Cg; ++c) {
    const X* xc = x + (n * p.C + g * Cg + c) * I;
    const W* wc = wt + (m * Cg + c) * K;
    for (int64_t k0 = 0; k0 < p.w.k[0]; ++k0) {
      const int64_t i0 = o0 * p.w.s[0] - p.w.pb[0] + k0 * p.w.d[0];
      if (i0 < 0 || i0 >= p.w.in[0]) continue;
      for (int64_t k1 = 0; k1 < p.w.k[1]; ++k1) {
        const int64_t i1 = o1 * p.w.s[1] - p.w.pb[1] + k1 * p.w.d[1];
        if (i1 < 0 || i1 >= p.w.in[1]) continue;
        for (int64_t k2 = 0; k2 < p.w.k[2]; ++k2) {
          const int64_t i2 = o2 * p.w.s[2] - p.w.pb[2] + k2 * p.w.d[2];
          if (i2 < 0 || i2 >= p.w.in[2]) continue;
          acc += (static_cast<int32_t>(xc[(i0 * p.w.in[1] + i1) * p.w.in[2] + i2]) - zx) *
                 (static_cast<int32_t>(wc[(k0 * p.w.k[1] + k1) * p.w.k[2] + k2]) - zw);
        }
      }
    }
  }
  *m_out = m;
  return acc;
}

template <class X, class W>
__global__ void conv_integer_kernel(const X* x, const W* w, const X* xzp, const W* wzp, int32_t* y, IntConv p, int64_t n) {
  GR_GRID_STRIDE(e, n) {
    int64_t m;
    y[e] = int_conv_at(x, w, xzp, wzp, p, e, &m);
  }
}

template <class X, class W, class Q>
__global__ void qlinear_conv_kernel(const X* x, const float* xs, const X* xzp, const W* w, const float* ws, const W* wzp,
                                    const float* ys, const Q* yzp, const int32_t* bias, Q* y, IntConv p, int64_t n,
                                    int64_t ws_count, QuantRange r) {
  GR_GRID_STRIDE(e, n) {
    int64_t m;
    // Two statements: the operands of + are unsequenced, and bias[m] must read the m int_conv_at sets.
    int32_t acc = int_conv_at(x, w, xzp, wzp, p, e, &m);
    if (bias) acc += bias[m];
    y[e] = requantize<Q>(acc, xs[0], ws[ws_count == 1 ? 0 : m], ys[0], static_cast<double>(yzp[0]), r);
  }
}

// The shape of an integer convolution, checked as the CPU's conv_shape: X [N, C, 1 to 3 spatial], W [M, C/group, k...].
IntConv int_conv_plan(const Node& node, const Tensor& X, const Tensor& W, const Tensor* xzp, const Tensor* wzp,
                      const char* what, Shape* out) {
  GR_CHECK(X.rank() >= 3 && X.rank() <= 5 && W.rank() == X.rank(),
           what << ": X and W must have one rank of 3 to 5, got " << shape_str(X.shape()) << " and " << shape_str(W.shape()));
  IntConv p{X.dim(0), X.dim(1), W.dim(0), node.attr_i("group", 1), {}, wzp ? wzp->numel() : 1};
  GR_CHECK(p.group >= 1 && p.C == W.dim(1) * p.group && p.M % p.group == 0,
           what << ": X " << shape_str(X.shape()) << " and W " << shape_str(W.shape()) << " do not fit group " << p.group);
  GR_CHECK(!xzp || xzp->numel() == 1, what << ": x_zero_point must be a scalar");
  GR_CHECK(!wzp || wzp->numel() == 1 || wzp->numel() == p.M, what << ": w_zero_point must be a scalar or hold " << p.M);
  const Shape in(X.shape().begin() + 2, X.shape().end());
  const std::vector<int64_t> kernel(W.shape().begin() + 2, W.shape().end());
  p.w = cpu::forward_window(node, in, kernel, false);
  *out = {p.N, p.M};
  for (int a = 0; a < p.w.nd; ++a) out->push_back(p.w.out[cpu::Window::kMax - p.w.nd + a]);  // (right-aligned axes)
  return p;
}

void conv_integer_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &W = ctx.input(1);
  const Tensor* xzp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Tensor* wzp = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  Shape out;
  const IntConv p = int_conv_plan(ctx.node(), X, W, xzp, wzp, "ConvInteger", &out);
  Tensor& Y = ctx.output(0, out, DType::I32);
  const int64_t n = Y.numel();
  if (n == 0) return;
  with_operands(X, W, "ConvInteger", [&](auto xtag, auto wtag) {
    using XT = decltype(xtag);
    using WT = decltype(wtag);
    conv_integer_kernel<XT, WT><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        dptr<XT>(X), dptr<WT>(W), xzp ? dptr<XT>(*xzp) : nullptr, wzp ? dptr<WT>(*wzp) : nullptr, dptr<int32_t>(Y), p, n);
  });
  GR_LAUNCH_CHECK("conv_integer");
}

void qlinear_conv_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &Xs = ctx.input(1), &Xzp = ctx.input(2), &W = ctx.input(3), &Ws = ctx.input(4),
               &Wzp = ctx.input(5), &Ys = ctx.input(6), &Yzp = ctx.input(7);
  Shape out;
  const IntConv p = int_conv_plan(ctx.node(), X, W, &Xzp, &Wzp, "QLinearConv", &out);
  GR_CHECK(Xs.numel() == 1 && Ys.numel() == 1 && Yzp.numel() == 1,
           "QLinearConv: x_scale, y_scale and y_zero_point must be scalars");
  GR_CHECK(Ws.numel() == 1 || Ws.numel() == p.M, "QLinearConv: w_scale must be a scalar or hold " << p.M);
  for (const Tensor* s : {&Xs, &Ws, &Ys})
    GR_CHECK(s->dtype() == DType::F32, "QLinearConv on CUDA takes f32 scales, got " << dtype_name(s->dtype()));
  const int32_t* bias = nullptr;
  if (ctx.has_input(8)) {
    const Tensor& B = ctx.input(8);
    GR_CHECK(B.dtype() == DType::I32 && B.numel() == p.M, "QLinearConv: B must be int32 with " << p.M << " values");
    bias = dptr<int32_t>(B);
  }
  const QuantRange r = quant_range(Yzp.dtype(), "QLinearConv");
  Tensor& Y = ctx.output(0, out, Yzp.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  with_operands(X, W, "QLinearConv", [&](auto xtag, auto wtag) {
    using XT = decltype(xtag);
    using WT = decltype(wtag);
    auto go = [&](auto qtag) {
      using Q = decltype(qtag);
      qlinear_conv_kernel<XT, WT, Q><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
          dptr<XT>(X), dptr<float>(Xs), dptr<XT>(Xzp), dptr<WT>(W), dptr<float>(Ws), dptr<WT>(Wzp), dptr<float>(Ys),
          dptr<Q>(Yzp), bias, dptr<Q>(Y), p, n, Ws.numel(), r);
    };
    if (Yzp.dtype() == DType::U8) go(uint8_t{});
    else go(int8_t{});
  });
  GR_LAUNCH_CHECK("qlinear_conv");
}

}  // namespace

GR_REGISTER_OPS(quantize) {
  ops.op("QuantizeLinear").cuda(locked<quantize_linear_op>);
  ops.op("DequantizeLinear").cuda(locked<dequantize_linear_op>);
  ops.op("MatMulInteger").cuda(locked<matmul_integer_op>);
  ops.op("QLinearMatMul").cuda(locked<qlinear_matmul_op>);
  ops.op(kGraphrunDomain, "FakeQuantize").cuda(locked<fake_quantize_op>);
  ops.op("ConvInteger").cuda(locked<conv_integer_op>);
  ops.op("QLinearConv").cuda(locked<qlinear_conv_op>);
}

}  // namespace graphrun::runtime::cuda
