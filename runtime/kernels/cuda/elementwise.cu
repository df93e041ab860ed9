// CUDA kernels: elementwise family (the CPU's elementwise.cc op set): arithmetic and comparisons with
// numpy broadcasting, unary math, Where, Cast, Identity, Expand, Sum; FusedAdd (Relu(Add), pass fuse_relu_bn_add).
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/cuda/fused.cuh"

namespace graphrun::runtime::cuda {
namespace {

// ---- functors ----
struct AddOp { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
// FusedAdd (pass fuse_relu_bn_add): Add's sum, then the Relu kernel's v < 0 ? 0 : v.
struct AddReluOp {
  template <class T> __device__ T operator()(T a, T b) const {
    const T v = a + b;
    return v < T(0) ? T(0) : v;
  }
};
struct SubOp { template <class T> __device__ T operator()(T a, T b) const { return a - b; } };
struct MulOp { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };
struct DivOp { template <class T> __device__ T operator()(T a, T b) const { return a / b; } };
// NaN propagates through Max and Min (a + b is NaN when either is), as in the CPU kernels and numpy.
struct MaxOp {
  template <class T> __device__ T operator()(T a, T b) const {
    if (a != a || b != b) return a + b;
    return a < b ? b : a;
  }
};
struct MinOp {
  template <class T> __device__ T operator()(T a, T b) const {
    if (a != a || b != b) return a + b;
    return b < a ? b : a;
  }
};
struct GreaterOp { template <class T> __device__ uint8_t operator()(T a, T b) const { return a > b; } };
struct LessOp { template <class T> __device__ uint8_t operator()(T a, T b) const { return a < b; } };
struct GreaterEqOp { template <class T> __device__ uint8_t operator()(T a, T b) const { return a >= b; } };
struct LessEqOp { template <class T> __device__ uint8_t operator()(T a, T b) const { return a <= b; } };
struct EqualOp { template <class T> __device__ uint8_t operator()(T a, T b) const { return a == b; } };

template <class Op, class T>
using ResultOf = decltype(Op{}(T{}, T{}));

template <class T, class R, class Op>
__global__ void binary_same_shape(const T* a, const T* b, R* y, int64_t n, Op op) {
  GR_GRID_STRIDE(i, n) y[i] = op(a[i], b[i]);
}

template <class T, class R, class Op>
__global__ void binary_broadcast(const T* a, const T* b, R* y, IndexMap m, int64_t n, Op op) {
  GR_GRID_STRIDE(i, n) {
    int64_t off[3];
    map_offsets(m, i, 2, off);
    y[i] = op(a[off[0]], b[off[1]]);
  }
}

template <class T, class Op>
void launch_binary(KernelContext& ctx, const Tensor& A, const Tensor& B, Tensor& Y, Op op) {
  using R = ResultOf<Op, T>;
  int64_t n = Y.numel();
  if (n == 0) return;
  cudaStream_t s = stream_of(ctx);
  if (A.shape() == Y.shape() && B.shape() == Y.shape()) {
    binary_same_shape<T, R, Op><<<grid_for(n), kThreads, 0, s>>>(dptr<T>(A), dptr<T>(B), dptr<R>(Y), n, op);
  } else {
    IndexMap m = make_index_map(Y.shape(), {A.shape(), B.shape()});
    binary_broadcast<T, R, Op><<<grid_for(n), kThreads, 0, s>>>(dptr<T>(A), dptr<T>(B), dptr<R>(Y), m, n, op);
  }
  GR_LAUNCH_CHECK("binary");
}

template <class Op>
void run_binary(KernelContext& ctx, Op op) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  GR_CHECK(A.dtype() == B.dtype(), "inputs are " << dtype_name(A.dtype()) << " and " << dtype_name(B.dtype()));
  Shape out = broadcast_shapes({A.shape(), B.shape()});
  auto go = [&](auto tag) {
    using T = decltype(tag);
    using R = ResultOf<Op, T>;
    // Comparisons compute a byte per element; their ONNX type is bool (Where's condition), not uint8.
    constexpr DType kOut = std::is_same_v<R, uint8_t> ? DType::Bool : dtype_of<R>();
    Tensor& Y = ctx.output(0, out, kOut);
    launch_binary<T>(ctx, A, B, Y, op);
  };
  dispatch_arith(A.dtype(), ctx.node().op_type, go);
}

template <class Op> void binary_kernel(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() == 2, ctx.node().op_type << " takes 2 inputs, got " << ctx.num_inputs());
  run_binary(ctx, Op{});
}

void fused_add_op(KernelContext& ctx) {
  check_fused_activation(ctx.node());
  binary_kernel<AddReluOp>(ctx);
}

// Pow: the exponent may have another numeric type than the base.
template <class T, class E>
__global__ void pow_kernel(const T* a, const E* b, T* y, IndexMap m, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t off[3];
    map_offsets(m, i, 2, off);
    y[i] = static_cast<T>(pow(static_cast<double>(a[off[0]]), static_cast<double>(b[off[1]])));
  }
}
template <class E>
__global__ void pow_f32_kernel(const float* a, const E* b, float* y, IndexMap m, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t off[3];
    map_offsets(m, i, 2, off);
    y[i] = powf(a[off[0]], static_cast<float>(b[off[1]]));
  }
}

void pow_kernel_host(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  GR_CHECK(A.dtype() == DType::F32, "Pow on CUDA takes a f32 base, got " << dtype_name(A.dtype()));
  Shape out = broadcast_shapes({A.shape(), B.shape()});
  Tensor& Y = ctx.output(0, out, DType::F32);
  int64_t n = Y.numel();
  if (n == 0) return;
  IndexMap m = make_index_map(out, {A.shape(), B.shape()});
  cudaStream_t s = stream_of(ctx);
  switch (B.dtype()) {
    case DType::F32: pow_f32_kernel<float><<<grid_for(n), kThreads, 0, s>>>(dptr<float>(A), dptr<float>(B), dptr<float>(Y), m, n); break;
    case DType::F64: pow_f32_kernel<double><<<grid_for(n), kThreads, 0, s>>>(dptr<float>(A), dptr<double>(B), dptr<float>(Y), m, n); break;
    case DType::I64: pow_f32_kernel<int64_t><<<grid_for(n), kThreads, 0, s>>>(dptr<float>(A), dptr<int64_t>(B), dptr<float>(Y), m, n); break;
    case DType::I32: pow_f32_kernel<int32_t><<<grid_for(n), kThreads, 0, s>>>(dptr<float>(A), dptr<int32_t>(B), dptr<float>(Y), m, n); break;
    default: GR_FAIL("Pow exponent of type " << dtype_name(B.dtype()) << " is not supported on CUDA");
  }
  GR_LAUNCH_CHECK("pow");
}

// ---- unary ----
// NaN stays NaN (as on the CPU and in PyTorch): a diverging run must show a NaN loss, not zeros.
struct ReluOp { template <class T> __device__ T operator()(T x) const { return x < T(0) ? T(0) : x; } };
struct NegOp { template <class T> __device__ T operator()(T x) const { return -x; } };
struct AbsOp { template <class T> __device__ T operator()(T x) const { return x < T(0) ? -x : x; } };
struct ExpOp { template <class T> __device__ T operator()(T x) const { return exp(x); } };
struct LogOp { template <class T> __device__ T operator()(T x) const { return log(x); } };
struct SqrtOp { template <class T> __device__ T operator()(T x) const { return sqrt(x); } };
struct TanhOp { template <class T> __device__ T operator()(T x) const { return tanh(x); } };
struct SigmoidOp {
  // Written so that neither branch overflows: exp of a non-positive number only.
  template <class T> __device__ T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + exp(-x));
    T e = exp(x);
    return e / (T(1) + e);
  }
};
struct ReciprocalOp { template <class T> __device__ T operator()(T x) const { return T(1) / x; } };
struct FloorOp { template <class T> __device__ T operator()(T x) const { return floor(x); } };
struct CeilOp { template <class T> __device__ T operator()(T x) const { return ceil(x); } };

// The CPU's formulas (runtime/kernels/cpu/elementwise.cc), written with its comparisons so that NaN goes
// the same way: std::max(a, b) is (a < b ? b : a), std::min(a, b) is (b < a ? b : a).
template <class T> __device__ T max_like_std(T a, T b) { return a < b ? b : a; }
template <class T> __device__ T min_like_std(T a, T b) { return b < a ? b : a; }

struct SignOp { template <class T> __device__ T operator()(T v) const { return static_cast<T>(v > T(0) ? 1 : (v < T(0) ? -1 : 0)); } };
struct ErfOp { template <class T> __device__ T operator()(T v) const { return erf(v); } };
struct SoftplusOp {
  template <class T> __device__ T operator()(T v) const { return v > T(0) ? v + log1p(exp(-v)) : log1p(exp(v)); }
};
struct RoundOp { template <class T> __device__ T operator()(T v) const { return rint(v); } };  // half to even
struct SinOp { template <class T> __device__ T operator()(T v) const { return sin(v); } };
struct CosOp { template <class T> __device__ T operator()(T v) const { return cos(v); } };
struct TanOp { template <class T> __device__ T operator()(T v) const { return tan(v); } };
struct AsinOp { template <class T> __device__ T operator()(T v) const { return asin(v); } };
struct AcosOp { template <class T> __device__ T operator()(T v) const { return acos(v); } };
struct AtanOp { template <class T> __device__ T operator()(T v) const { return atan(v); } };
struct SinhOp { template <class T> __device__ T operator()(T v) const { return sinh(v); } };
struct CoshOp { template <class T> __device__ T operator()(T v) const { return cosh(v); } };
struct AsinhOp { template <class T> __device__ T operator()(T v) const { return asinh(v); } };
struct AcoshOp { template <class T> __device__ T operator()(T v) const { return acosh(v); } };
struct AtanhOp { template <class T> __device__ T operator()(T v) const { return atanh(v); } };
struct SoftsignOp { template <class T> __device__ T operator()(T v) const { return v / (T(1) + fabs(v)); } };
struct HardSwishOp {
  template <class T> __device__ T operator()(T v) const {
    return v * max_like_std(T(0), min_like_std(T(1), v / T(6) + T(0.5)));
  }
};
// Activations with float attributes (a, b as the CPU reads them: the attribute's float, widened).
struct LeakyReluOp {
  double a = 0.01;
  template <class T> __device__ T operator()(T v) const { return v >= T(0) ? v : static_cast<T>(a) * v; }
};
struct EluOp {
  double a = 1;
  template <class T> __device__ T operator()(T v) const { return v >= T(0) ? v : static_cast<T>(a) * (exp(v) - T(1)); }
};
struct HardSigmoidOp {
  double a = 0.2, b = 0.5;
  template <class T> __device__ T operator()(T v) const {
    return max_like_std(T(0), min_like_std(T(1), static_cast<T>(a) * v + static_cast<T>(b)));
  }
};
struct SeluOp {
  double a = 1.67326319217681884765625, g = 1.05070102214813232421875;
  template <class T> __device__ T operator()(T v) const {
    const T ta = static_cast<T>(a), tg = static_cast<T>(g);
    return v > T(0) ? tg * v : tg * (ta * exp(v) - ta);
  }
};
struct ThresholdedReluOp {
  double a = 1;
  template <class T> __device__ T operator()(T v) const { return v > static_cast<T>(a) ? v : T(0); }
};
struct CeluOp {
  double a = 1;
  template <class T> __device__ T operator()(T v) const {
    const T ta = static_cast<T>(a);
    return max_like_std(T(0), v) + min_like_std(T(0), ta * (exp(v / ta) - T(1)));
  }
};

template <class T, class Op>
__global__ void unary_kernel(const T* x, T* y, int64_t n, Op op) {
  GR_GRID_STRIDE(i, n) y[i] = op(x[i]);
}

// Float-only unary ops (exp, log, ...) and sign ops that also take integers (Neg, Abs, Relu); `op` carries
// the node's attributes where it has some.
template <class Op, bool kIntegersToo>
void unary_with(KernelContext& ctx, Op op) {
  const Tensor& X = ctx.input(0);
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  int64_t n = X.numel();
  if (n == 0) return;
  cudaStream_t s = stream_of(ctx);
  auto go = [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<<<grid_for(n), kThreads, 0, s>>>(dptr<T>(X), dptr<T>(Y), n, op);
  };
  if (X.dtype() == DType::F32) {
    go(float{});
  } else if (X.dtype() == DType::F64) {
    go(double{});
  } else {
    bool done = false;
    if constexpr (kIntegersToo) {
      if (X.dtype() == DType::I64) { go(int64_t{}); done = true; }
      if (X.dtype() == DType::I32) { go(int32_t{}); done = true; }
    }
    GR_CHECK(done, ctx.node().op_type << " on " << dtype_name(X.dtype()) << " is not supported on CUDA");
  }
  GR_LAUNCH_CHECK("unary");
}
template <class Op, bool kIntegersToo> void unary(KernelContext& ctx) { unary_with<Op, kIntegersToo>(ctx, Op{}); }

double attr_or(KernelContext& ctx, const char* name, float def) { return ctx.node().attr_f(name, def); }
void leaky_relu_op(KernelContext& ctx) { unary_with<LeakyReluOp, false>(ctx, LeakyReluOp{attr_or(ctx, "alpha", 0.01f)}); }
void elu_op(KernelContext& ctx) { unary_with<EluOp, false>(ctx, EluOp{attr_or(ctx, "alpha", 1.f)}); }
void hard_sigmoid_op(KernelContext& ctx) {
  unary_with<HardSigmoidOp, false>(ctx, HardSigmoidOp{attr_or(ctx, "alpha", 0.2f), attr_or(ctx, "beta", 0.5f)});
}
void selu_op(KernelContext& ctx) {
  unary_with<SeluOp, false>(
      ctx, SeluOp{attr_or(ctx, "alpha", 1.67326319217681884765625f), attr_or(ctx, "gamma", 1.05070102214813232421875f)});
}
void thresholded_relu_op(KernelContext& ctx) {
  unary_with<ThresholdedReluOp, false>(ctx, ThresholdedReluOp{attr_or(ctx, "alpha", 1.f)});
}
void celu_op(KernelContext& ctx) { unary_with<CeluOp, false>(ctx, CeluOp{attr_or(ctx, "alpha", 1.f)}); }

// ---- Clip: min(hi, max(lo, v)) as the CPU computes it (NaN stays NaN; min > max gives max). The bounds are
// attributes before opset 11, optional scalar inputs from 11 on: read on the device, where they are.
template <class T>
__global__ void clip_kernel(const T* x, T* y, int64_t n, const T* lo_in, const T* hi_in, T lo_attr, T hi_attr) {
  const T lo = lo_in ? *lo_in : lo_attr, hi = hi_in ? *hi_in : hi_attr;
  GR_GRID_STRIDE(i, n) {
    const T up = x[i] < lo ? lo : x[i];
    y[i] = hi < up ? hi : up;
  }
}

void clip_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  const int64_t n = X.numel();
  const bool attrs = ctx.opset() < 11;
  for (int i = 1; i <= 2 && !attrs; ++i) {
    if (!ctx.has_input(i)) continue;
    const Tensor& b = ctx.input(i);
    GR_CHECK(b.numel() == 1, "Clip: " << (i == 1 ? "min" : "max") << " must be a scalar, got shape " << shape_str(b.shape()));
    GR_CHECK(b.dtype() == X.dtype(), "Clip: " << (i == 1 ? "min" : "max") << " is " << dtype_name(b.dtype())
                                              << " but the input is " << dtype_name(X.dtype()));
  }
  if (n == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if (attrs) {
      lo = static_cast<T>(ctx.node().attr_f("min", -std::numeric_limits<float>::max()));
      hi = static_cast<T>(ctx.node().attr_f("max", std::numeric_limits<float>::max()));
    }
    const T* lo_in = !attrs && ctx.has_input(1) ? dptr<T>(ctx.input(1)) : nullptr;
    const T* hi_in = !attrs && ctx.has_input(2) ? dptr<T>(ctx.input(2)) : nullptr;
    clip_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<T>(Y), n, lo_in, hi_in, lo, hi);
  };
  // (uint8 and int8 too: torch narrows a quantized range with a Clip between QuantizeLinear and DequantizeLinear.)
  if (X.dtype() == DType::U8) go(uint8_t{});
  else if (X.dtype() == DType::I8) go(int8_t{});
  else dispatch_arith(X.dtype(), "Clip", go);
  GR_LAUNCH_CHECK("clip");
}

// ---- bool results and bool logic (a byte per element, as comparisons write them) ----
template <class T>
__global__ void isnan_kernel(const T* x, uint8_t* y, int64_t n) {
  GR_GRID_STRIDE(i, n) y[i] = isnan(x[i]);
}
template <class T>
__global__ void isinf_kernel(const T* x, uint8_t* y, int64_t n, bool neg, bool pos) {
  GR_GRID_STRIDE(i, n) y[i] = isinf(x[i]) && ((x[i] > T(0) && pos) || (x[i] < T(0) && neg));
}

template <bool kIsInf>
void float_test_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  Tensor& Y = ctx.output(0, X.shape(), DType::Bool);
  const int64_t n = X.numel();
  GR_CHECK(X.dtype() == DType::F32 || X.dtype() == DType::F64,
           ctx.node().op_type << " on " << dtype_name(X.dtype()) << " is not supported on CUDA");
  if (n == 0) return;
  const bool neg = ctx.node().attr_i("detect_negative", 1) != 0, pos = ctx.node().attr_i("detect_positive", 1) != 0;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsInf)
      isinf_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<uint8_t>(Y), n, neg, pos);
    else
      isnan_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<uint8_t>(Y), n);
  };
  if (X.dtype() == DType::F32) go(float{});
  else go(double{});
  GR_LAUNCH_CHECK("float_test");
}

__global__ void not_kernel(const uint8_t* x, uint8_t* y, int64_t n) {
  GR_GRID_STRIDE(i, n) y[i] = !x[i];
}
void not_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.dtype() == DType::Bool, "Not takes bool, got " << dtype_name(X.dtype()));
  Tensor& Y = ctx.output(0, X.shape(), DType::Bool);
  const int64_t n = X.numel();
  if (n == 0) return;
  not_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<uint8_t>(X), dptr<uint8_t>(Y), n);
  GR_LAUNCH_CHECK("not");
}

struct AndOp { __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return a && b; } };
struct OrOp { __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return a || b; } };
struct XorOp { __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) != (b != 0); } };

template <class Op>
void logic_op(KernelContext& ctx) {
  const Tensor &A = ctx.input(0), &B = ctx.input(1);
  GR_CHECK(A.dtype() == DType::Bool && B.dtype() == DType::Bool,
           ctx.node().op_type << " takes bool inputs, got " << dtype_name(A.dtype()) << " and " << dtype_name(B.dtype()));
  Tensor& Y = ctx.output(0, broadcast_shapes({A.shape(), B.shape()}), DType::Bool);
  launch_binary<uint8_t>(ctx, A, B, Y, Op{});
}

// PRelu: x where x >= 0, slope * x elsewhere; slope broadcasts to x.
struct PReluOp { template <class T> __device__ T operator()(T v, T a) const { return v < T(0) ? static_cast<T>(a * v) : v; } };
void prelu_op(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() == 2, "PRelu takes 2 inputs, got " << ctx.num_inputs());
  run_binary(ctx, PReluOp{});
}

// ---- Where ----
template <class T>
__global__ void where_kernel(const uint8_t* c, const T* a, const T* b, T* y, IndexMap m, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t off[3];
    map_offsets(m, i, 3, off);
    y[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

void where_op(KernelContext& ctx) {
  const Tensor& C = ctx.input(0);
  const Tensor& A = ctx.input(1);
  const Tensor& B = ctx.input(2);
  GR_CHECK(C.dtype() == DType::Bool, "Where condition must be bool, got " << dtype_name(C.dtype()));
  GR_CHECK(A.dtype() == B.dtype(), "Where branches are " << dtype_name(A.dtype()) << " and " << dtype_name(B.dtype()));
  Shape out = broadcast_shapes({C.shape(), A.shape(), B.shape()});
  Tensor& Y = ctx.output(0, out, A.dtype());
  int64_t n = Y.numel();
  if (n == 0) return;
  IndexMap m = make_index_map(out, {C.shape(), A.shape(), B.shape()});
  dispatch_any(A.dtype(), [&](auto tag) {
    using T = decltype(tag);
    where_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<uint8_t>(C), dptr<T>(A), dptr<T>(B),
                                                                   dptr<T>(Y), m, n);
  });
  GR_LAUNCH_CHECK("where");
}

// ---- Cast ----
template <class S, class D>
__global__ void cast_kernel(const S* x, D* y, int64_t n) {
  GR_GRID_STRIDE(i, n) y[i] = static_cast<D>(x[i]);
}
template <class S>
__global__ void cast_to_bool_kernel(const S* x, uint8_t* y, int64_t n) {
  GR_GRID_STRIDE(i, n) y[i] = x[i] != S(0);
}

void cast_to(KernelContext& ctx, const Tensor& X, DType to) {
  Tensor& Y = ctx.output(0, X.shape(), to);
  int64_t n = X.numel();
  if (n == 0) return;
  cudaStream_t s = stream_of(ctx);
  if (to == X.dtype()) {
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), X.raw(), X.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  dispatch_any(X.dtype(), [&](auto stag) {
    using S = decltype(stag);
    const S* x = static_cast<const S*>(X.raw());
    if (to == DType::Bool) {
      cast_to_bool_kernel<S><<<grid_for(n), kThreads, 0, s>>>(x, dptr<uint8_t>(Y), n);
      return;
    }
    dispatch_any(to, [&](auto dtag) {
      using D = decltype(dtag);
      cast_kernel<S, D><<<grid_for(n), kThreads, 0, s>>>(x, static_cast<D*>(Y.raw()), n);
    });
  });
  GR_LAUNCH_CHECK("cast");
}

void cast_op(KernelContext& ctx) {
  GR_CHECK(ctx.node().has_attr("to"), "Cast: attribute 'to' is required");
  cast_to(ctx, ctx.input(0), static_cast<DType>(ctx.node().attr_i("to", 0)));
}
// CastLike(x, like): Cast to the element type of `like` (only its type is read; it stays on the device).
void cast_like_op(KernelContext& ctx) { cast_to(ctx, ctx.input(0), ctx.input(1).dtype()); }

// ---- Identity, Expand, Sum ----
void identity_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  if (X.nbytes())
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), X.raw(), X.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

template <class T>
__global__ void broadcast_copy_kernel(const T* x, T* y, IndexMap m, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t off[3];
    map_offsets(m, i, 1, off);
    y[i] = x[off[0]];
  }
}

}  // namespace

// Copies X broadcast to Y's shape (also used by Gemm's C input).
void broadcast_copy(KernelContext& ctx, const Tensor& X, Tensor& Y) {
  int64_t n = Y.numel();
  if (n == 0) return;
  IndexMap m = make_index_map(Y.shape(), {X.shape()});
  dispatch_any(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    broadcast_copy_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<const T*>(X.raw()),
                                                                           static_cast<T*>(Y.raw()), m, n);
  });
  GR_LAUNCH_CHECK("broadcast_copy");
}

namespace {

void expand_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  Shape want = host_int64s(ctx, 1);
  Shape out = broadcast_shapes({X.shape(), want});
  Tensor& Y = ctx.output(0, out, X.dtype());
  broadcast_copy(ctx, X, Y);
}

void sum_op(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() >= 1, "Sum needs at least one input");
  std::vector<Shape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.input(i).shape());
  Shape out = broadcast_shapes(shapes);
  DType dt = ctx.input(0).dtype();
  GR_CHECK(dt == DType::F32, "Sum on CUDA takes f32, got " << dtype_name(dt));
  Tensor& Y = ctx.output(0, out, dt);
  broadcast_copy(ctx, ctx.input(0), Y);
  int64_t n = Y.numel();
  for (int i = 1; i < ctx.num_inputs() && n; ++i) {
    const Tensor& X = ctx.input(i);
    GR_CHECK(X.dtype() == dt, "Sum inputs differ in type");
    // Y = Y + X, elementwise in Y's order: reading Y[i] before writing Y[i] in the same thread is safe.
    IndexMap m = make_index_map(out, {out, X.shape()});
    binary_broadcast<float, float, AddOp><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        dptr<float>(Y), dptr<float>(X), dptr<float>(Y), m, n, AddOp{});
    GR_LAUNCH_CHECK("sum");
  }
}

// Max and Min are variadic (one or more inputs, all broadcast together), like Sum.
// The output of a variadic op (Max, Min, Mean): its inputs broadcast together, all of input 0's type, holding
// input 0 broadcast; fold_later_inputs then applies Op with each later input, in order.
Tensor& variadic_output(KernelContext& ctx) {
  const int k = ctx.num_inputs();
  GR_CHECK(k >= 1, ctx.node().op_type << " needs at least one input");
  std::vector<Shape> shapes;
  for (int i = 0; i < k; ++i) {
    GR_CHECK(ctx.input(i).dtype() == ctx.input(0).dtype(), ctx.node().op_type << " inputs differ in type");
    shapes.push_back(ctx.input(i).shape());
  }
  Tensor& Y = ctx.output(0, broadcast_shapes(shapes), ctx.input(0).dtype());
  broadcast_copy(ctx, ctx.input(0), Y);
  return Y;
}
template <class T, class Op>
void fold_later_inputs(KernelContext& ctx, Tensor& Y) {
  const int64_t n = Y.numel();
  for (int i = 1; i < ctx.num_inputs() && n; ++i) {
    IndexMap m = make_index_map(Y.shape(), {Y.shape(), ctx.input(i).shape()});
    binary_broadcast<T, T, Op><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(Y), dptr<T>(ctx.input(i)), dptr<T>(Y),
                                                                             m, n, Op{});
    GR_LAUNCH_CHECK("variadic");
  }
}

template <class Op>
void variadic_kernel(KernelContext& ctx) {
  if (ctx.num_inputs() == 2) {
    run_binary(ctx, Op{});
    return;
  }
  Tensor& Y = variadic_output(ctx);
  dispatch_arith(Y.dtype(), ctx.node().op_type, [&](auto tag) { fold_later_inputs<decltype(tag), Op>(ctx, Y); });
}

// Mean: the inputs summed in order as Sum does, then times 1/k (the CPU's rounding).
template <class T>
__global__ void scale_kernel(T* y, int64_t n, T s) {
  GR_GRID_STRIDE(i, n) y[i] *= s;
}
void mean_op(KernelContext& ctx) {
  const int k = ctx.num_inputs();
  GR_CHECK(k >= 1, "Mean needs at least one input");
  const DType dt = ctx.input(0).dtype();
  GR_CHECK(dt == DType::F32 || dt == DType::F64, "Mean on CUDA takes f32 or f64, got " << dtype_name(dt));
  Tensor& Y = variadic_output(ctx);
  const int64_t n = Y.numel();
  if (n == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    fold_later_inputs<T, AddOp>(ctx, Y);
    if (k > 1) scale_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(Y), n, T(1) / T(k));
  };
  if (dt == DType::F32) go(float{});
  else go(double{});
  GR_LAUNCH_CHECK("mean");
}

// Mod: fmod for floats (fmod=1 required, as on the CPU); for integers the remainder takes the divisor's
// sign unless fmod=1 (C's, the dividend's). A zero integer divisor gives 0: the device cannot raise
// (the CPU kernel reports it).
struct FmodOp {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return fmod(a, b);
    else return b == T(0) ? T(0) : static_cast<T>(a % b);
  }
};
struct PyModOp {
  template <class T> __device__ T operator()(T a, T b) const {
    if (b == T(0)) return T(0);
    T r = static_cast<T>(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    return r;
  }
};
void mod_op(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() == 2, "Mod takes 2 inputs, got " << ctx.num_inputs());
  const bool fmod = ctx.node().attr_i("fmod", 0) != 0;
  const DType dt = ctx.input(0).dtype();
  if (dt == DType::F32 || dt == DType::F64) {
    GR_CHECK(fmod, "Mod: floating-point inputs need fmod=1");
    run_binary(ctx, FmodOp{});
  } else if (fmod) {
    run_binary(ctx, FmodOp{});
  } else {
    const Tensor &A = ctx.input(0), &B = ctx.input(1);
    GR_CHECK(A.dtype() == B.dtype(), "Mod: inputs are " << dtype_name(A.dtype()) << " and " << dtype_name(B.dtype()));
    Tensor& Y = ctx.output(0, broadcast_shapes({A.shape(), B.shape()}), dt);
    if (dt == DType::I64) launch_binary<int64_t>(ctx, A, B, Y, PyModOp{});
    else if (dt == DType::I32) launch_binary<int32_t>(ctx, A, B, Y, PyModOp{});
    else GR_FAIL("Mod on " << dtype_name(dt) << " is not supported on CUDA");
  }
}

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between, computed in double as on the CPU.
struct ShrinkOp {
  double lambd = 0.5, bias = 0;
  template <class T> __device__ T operator()(T v) const {
    const double d = static_cast<double>(v);
    return static_cast<T>(d < -lambd ? d + bias : (d > lambd ? d - bias : 0.0));
  }
};
void shrink_op(KernelContext& ctx) {
  unary_with<ShrinkOp, true>(ctx, ShrinkOp{ctx.node().attr_f("lambd", 0.5f), ctx.node().attr_f("bias", 0.0f)});
}

// BitShift on unsigned integers; a shift by the type's width or more gives 0 (as on the CPU).
struct ShiftOp {
  bool left = true;
  template <class T> __device__ T operator()(T x, T s) const {
    const T bits = static_cast<T>(sizeof(T) * 8);
    if (s >= bits) return T(0);
    return left ? static_cast<T>(x << s) : static_cast<T>(x >> s);
  }
};
void bitshift_op(KernelContext& ctx) {
  const Tensor &A = ctx.input(0), &B = ctx.input(1);
  GR_CHECK(A.dtype() == B.dtype(), "BitShift: inputs are " << dtype_name(A.dtype()) << " and " << dtype_name(B.dtype()));
  const std::string dir = ctx.node().attr_s("direction", "");
  GR_CHECK(dir == "LEFT" || dir == "RIGHT", "BitShift: direction must be LEFT or RIGHT, got '" << dir << "'");
  Tensor& Y = ctx.output(0, broadcast_shapes({A.shape(), B.shape()}), A.dtype());
  const ShiftOp op{dir == "LEFT"};
  switch (A.dtype()) {
    case DType::U8: launch_binary<uint8_t>(ctx, A, B, Y, op); break;
    case DType::U16: launch_binary<uint16_t>(ctx, A, B, Y, op); break;
    case DType::U32: launch_binary<uint32_t>(ctx, A, B, Y, op); break;
    case DType::U64: launch_binary<uint64_t>(ctx, A, B, Y, op); break;
    default: GR_FAIL("BitShift: element type " << dtype_name(A.dtype()) << " is not supported (unsigned ints)");
  }
}

}  // namespace

GR_REGISTER_OPS(elementwise) {
  ops.op("Add").cuda(locked<binary_kernel<AddOp>>);
  ops.op(kGraphrunDomain, "FusedAdd").cuda(locked<fused_add_op>);
  ops.op("Sub").cuda(locked<binary_kernel<SubOp>>);
  ops.op("Mul").cuda(locked<binary_kernel<MulOp>>);
  ops.op("Div").cuda(locked<binary_kernel<DivOp>>);
  ops.op("Max").cuda(locked<variadic_kernel<MaxOp>>);
  ops.op("Min").cuda(locked<variadic_kernel<MinOp>>);
  ops.op("Greater").cuda(locked<binary_kernel<GreaterOp>>);
  ops.op("Less").cuda(locked<binary_kernel<LessOp>>);
  ops.op("GreaterOrEqual").cuda(locked<binary_kernel<GreaterEqOp>>);
  ops.op("LessOrEqual").cuda(locked<binary_kernel<LessEqOp>>);
  ops.op("Equal").cuda(locked<binary_kernel<EqualOp>>);
  ops.op("Pow").cuda(locked<pow_kernel_host>);
  ops.op("Relu").cuda(locked<unary<ReluOp, true>>);
  ops.op("Neg").cuda(locked<unary<NegOp, true>>);
  ops.op("Abs").cuda(locked<unary<AbsOp, true>>);
  ops.op("Exp").cuda(locked<unary<ExpOp, false>>);
  ops.op("Log").cuda(locked<unary<LogOp, false>>);
  ops.op("Sqrt").cuda(locked<unary<SqrtOp, false>>);
  ops.op("Tanh").cuda(locked<unary<TanhOp, false>>);
  ops.op("Sigmoid").cuda(locked<unary<SigmoidOp, false>>);
  ops.op("Reciprocal").cuda(locked<unary<ReciprocalOp, false>>);
  ops.op("Floor").cuda(locked<unary<FloorOp, false>>);
  ops.op("Ceil").cuda(locked<unary<CeilOp, false>>);
  ops.op("Sign").cuda(locked<unary<SignOp, true>>);
  ops.op("Erf").cuda(locked<unary<ErfOp, false>>);
  ops.op("Softplus").cuda(locked<unary<SoftplusOp, false>>);
  ops.op("Round").cuda(locked<unary<RoundOp, false>>);
  ops.op("Sin").cuda(locked<unary<SinOp, false>>);
  ops.op("Cos").cuda(locked<unary<CosOp, false>>);
  ops.op("Tan").cuda(locked<unary<TanOp, false>>);
  ops.op("Asin").cuda(locked<unary<AsinOp, false>>);
  ops.op("Acos").cuda(locked<unary<AcosOp, false>>);
  ops.op("Atan").cuda(locked<unary<AtanOp, false>>);
  ops.op("Sinh").cuda(locked<unary<SinhOp, false>>);
  ops.op("Cosh").cuda(locked<unary<CoshOp, false>>);
  ops.op("Asinh").cuda(locked<unary<AsinhOp, false>>);
  ops.op("Acosh").cuda(locked<unary<AcoshOp, false>>);
  ops.op("Atanh").cuda(locked<unary<AtanhOp, false>>);
  ops.op("Softsign").cuda(locked<unary<SoftsignOp, false>>);
  ops.op("HardSwish").cuda(locked<unary<HardSwishOp, false>>);
  ops.op("LeakyRelu").cuda(locked<leaky_relu_op>);
  ops.op("Elu").cuda(locked<elu_op>);
  ops.op("HardSigmoid").cuda(locked<hard_sigmoid_op>);
  ops.op("Selu").cuda(locked<selu_op>);
  ops.op("ThresholdedRelu").cuda(locked<thresholded_relu_op>);
  ops.op("Celu").cuda(locked<celu_op>);
  ops.op("Clip").cuda(locked<clip_op>);
  ops.op("IsNaN").cuda(locked<float_test_op<false>>);
  ops.op("IsInf").cuda(locked<float_test_op<true>>);
  ops.op("Not").cuda(locked<not_op>);
  ops.op("And").cuda(locked<logic_op<AndOp>>);
  ops.op("Or").cuda(locked<logic_op<OrOp>>);
  ops.op("Xor").cuda(locked<logic_op<XorOp>>);
  ops.op("PRelu").cuda(locked<prelu_op>);
  ops.op("Where").cuda(locked<where_op>);
  ops.op("Cast").cuda(locked<cast_op>);
  ops.op("Identity").cuda(locked<identity_op>);
  ops.op(kGraphrunDomain, "StopGradient").cuda(locked<identity_op>);
  ops.op("Expand").cuda(locked<expand_op>);
  ops.op("Sum").cuda(locked<sum_op>);
  ops.op("Mean").cuda(locked<mean_op>);
  ops.op("Mod").cuda(locked<mod_op>);
  ops.op("Shrink").cuda(locked<shrink_op>);
  ops.op("CastLike").cuda(locked<cast_like_op>);
  ops.op("BitShift").cuda(locked<bitshift_op>);
}

}  // namespace graphrun::runtime::cuda
