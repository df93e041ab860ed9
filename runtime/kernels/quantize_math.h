// The arithmetic of ONNX's linear quantization, shared by the CPU kernels (runtime/kernels/cpu/quantize.cc) and
// the CUDA kernels (runtime/kernels/cuda/quantize.cu) so both round and saturate alike, and the host-side
// checks of a node's scale and zero point (per tensor, or per axis with a 1-D scale).
//   QuantizeLinear:   y = saturate(round_half_even(x / scale) + zero_point)   (uint8 [0, 255], int8 [-128, 127])
//   DequantizeLinear: y = (x - zero_point) * scale
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define GR_QUANT_HD __host__ __device__
#else
#define GR_QUANT_HD
#endif

namespace graphrun::runtime {

// The integer range of a quantized type.
struct QuantRange {
  double lo = 0, hi = 255;
};

// round(v) half to even, then + zero point, saturated: in double, exact for the float inputs the spec has.
template <class Q>
GR_QUANT_HD inline Q quantize_value(double scaled, double zero_point, QuantRange r) {
  double q = rint(scaled) + zero_point;
  q = q < r.lo ? r.lo : (q > r.hi ? r.hi : q);
  return static_cast<Q>(q);
}

// QLinearMatMul's and QLinearConv's output: the int32 sum times in_scale * w_scale / y_scale (in float, as the
// spec's reference), requantized.
template <class Q>
GR_QUANT_HD inline Q requantize(int32_t acc, float in_scale, float w_scale, float y_scale, double zero_point, QuantRange r) {
  return quantize_value<Q>(static_cast<double>(static_cast<float>(acc) * (in_scale * w_scale / y_scale)), zero_point, r);
}

// The position along the quantization axis of element i of a tensor whose axis has c entries and `inner`
// elements after it (c = 1: per tensor).
GR_QUANT_HD inline int64_t quant_channel(int64_t i, int64_t c, int64_t inner) { return c == 1 ? 0 : (i / inner) % c; }

}  // namespace graphrun::runtime

#include "graph/error.h"
#include "graph/ir.h"
#include "graph/tensor.h"
#include "runtime/kernel.h"

namespace graphrun::runtime {

// How a node's scale and zero point (optional) apply to x: per tensor (a scalar or one-element scale), or along
// `axis` (default 1, opset 13) with 1-D ones as long as that axis.
struct QuantLayout {
  int64_t c = 1, inner = 1;
  DType q = DType::U8;  // the quantized type: the zero point's, uint8 without one
};

inline QuantLayout quant_layout(const Node& n, const Shape& x, const Shape& scale, const Shape* zero_point,
                                DType zp_type, const char* what) {
  QuantLayout l;
  int64_t count = 1;
  for (int64_t d : scale) count *= d;
  GR_CHECK(scale.size() <= 1, what << ": the scale must be a scalar or 1-D, got " << shape_str(scale));
  if (zero_point) {
    GR_CHECK(*zero_point == scale || (zero_point->size() <= 1 && scale.size() <= 1 && count == 1),
             what << ": the zero point " << shape_str(*zero_point) << " and the scale " << shape_str(scale)
                  << " differ in shape");
    l.q = zp_type;
  }
  // One value is per tensor whatever `axis` says (as ONNX Runtime reads it; per axis it could only mean the same
  // where the axis has one entry).
  if (scale.size() == 1 && count != 1) {
    const int r = static_cast<int>(x.size());
    int64_t axis = n.attr_i("axis", 1);
    GR_CHECK(axis >= -r && axis < r, what << ": axis " << axis << " is out of range for rank " << r);
    if (axis < 0) axis += r;
    GR_CHECK(x[static_cast<size_t>(axis)] == count, what << ": a scale of " << count << " values for axis " << axis
                                                         << " of " << shape_str(x));
    l.c = count;
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.size(); ++d) l.inner *= x[d];
  } else {
    GR_CHECK(count == 1, what << ": a scale of " << count << " values needs a 1-D scale along an axis");
  }
  return l;
}

// MatMulInteger's and QLinearMatMul's shapes: A [..., M, K] times B [..., K, N] with matmul's batch
// broadcasting; per output matrix, the element offsets of its A and B matrices.
struct IntMatMul {
  Shape out;
  int64_t m = 0, k = 0, n = 0;
  std::vector<int64_t> a_off, b_off;
};

inline IntMatMul plan_int_matmul(const Shape& a, const Shape& b, const char* what) {
  GR_CHECK(a.size() >= 2 && b.size() >= 2, what << ": operands must have rank 2 or more, got " << shape_str(a)
                                                 << " and " << shape_str(b));
  IntMatMul p;
  p.m = a[a.size() - 2], p.k = a.back(), p.n = b.back();
  GR_CHECK(b[b.size() - 2] == p.k, what << ": " << shape_str(a) << " and " << shape_str(b) << " do not multiply");
  const size_t rank = std::max(a.size(), b.size()) - 2;
  Shape batch(rank, 1), as(rank, 1), bs(rank, 1);
  for (size_t i = 0; i < a.size() - 2; ++i) as[rank - (a.size() - 2) + i] = a[i];
  for (size_t i = 0; i < b.size() - 2; ++i) bs[rank - (b.size() - 2) + i] = b[i];
  for (size_t i = 0; i < rank; ++i) {
    GR_CHECK(as[i] == bs[i] || as[i] == 1 || bs[i] == 1, what << ": batch dims of " << shape_str(a) << " and "
                                                              << shape_str(b) << " do not broadcast");
    batch[i] = std::max(as[i], bs[i]);
  }
  int64_t count = 1;
  for (int64_t d : batch) count *= d;
  for (int64_t t = 0; t < count; ++t) {
    int64_t rest = t, ao = 0, bo = 0, astride = 1, bstride = 1;
    for (size_t i = rank; i-- > 0;) {
      const int64_t c = rest % batch[i];
      rest /= batch[i];
      ao += (as[i] == 1 ? 0 : c) * astride;
      bo += (bs[i] == 1 ? 0 : c) * bstride;
      astride *= as[i];
      bstride *= bs[i];
    }
    p.a_off.push_back(ao * p.m * p.k);
    p.b_off.push_back(bo * p.k * p.n);
  }
  p.out = batch;
  p.out.push_back(p.m);
  p.out.push_back(p.n);
  return p;
}

inline QuantRange quant_range(DType q, const char* what) {
  if (q == DType::U8) return {0, 255};
  if (q == DType::I8) return {-128, 127};
  GR_FAIL(what << ": quantized type " << dtype_name(q) << " is not supported (uint8, int8)");
}

enum class QuantOp { Quantize, Dequantize, Fake };

// The checks of a QuantizeLinear, DequantizeLinear or FakeQuantize node's inputs (X, scale, the optional zero
// point) and their layout, in one place for the CPU and CUDA kernels.
inline QuantLayout quant_inputs(const KernelContext& ctx, QuantOp op) {
  const char* what = op == QuantOp::Quantize ? "QuantizeLinear" : op == QuantOp::Dequantize ? "DequantizeLinear" : "FakeQuantize";
  const Tensor &x = ctx.input(0), &scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  GR_CHECK(scale.dtype() == DType::F32 || scale.dtype() == DType::F64,
           what << ": the scale must be float, got " << dtype_name(scale.dtype()));
  const DType t = x.dtype();
  if (op == QuantOp::Quantize)
    GR_CHECK(t == DType::F32 || t == DType::F64 || t == DType::I32,
             what << ": input of type " << dtype_name(t) << " is not supported (float, int32)");
  if (op == QuantOp::Dequantize) {
    GR_CHECK(t == DType::U8 || t == DType::I8 || t == DType::I32,
             what << ": input of type " << dtype_name(t) << " is not supported (uint8, int8, int32)");
    GR_CHECK(!zp || zp->dtype() == t, what << ": the zero point is " << dtype_name(zp->dtype()) << ", the input " << dtype_name(t));
  }
  if (op == QuantOp::Fake)
    GR_CHECK(t == scale.dtype(), what << ": X and the scale must be f32 or f64 alike, got " << dtype_name(t) << " and "
                                      << dtype_name(scale.dtype()));
  const Shape zs = zp ? zp->shape() : Shape{};
  return quant_layout(ctx.node(), x.shape(), scale.shape(), zp ? &zs : nullptr,
                      zp ? zp->dtype() : (op == QuantOp::Dequantize ? t : DType::U8), what);
}

// A zero point's value at channel c (per tensor: its one value), 0 without one; uint8, int8 or int32.
inline double zero_point_value(const Tensor* zp, int64_t c) {
  if (!zp) return 0;
  const int64_t at = zp->numel() == 1 ? 0 : c;
  switch (zp->dtype()) {
    case DType::U8: return static_cast<const uint8_t*>(zp->raw())[at];
    case DType::I8: return static_cast<const int8_t*>(zp->raw())[at];
    case DType::I32: return static_cast<const int32_t*>(zp->raw())[at];
    default: GR_FAIL("zero point of type " << dtype_name(zp->dtype()) << " is not supported");
  }
}

// FakeQuantize's range: the quantized type's, narrowed by the node's quant_min and quant_max where given.
inline QuantRange fake_quant_range(const Node& n, DType q) {
  QuantRange r = quant_range(q, "FakeQuantize");
  if (n.has_attr("quant_min")) r.lo = std::max(r.lo, static_cast<double>(n.attr_i("quant_min", 0)));
  if (n.has_attr("quant_max")) r.hi = std::min(r.hi, static_cast<double>(n.attr_i("quant_max", 0)));
  GR_CHECK(r.lo <= r.hi, "FakeQuantize: quant_min " << r.lo << " is above quant_max " << r.hi);
  return r;
}

}  // namespace graphrun::runtime
