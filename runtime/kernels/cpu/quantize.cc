// CPU kernels: quantize family. QuantizeLinear and DequantizeLinear (opsets 10 and 13: per tensor, or per axis
// with 1-D scales; uint8 and int8), MatMulInteger and QLinearMatMul (uint8 and int8 operands with their zero
// points, per tensor or per row of A / column of B), and ai.graphrun FakeQuantize (a Q/DQ pair in training).
// The arithmetic is runtime/kernels/quantize_math.h's,
// which the CUDA kernels share. DynamicQuantizeLinear has no kernel: ONNX defines it as a function of these
// and other ops, inlined on load.
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/quantize_math.h"

namespace graphrun::runtime::cpu {

namespace {

template <class Q>
void quantize_into(const std::vector<double>& x, const Tensor& scale, const Tensor* zp, const QuantLayout& l, Q* y) {
  const QuantRange r = quant_range(l.q, "QuantizeLinear");
  const std::vector<double> s = scale.as_doubles();
  std::vector<double> z(static_cast<size_t>(l.c));
  for (int64_t c = 0; c < l.c; ++c) z[static_cast<size_t>(c)] = zero_point_value(zp, c);
  const bool f32 = scale.dtype() == DType::F32;
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = static_cast<size_t>(quant_channel(static_cast<int64_t>(i), l.c, l.inner));
    // The division in the scale's own precision, as the spec's reference computes x / y_scale.
    const double scaled = f32 ? static_cast<double>(static_cast<float>(x[i]) / static_cast<float>(s[c])) : x[i] / s[c];
    y[i] = quantize_value<Q>(scaled, z[c], r);
  }
}

void quantize_linear_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const QuantLayout l = quant_inputs(ctx, QuantOp::Quantize);
  Tensor& y = ctx.output(0, x.shape(), l.q);
  const std::vector<double> xv = x.as_doubles();
  if (l.q == DType::U8) quantize_into<uint8_t>(xv, scale, zp, l, static_cast<uint8_t*>(y.raw()));
  else if (l.q == DType::I8) quantize_into<int8_t>(xv, scale, zp, l, static_cast<int8_t*>(y.raw()));
  else quant_range(l.q, "QuantizeLinear");  // throws naming the type
}

void dequantize_linear_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const QuantLayout l = quant_inputs(ctx, QuantOp::Dequantize);
  const std::vector<double> xv = x.as_doubles(), s = scale.as_doubles();
  dispatch_float(scale.dtype(), "DequantizeLinear scale", [&](auto tag) {
    using T = decltype(tag);
    T* y = ptr<T>(ctx.output(0, x.shape(), scale.dtype()));
    for (size_t i = 0; i < xv.size(); ++i) {
      const int64_t c = quant_channel(static_cast<int64_t>(i), l.c, l.inner);
      y[i] = static_cast<T>((static_cast<T>(xv[i]) - static_cast<T>(zero_point_value(zp, c))) * static_cast<T>(s[static_cast<size_t>(c)]));
    }
  });
}

// The int32 products (A - a_zero_point) @ (B - b_zero_point) of every output matrix; a zero point per tensor,
// or per row of A ([M]) / per column of B ([N]).
std::vector<int32_t> int_products(const IntMatMul& p, const Tensor& a, const Tensor& b, const Tensor* azp,
                                  const Tensor* bzp, const char* what) {
  GR_CHECK((a.dtype() == DType::U8 || a.dtype() == DType::I8) && (b.dtype() == DType::U8 || b.dtype() == DType::I8),
           what << ": operands must be uint8 or int8, got " << dtype_name(a.dtype()) << " and " << dtype_name(b.dtype()));
  GR_CHECK(!azp || azp->numel() == 1 || azp->numel() == p.m, what << ": a's zero point must be a scalar or hold " << p.m);
  GR_CHECK(!bzp || bzp->numel() == 1 || bzp->numel() == p.n, what << ": b's zero point must be a scalar or hold " << p.n);
  const std::vector<double> av = a.as_doubles(), bv = b.as_doubles();
  std::vector<int32_t> y(p.a_off.size() * static_cast<size_t>(p.m * p.n));
  for (size_t t = 0; t < p.a_off.size(); ++t)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        const int32_t za = static_cast<int32_t>(zero_point_value(azp, i)), zb = static_cast<int32_t>(zero_point_value(bzp, j));
        int32_t acc = 0;
        for (int64_t q = 0; q < p.k; ++q)
          acc += (static_cast<int32_t>(av[static_cast<size_t>(p.a_off[t] + i * p.k + q)]) - za) *
                 (static_cast<int32_t>(bv[static_cast<size_t>(p.b_off[t] + q * p.n + j)]) - zb);
        y[(t * static_cast<size_t>(p.m) + static_cast<size_t>(i)) * static_cast<size_t>(p.n) + static_cast<size_t>(j)] = acc;
      }
  return y;
}

void matmul_integer_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const IntMatMul p = plan_int_matmul(a.shape(), b.shape(), "MatMulInteger");
  const std::vector<int32_t> y = int_products(p, a, b, ctx.has_input(2) ? &ctx.input(2) : nullptr,
                                              ctx.has_input(3) ? &ctx.input(3) : nullptr, "MatMulInteger");
  Tensor& out = ctx.output(0, p.out, DType::I32);
  if (!y.empty()) std::memcpy(out.raw(), y.data(), y.size() * sizeof(int32_t));
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): the int32 product, rescaled by
// a_scale * b_scale / y_scale in float, rounded half to even, plus y_zp, saturated (the spec's reference).
void qlinear_matmul_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &as = ctx.input(1), &b = ctx.input(3), &bs = ctx.input(4), &ys = ctx.input(6),
               &yzp = ctx.input(7);
  const IntMatMul p = plan_int_matmul(a.shape(), b.shape(), "QLinearMatMul");
  const std::vector<int32_t> prod = int_products(p, a, b, &ctx.input(2), &ctx.input(5), "QLinearMatMul");
  GR_CHECK(as.numel() == 1 || as.numel() == p.m, "QLinearMatMul: a_scale must be a scalar or hold " << p.m);
  GR_CHECK(bs.numel() == 1 || bs.numel() == p.n, "QLinearMatMul: b_scale must be a scalar or hold " << p.n);
  GR_CHECK(ys.numel() == 1 && yzp.numel() == 1, "QLinearMatMul: y_scale and y_zero_point must be scalars");
  const std::vector<double> av = as.as_doubles(), bv = bs.as_doubles();
  const float y_scale = static_cast<float>(ys.as_doubles()[0]);
  const QuantRange r = quant_range(yzp.dtype(), "QLinearMatMul");
  const double z = zero_point_value(&yzp, 0);
  Tensor& y = ctx.output(0, p.out, yzp.dtype());
  for (size_t e = 0; e < prod.size(); ++e) {
    const int64_t j = static_cast<int64_t>(e) % p.n, i = static_cast<int64_t>(e) / p.n % p.m;
    const float sa = static_cast<float>(av[av.size() == 1 ? 0 : static_cast<size_t>(i)]);
    const float sb = static_cast<float>(bv[bv.size() == 1 ? 0 : static_cast<size_t>(j)]);
    if (yzp.dtype() == DType::U8) static_cast<uint8_t*>(y.raw())[e] = requantize<uint8_t>(prod[e], sa, sb, y_scale, z, r);
    else static_cast<int8_t*>(y.raw())[e] = requantize<int8_t>(prod[e], sa, sb, y_scale, z, r);
  }
}

// ai.graphrun FakeQuantize(X, scale[, zero_point]): DequantizeLinear(QuantizeLinear(X)) as PyTorch's
// fake_quantize computes it, in one node whose output stays float: the training form of a Q/DQ pair (pass
// fake_quantize), differentiated straight through as PyTorch's quantization-aware training does
// (autodiff/rules/quantize.cc). PyTorch rounds X * (1 / scale) where QuantizeLinear rounds X / scale: the two
// differ only where the quotient's last bit decides a tie.
template <class T, class Q>
void fake_quantize_into(const T* x, const std::vector<double>& s, const Tensor* zp, const QuantLayout& l, QuantRange r,
                        bool f32, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = quant_channel(i, l.c, l.inner);
    const double sc = s[static_cast<size_t>(c)], z = zero_point_value(zp, c);
    // PyTorch's x * inv_scale (in the scale's precision), where QuantizeLinear divides.
    const double scaled = f32 ? static_cast<double>(static_cast<float>(x[i]) * (1.f / static_cast<float>(sc))) : x[i] * (1.0 / sc);
    const Q q = quantize_value<Q>(scaled, z, r);
    y[i] = static_cast<T>((static_cast<T>(q) - static_cast<T>(z)) * static_cast<T>(sc));
  }
}

void fake_quantize_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const QuantLayout l = quant_inputs(ctx, QuantOp::Fake);
  const std::vector<double> s = scale.as_doubles();
  dispatch_float(x.dtype(), "FakeQuantize", [&](auto tag) {
    using T = decltype(tag);
    T* y = ptr<T>(ctx.output(0, x.shape(), x.dtype()));
    const bool f32 = x.dtype() == DType::F32;
    const QuantRange r = fake_quant_range(ctx.node(), l.q);
    if (l.q == DType::U8) fake_quantize_into<T, uint8_t>(ptr<T>(x), s, zp, l, r, f32, y, x.numel());
    else fake_quantize_into<T, int8_t>(ptr<T>(x), s, zp, l, r, f32, y, x.numel());
  });
}

}  // namespace

GR_REGISTER_OPS(quantize) {
  ops.op(kGraphrunDomain, "FakeQuantize")
      .cpu(fake_quantize_kernel)
      .schema(OpSchemaSpec("DequantizeLinear(QuantizeLinear(X, scale, zero_point)) in one float node, rounding "
                           "X * (1 / scale) as PyTorch's fake_quantize does (internal: pass fake_quantize makes it of a "
                           "Q/DQ pair for training, where its gradient passes dY straight through inside the quantized "
                           "range, as PyTorch's quantization-aware training does)")
                  .attr("axis", "as QuantizeLinear's (a 1-D scale's axis)", Attribute::Int(1))
                  .attr("quant_min", "the lowest quantized value, when above the type's", Attribute::Kind::Int)
                  .attr("quant_max", "the highest quantized value, when below the type's", Attribute::Kind::Int)
                  .input("X", "the float input", "T")
                  .input("scale", "as QuantizeLinear's", "T")
                  .input("zero_point", "as QuantizeLinear's (uint8 when absent)", "Q", OpSchemaSpec::Arity::Optional)
                  .output("Y", "X quantized and dequantized", "T")
                  .type("T", {"tensor(float)", "tensor(double)"}, "f32 or f64")
                  .type("Q", {"tensor(uint8)", "tensor(int8)"}, "the quantized type")
                  .output_like(0, 0));
  ops.op("QuantizeLinear").cpu(quantize_linear_kernel);
  ops.op("DequantizeLinear").cpu(dequantize_linear_kernel);
  ops.op("MatMulInteger").cpu(matmul_integer_kernel);
  ops.op("QLinearMatMul").cpu(qlinear_matmul_kernel);
}

}  // namespace graphrun::runtime::cpu
