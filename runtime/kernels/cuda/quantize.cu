// CUDA kernels: quantize family (the CPU's quantize.cc op set): QuantizeLinear, DequantizeLinear, MatMulInteger,
// QLinearMatMul and ai.graphrun FakeQuantize, with the CPU's arithmetic (runtime/kernels/quantize_math.h). Scales and zero points are
// read on the device; MatMulInteger and QLinearMatMul take a thread per output element (for the small
// quantized layers of inference, not for speed).
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
  GR_CHECK(scale.dtype() == DType::F32 || scale.dtype() == DType::F64,
           "QuantizeLinear: the scale must be float, got " << dtype_name(scale.dtype()));
  GR_CHECK(X.dtype() == DType::F32 || X.dtype() == DType::F64 || X.dtype() == DType::I32,
           "QuantizeLinear: input of type " << dtype_name(X.dtype()) << " is not supported (float, int32)");
  const Shape zs = zp ? zp->shape() : Shape{};
  const QuantLayout l = quant_layout(ctx.node(), X.shape(), scale.shape(), zp ? &zs : nullptr,
                                     zp ? zp->dtype() : DType::U8, "QuantizeLinear");
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
  GR_CHECK(X.dtype() == DType::U8 || X.dtype() == DType::I8 || X.dtype() == DType::I32,
           "DequantizeLinear: input of type " << dtype_name(X.dtype()) << " is not supported (uint8, int8, int32)");
  GR_CHECK(!zp || zp->dtype() == X.dtype(), "DequantizeLinear: the zero point's type differs from the input's");
  GR_CHECK(scale.dtype() == DType::F32 || scale.dtype() == DType::F64,
           "DequantizeLinear: the scale must be float, got " << dtype_name(scale.dtype()));
  const Shape zs = zp ? zp->shape() : Shape{};
  const QuantLayout l = quant_layout(ctx.node(), X.shape(), scale.shape(), zp ? &zs : nullptr, X.dtype(), "DequantizeLinear");
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
  GR_CHECK(X.dtype() == scale.dtype() && (X.dtype() == DType::F32 || X.dtype() == DType::F64),
           "FakeQuantize: X and the scale must be f32 or f64 alike, got " << dtype_name(X.dtype()) << " and "
                                                                        << dtype_name(scale.dtype()));
  const Shape zs = zp ? zp->shape() : Shape{};
  const QuantLayout l = quant_layout(ctx.node(), X.shape(), scale.shape(), zp ? &zs : nullptr,
                                     zp ? zp->dtype() : DType::U8, "FakeQuantize");
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
    const float mult = as[as_count == 1 ? 0 : i] * bs[bs_count == 1 ? 0 : j] / ys[0];
    const double scaled = static_cast<double>(static_cast<float>(int_product(a, b, azp, bzp, p, e)) * mult);
    y[e] = quantize_value<Q>(scaled, static_cast<double>(yzp[0]), r);
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

}  // namespace

GR_REGISTER_OPS(quantize) {
  ops.op("QuantizeLinear").cuda(locked<quantize_linear_op>);
  ops.op("DequantizeLinear").cuda(locked<dequantize_linear_op>);
  ops.op("MatMulInteger").cuda(locked<matmul_integer_op>);
  ops.op("QLinearMatMul").cuda(locked<qlinear_matmul_op>);
  ops.op(kGraphrunDomain, "FakeQuantize").cuda(locked<fake_quantize_op>);
}

}  // namespace graphrun::runtime::cuda
