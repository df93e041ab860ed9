// CPU kernels: elementwise family — broadcasting binary and variadic arithmetic, unary math,
// comparisons and logic, Where, Clip and Cast. Templates so every float op also runs in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "graph/half.h"
#include "runtime/kernels/cpu/gemm.h"
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"

namespace graphrun::runtime::cpu {
namespace {

const char* op_name(const KernelContext& ctx) { return ctx.node().op_type.c_str(); }

// y = op(a, b) over a broadcast plan of (a, b); y is contiguous in the plan's output shape.
template <class A, class B, class R, class Op>
void binary_apply(const KernelContext& ctx, const BroadcastPlan& p, const A* pa, const B* pb, R* py, Op op) {
  const int64_t inner = p.inner(), rows = p.rows();
  const int64_t sa = p.strides[0].back(), sb = p.strides[1].back();
  // `omp simd`: -O2's cost model leaves loops with a remainder scalar; these are the hot ones.
  auto run = [&](const A* x, const B* z, R* o, int64_t n) {
    if (sa && sb) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = op(x[i], z[i]);
    } else if (sa) {
      const B v = z[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = op(x[i], v);
    } else if (sb) {
      const A v = x[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = op(v, z[i]);
    } else {
      const R v = op(x[0], z[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    }
  };
  const int th = threads_for(ctx, rows * inner);
  if (rows == 1) {
    if (th <= 1) {
      run(pa, pb, py, inner);
      return;
    }
#pragma omp parallel for num_threads(th) schedule(static)
    for (int t = 0; t < th; ++t) {
      int64_t b0 = inner * t / th, b1 = inner * (t + 1) / th;
      run(pa + b0 * sa, pb + b0 * sb, py + b0, b1 - b0);
    }
    return;
  }
  for_each_row(p, th, [&](int64_t r, const int64_t* off) { run(pa + off[0], pb + off[1], py + r * inner, inner); });
}

template <class A, class B, class R, class Op>
void binary(KernelContext& ctx, const Tensor& a, const Tensor& b, DType out_dtype, Op op) {
  Shape out = broadcast_shapes({&a.shape(), &b.shape()}, op_name(ctx));
  Tensor& y = ctx.output(0, out, out_dtype);
  if (y.numel() == 0) return;
  BroadcastPlan p = make_broadcast_plan({&a.shape(), &b.shape()}, out);
  binary_apply<A, B, R>(ctx, p, ptr<A>(a), ptr<B>(b), ptr<R>(y), op);
}

void check_same_dtype(const KernelContext& ctx, const Tensor& a, const Tensor& b) {
  GR_CHECK(a.dtype() == b.dtype(), op_name(ctx) << ": input element types differ (" << dtype_name(a.dtype())
                                                << " and " << dtype_name(b.dtype()) << ")");
}

enum class Arith { Add, Sub, Mul, Div, Max, Min };

template <class T> struct ArithOp {
  Arith k;
  T operator()(T a, T b) const {
    switch (k) {
      case Arith::Add: return static_cast<T>(a + b);
      case Arith::Sub: return static_cast<T>(a - b);
      case Arith::Mul: return static_cast<T>(a * b);
      case Arith::Div: return static_cast<T>(a / b);
      case Arith::Max:
        if constexpr (std::is_floating_point_v<T>) { if (std::isnan(a) || std::isnan(b)) return a + b; }
        return a < b ? b : a;
      case Arith::Min:
        if constexpr (std::is_floating_point_v<T>) { if (std::isnan(a) || std::isnan(b)) return a + b; }
        return b < a ? b : a;
    }
    return a;
  }
};

// The switch is hoisted out of the loops by instantiating one lambda per op.
template <class T, class F> void with_arith(Arith k, F&& f) {
  switch (k) {
    case Arith::Add: f([](T a, T b) { return static_cast<T>(a + b); }); break;
    case Arith::Sub: f([](T a, T b) { return static_cast<T>(a - b); }); break;
    case Arith::Mul: f([](T a, T b) { return static_cast<T>(a * b); }); break;
    case Arith::Div: f([](T a, T b) { return static_cast<T>(a / b); }); break;
    case Arith::Max: f(ArithOp<T>{Arith::Max}); break;
    case Arith::Min: f(ArithOp<T>{Arith::Min}); break;
  }
}

template <class T> void check_int_divisor(const Tensor& b) {
  if constexpr (std::is_integral_v<T>) {
    const T* p = ptr<T>(b);
    for (int64_t i = 0; i < b.numel(); ++i) GR_CHECK(p[i] != 0, "integer division by zero");
  }
}

template <Arith K> void arith_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  check_same_dtype(ctx, a, b);
  dispatch_numeric(a.dtype(), op_name(ctx), [&](auto tag) {
    using T = decltype(tag);
    if (K == Arith::Div) check_int_divisor<T>(b);
    with_arith<T>(K, [&](auto op) { binary<T, T, T>(ctx, a, b, a.dtype(), op); });
  });
}

// FusedAdd(A, B) = Relu(Add(A, B)) bit for bit (internal: pass fuse_relu_bn_add, ResNet's residual join):
// Add's rounding, then the Relu kernel's v < 0 ? 0 : v (NaN passes), in one pass over memory.
void fused_add_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  check_same_dtype(ctx, a, b);
  check_fused_activation(ctx.node());
  dispatch_float(a.dtype(), "FusedAdd", [&](auto tag) {
    using T = decltype(tag);
    binary<T, T, T>(ctx, a, b, a.dtype(), [](T x, T z) {
      const T v = static_cast<T>(x + z);
      return v < T(0) ? T(0) : v;
    });
  });
}

// Sum, Mean, Max, Min over one or more inputs, all broadcast together; y has the broadcast shape.
template <Arith K, bool kMean>
void variadic_into(const KernelContext& ctx, const std::vector<const Tensor*>& xs, Tensor& y) {
  const int n = static_cast<int>(xs.size());
  const Shape& out = y.shape();
  const Tensor& x0 = *xs[0];
  auto body = [&](auto tag) {
    using T = decltype(tag);
    with_arith<T>(K, [&](auto op) {
      if (n == 1) {
        BroadcastPlan p = make_broadcast_plan({&x0.shape(), &x0.shape()}, out);
        binary_apply<T, T, T>(ctx, p, ptr<T>(x0), ptr<T>(x0), ptr<T>(y), [](T a, T) { return a; });
      } else {
        const Tensor& x1 = *xs[1];
        BroadcastPlan p = make_broadcast_plan({&x0.shape(), &x1.shape()}, out);
        binary_apply<T, T, T>(ctx, p, ptr<T>(x0), ptr<T>(x1), ptr<T>(y), op);
      }
      for (int i = 2; i < n; ++i) {
        const Tensor& xi = *xs[i];
        BroadcastPlan p = make_broadcast_plan({&out, &xi.shape()}, out);
        binary_apply<T, T, T>(ctx, p, ptr<T>(y), ptr<T>(xi), ptr<T>(y), op);
      }
      if constexpr (kMean) {
        T* py = ptr<T>(y);
        const T inv = T(1) / T(n);
        for (int64_t i = 0; i < y.numel(); ++i) py[i] *= inv;
      }
    });
  };
  if constexpr (kMean) dispatch_float(x0.dtype(), op_name(ctx), body);
  else dispatch_numeric(x0.dtype(), op_name(ctx), body);
}

template <Arith K, bool kMean> void variadic_kernel(KernelContext& ctx) {
  const int n = ctx.num_inputs();
  GR_CHECK(n >= 1, op_name(ctx) << ": needs at least one input");
  std::vector<const Shape*> shapes;
  std::vector<const Tensor*> xs;
  for (int i = 0; i < n; ++i) {
    check_same_dtype(ctx, ctx.input(0), ctx.input(i));
    shapes.push_back(&ctx.input(i).shape());
    xs.push_back(&ctx.input(i));
  }
  Shape out = broadcast_shapes(shapes, op_name(ctx));
  Tensor& y = ctx.output(0, out, xs[0]->dtype());
  if (y.numel() == 0) return;
  variadic_into<K, kMean>(ctx, xs, y);
}

void pow_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  dispatch_numeric(a.dtype(), "Pow", [&](auto ta) {
    using A = decltype(ta);
    dispatch_numeric(b.dtype(), "Pow exponent", [&](auto tb) {
      using B = decltype(tb);
      binary<A, B, A>(ctx, a, b, a.dtype(), [](A x, B e) {
        if constexpr (std::is_same_v<A, float> && std::is_same_v<B, float>) return std::pow(x, e);
        else return static_cast<A>(std::pow(static_cast<double>(x), static_cast<double>(e)));
      });
    });
  });
}

enum class Cmp { Eq, Gt, Ge, Lt, Le };

template <Cmp K> void compare_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  check_same_dtype(ctx, a, b);
  dispatch_numeric_bool(a.dtype(), op_name(ctx), [&](auto tag) {
    using T = decltype(tag);
    binary<T, T, bool>(ctx, a, b, DType::Bool, [](T x, T y) {
      if constexpr (K == Cmp::Eq) return x == y;
      else if constexpr (K == Cmp::Gt) return x > y;
      else if constexpr (K == Cmp::Ge) return x >= y;
      else if constexpr (K == Cmp::Lt) return x < y;
      else return x <= y;
    });
  });
}

enum class Logic { And, Or, Xor };

template <Logic K> void logic_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  check_bool(a, op_name(ctx));
  check_bool(b, op_name(ctx));
  binary<bool, bool, bool>(ctx, a, b, DType::Bool, [](bool x, bool y) {
    if constexpr (K == Logic::And) return x && y;
    else if constexpr (K == Logic::Or) return x || y;
    else return x != y;
  });
}

// ---- unary ----

template <class T, class In, class F> void unary_map(const KernelContext& ctx, const In* x, T* y, int64_t n, F f) {
  const int th = threads_for(ctx, n);
  if (th <= 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
    return;
  }
#pragma omp parallel for simd num_threads(th) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

enum class Un {
  Neg, Abs, Exp, Log, Sqrt, Reciprocal, Relu, Sigmoid, Tanh, Sign, Floor, Ceil, Erf, Softplus, Round,
  Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Softsign, HardSwish
};

template <class T, Un K> T unary_fn(T v) {
  if constexpr (K == Un::Neg) return static_cast<T>(-v);
  else if constexpr (K == Un::Abs) { if constexpr (std::is_unsigned_v<T>) return v; else return v < 0 ? static_cast<T>(-v) : v; }
  else if constexpr (K == Un::Relu) return v < T(0) ? T(0) : v;  // NaN stays NaN, as in PyTorch
  else if constexpr (K == Un::Sign) return static_cast<T>(v > T(0) ? 1 : (v < T(0) ? -1 : 0));
  else if constexpr (K == Un::Exp) return std::exp(v);
  else if constexpr (K == Un::Log) return std::log(v);
  else if constexpr (K == Un::Sqrt) return std::sqrt(v);
  else if constexpr (K == Un::Reciprocal) return T(1) / v;
  else if constexpr (K == Un::Sigmoid) {
    // exp of a non-positive number only: no overflow for large |v|.
    if (v >= T(0)) return T(1) / (T(1) + std::exp(-v));
    T e = std::exp(v);
    return e / (T(1) + e);
  } else if constexpr (K == Un::Tanh) return std::tanh(v);
  else if constexpr (K == Un::Floor) return std::floor(v);
  else if constexpr (K == Un::Ceil) return std::ceil(v);
  else if constexpr (K == Un::Erf) return std::erf(v);
  else if constexpr (K == Un::Softplus) return v > T(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
  else if constexpr (K == Un::Sin) return std::sin(v);
  else if constexpr (K == Un::Cos) return std::cos(v);
  else if constexpr (K == Un::Tan) return std::tan(v);
  else if constexpr (K == Un::Asin) return std::asin(v);
  else if constexpr (K == Un::Acos) return std::acos(v);
  else if constexpr (K == Un::Atan) return std::atan(v);
  else if constexpr (K == Un::Sinh) return std::sinh(v);
  else if constexpr (K == Un::Cosh) return std::cosh(v);
  else if constexpr (K == Un::Asinh) return std::asinh(v);
  else if constexpr (K == Un::Acosh) return std::acosh(v);
  else if constexpr (K == Un::Atanh) return std::atanh(v);
  else if constexpr (K == Un::Softsign) return v / (T(1) + std::fabs(v));
  else if constexpr (K == Un::HardSwish) return v * std::max(T(0), std::min(T(1), v / T(6) + T(0.5)));
  else return std::nearbyint(v);  // Round: half to even under the default rounding mode
}

// Float ops by Eigen's vectorised functions, `f` mapping an Eigen array expression of x to y's. Eigen computes the
// elements before an aligned address and after the last whole vector of a range with its scalar functions, whose
// bits may differ from the vectors' (log1p's do), so each block of 64 is copied into an aligned buffer (the last
// padded) and computed there whole: an element gets the same bits wherever it falls, on any number of threads. The
// range is split into one contiguous part per thread.
template <typename F>
void eigen_unary(const KernelContext& ctx, const float* x, float* y, int64_t n, F f) {
  constexpr int64_t kBlock = 64;
  using Block = Eigen::Array<float, kBlock, 1>;
  auto part = [&](int64_t b, int64_t e) {
    alignas(64) float in[kBlock], out[kBlock];
    for (int64_t i = b; i < e; i += kBlock) {
      const int64_t m = std::min(kBlock, e - i);
      std::copy(x + i, x + i + m, in);
      std::fill(in + m, in + kBlock, 0.f);
      Eigen::Map<Block, Eigen::Aligned64> dst(out);
      dst = f(Eigen::Map<const Block, Eigen::Aligned64>(in));
      std::copy(out, out + m, y + i);
    }
  };
  const int th = threads_for(ctx, n);
  if (th <= 1) {
    part(0, n);
    return;
  }
  const int64_t chunk = (n + th - 1) / th;
#pragma omp parallel for num_threads(th) schedule(static)
  for (int t = 0; t < th; ++t) {
    const int64_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
    if (b < e) part(b, e);
  }
}

// Float Tanh by Eigen's rational approximation: within 5 ulp (2.9e-7) of the exact value over the whole range, NaN,
// infinities and -0 as std::tanh gives them; 40x glibc's scalar tanhf (0.28 against 11.5 ns per element, AVX2).
// PyTorch's CPU tanh is Sleef's, within 1 ulp.
void fast_tanh(const KernelContext& ctx, const float* x, float* y, int64_t n) {
  eigen_unary(ctx, x, y, n, [](const auto& a) { return a.tanh(); });
}

// Float Softplus as the scalar form computes it, max(x, 0) + log1p(exp(-|x|)), with Eigen's vectorised exp and
// log1p: within 2.3 ulp of the exact value built for AVX2, 4.4 for AVX-512
// (Elementwise.FloatSoftplusIsWithinAFewUlpOfTheExactValue; below x = -87.3, where the exact value is subnormal,
// Eigen's exp gives at most 2.9e-39), NaN and +inf kept. A VAE's reconstruction term spent 22% of its step in the
// scalar one.
void fast_softplus(const KernelContext& ctx, const float* x, float* y, int64_t n) {
  eigen_unary(ctx, x, y, n, [](const auto& a) { return a.max(0.f) + (-a.abs()).exp().log1p(); });
}

// kInts: the op is defined on signed integers too (Neg, Abs, Sign, Relu).
template <Un K, bool kInts> void unary_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  auto body = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (K == Un::Tanh && std::is_same_v<T, float>) {
      fast_tanh(ctx, ptr<T>(x), ptr<T>(y), x.numel());
      return;
    }
    if constexpr (K == Un::Softplus && std::is_same_v<T, float>) {
      fast_softplus(ctx, ptr<T>(x), ptr<T>(y), x.numel());
      return;
    }
    // A lambda, not a function pointer, so the call inlines and the loop vectorises.
    unary_map(ctx, ptr<T>(x), ptr<T>(y), x.numel(), [](T v) { return unary_fn<T, K>(v); });
  };
  if constexpr (kInts) dispatch_numeric(x.dtype(), op_name(ctx), body);
  else dispatch_float(x.dtype(), op_name(ctx), body);
}

void leaky_relu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const double alpha = ctx.node().attr_f("alpha", 0.01f);
  dispatch_float(x.dtype(), "LeakyRelu", [&](auto tag) {
    using T = decltype(tag);
    const T a = static_cast<T>(alpha);
    unary_map(ctx, ptr<T>(x), ptr<T>(y), x.numel(), [a](T v) { return v >= T(0) ? v : a * v; });
  });
}

void elu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const double alpha = ctx.node().attr_f("alpha", 1.0f);
  dispatch_float(x.dtype(), "Elu", [&](auto tag) {
    using T = decltype(tag);
    const T a = static_cast<T>(alpha);
    unary_map(ctx, ptr<T>(x), ptr<T>(y), x.numel(), [a](T v) { return v >= T(0) ? v : a * (std::exp(v) - T(1)); });
  });
}

// Activations with float attributes: f(v, a, b) with a, b read from the node (defaults per ONNX).
template <class F> void activation(KernelContext& ctx, const char* a_name, float a_def, const char* b_name, float b_def, F f) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const double a = ctx.node().attr_f(a_name, a_def), b = b_name ? ctx.node().attr_f(b_name, b_def) : 0.0;
  dispatch_float(x.dtype(), op_name(ctx), [&](auto tag) {
    using T = decltype(tag);
    const T ta = static_cast<T>(a), tb = static_cast<T>(b);
    unary_map(ctx, ptr<T>(x), ptr<T>(y), x.numel(), [&](T v) { return f(v, ta, tb); });
  });
}

void hard_sigmoid_kernel(KernelContext& ctx) {
  activation(ctx, "alpha", 0.2f, "beta", 0.5f, [](auto v, auto a, auto b) {
    using T = decltype(v);
    return std::max(T(0), std::min(T(1), a * v + b));
  });
}
void selu_kernel(KernelContext& ctx) {
  activation(ctx, "alpha", 1.67326319217681884765625f, "gamma", 1.05070102214813232421875f, [](auto v, auto a, auto g) {
    using T = decltype(v);
    return v > T(0) ? g * v : g * (a * std::exp(v) - a);
  });
}
void thresholded_relu_kernel(KernelContext& ctx) {
  activation(ctx, "alpha", 1.0f, nullptr, 0, [](auto v, auto a, auto) { return v > a ? v : decltype(v)(0); });
}
void celu_kernel(KernelContext& ctx) {
  activation(ctx, "alpha", 1.0f, nullptr, 0, [](auto v, auto a, auto) {
    using T = decltype(v);
    return std::max(T(0), v) + std::min(T(0), a * (std::exp(v / a) - T(1)));
  });
}
void shrink_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const double lambd = ctx.node().attr_f("lambd", 0.5f), bias = ctx.node().attr_f("bias", 0.0f);
  dispatch_signed(x.dtype(), "Shrink", [&](auto tag) {
    using T = decltype(tag);
    unary_map(ctx, ptr<T>(x), ptr<T>(y), x.numel(), [&](T v) {
      const double d = static_cast<double>(v);
      return static_cast<T>(d < -lambd ? d + bias : (d > lambd ? d - bias : 0.0));
    });
  });
}

void isinf_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), DType::Bool);
  const bool neg = ctx.node().attr_i("detect_negative", 1) != 0, pos = ctx.node().attr_i("detect_positive", 1) != 0;
  dispatch_float(x.dtype(), "IsInf", [&](auto tag) {
    using T = decltype(tag);
    unary_map(ctx, ptr<T>(x), ptr<bool>(y), x.numel(),
              [&](T v) { return std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg)); });
  });
}

// PRelu: y = x where x >= 0, slope * x elsewhere; slope broadcasts to x (unidirectionally).
void prelu_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &slope = ctx.input(1);
  check_same_dtype(ctx, x, slope);
  dispatch_signed(x.dtype(), "PRelu", [&](auto tag) {
    using T = decltype(tag);
    binary<T, T, T>(ctx, x, slope, x.dtype(), [](T v, T a) { return v < T(0) ? static_cast<T>(a * v) : v; });
  });
}

// Mod: integer remainder takes the divisor's sign (Python) unless fmod=1 (C, the dividend's sign).
void mod_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  check_same_dtype(ctx, a, b);
  const bool fmod = ctx.node().attr_i("fmod", 0) != 0;
  dispatch_numeric(a.dtype(), "Mod", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      GR_CHECK(fmod, "Mod: floating-point inputs need fmod=1");
      binary<T, T, T>(ctx, a, b, a.dtype(), [](T x, T y) { return std::fmod(x, y); });
    } else {
      check_int_divisor<T>(b);
      if (fmod) {
        binary<T, T, T>(ctx, a, b, a.dtype(), [](T x, T y) { return static_cast<T>(x % y); });
      } else {
        binary<T, T, T>(ctx, a, b, a.dtype(), [](T x, T y) {
          T r = static_cast<T>(x % y);
          if constexpr (std::is_signed_v<T>) {
            if (r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
          }
          return r;
        });
      }
    }
  });
}

void bitshift_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  check_same_dtype(ctx, a, b);
  const std::string dir = ctx.node().attr_s("direction", "");
  GR_CHECK(dir == "LEFT" || dir == "RIGHT", "BitShift: direction must be LEFT or RIGHT, got '" << dir << "'");
  auto body = [&](auto tag) {
    using T = decltype(tag);
    const int bits = static_cast<int>(sizeof(T) * 8);
    if (dir == "LEFT")
      binary<T, T, T>(ctx, a, b, a.dtype(), [bits](T x, T s) { return s >= static_cast<T>(bits) ? T(0) : static_cast<T>(x << s); });
    else
      binary<T, T, T>(ctx, a, b, a.dtype(), [bits](T x, T s) { return s >= static_cast<T>(bits) ? T(0) : static_cast<T>(x >> s); });
  };
  switch (a.dtype()) {
    case DType::U8: body(uint8_t{}); break;
    case DType::U16: body(uint16_t{}); break;
    case DType::U32: body(uint32_t{}); break;
    case DType::U64: body(uint64_t{}); break;
    default: GR_FAIL("BitShift: element type " << dtype_name(a.dtype()) << " is not supported (unsigned ints)");
  }
}

void not_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  check_bool(x, "Not");
  Tensor& y = ctx.output(0, x.shape(), DType::Bool);
  unary_map(ctx, ptr<bool>(x), ptr<bool>(y), x.numel(), [](bool v) { return !v; });
}

void isnan_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), DType::Bool);
  dispatch_float(x.dtype(), "IsNaN", [&](auto tag) {
    using T = decltype(tag);
    unary_map(ctx, ptr<T>(x), ptr<bool>(y), x.numel(), [](T v) { return std::isnan(v); });
  });
}

void identity_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  if (x.nbytes() && y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
}

void clip_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  dispatch_numeric(x.dtype(), "Clip", [&](auto tag) {
    using T = decltype(tag);
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if (ctx.opset() < 11) {
      lo = static_cast<T>(ctx.node().attr_f("min", -std::numeric_limits<float>::max()));
      hi = static_cast<T>(ctx.node().attr_f("max", std::numeric_limits<float>::max()));
    } else {
      for (int i = 1; i <= 2; ++i) {
        if (!ctx.has_input(i)) continue;
        const Tensor& b = ctx.input(i);
        GR_CHECK(b.numel() == 1, "Clip: " << (i == 1 ? "min" : "max") << " must be a scalar, got shape "
                                          << shape_str(b.shape()));
        GR_CHECK(b.dtype() == x.dtype(), "Clip: " << (i == 1 ? "min" : "max") << " is " << dtype_name(b.dtype())
                                                  << " but the input is " << dtype_name(x.dtype()));
        (i == 1 ? lo : hi) = ptr<T>(b)[0];
      }
    }
    // min(hi, max(lo, v)): when min > max every value becomes max, as ONNX specifies; NaN stays NaN.
    unary_map(ctx, ptr<T>(x), ptr<T>(y), x.numel(), [lo, hi](T v) {
      const T up = v < lo ? lo : v;
      return hi < up ? hi : up;
    });
  });
}

void where_kernel(KernelContext& ctx) {
  const Tensor &c = ctx.input(0), &a = ctx.input(1), &b = ctx.input(2);
  check_bool(c, "Where condition");
  check_same_dtype(ctx, a, b);
  std::vector<const Shape*> shapes{&c.shape(), &a.shape(), &b.shape()};
  Shape out = broadcast_shapes(shapes, "Where");
  Tensor& y = ctx.output(0, out, a.dtype());
  if (y.numel() == 0) return;
  BroadcastPlan p = make_broadcast_plan(shapes, out);
  const int64_t inner = p.inner();
  const int64_t sc = p.strides[0].back(), sa = p.strides[1].back(), sb = p.strides[2].back();
  dispatch_numeric_bool(a.dtype(), "Where", [&](auto tag) {
    using T = decltype(tag);
    const bool* pc = ptr<bool>(c);
    const T *pa = ptr<T>(a), *pb = ptr<T>(b);
    T* py = ptr<T>(y);
    // The inner strides are 0 or 1; fixing them at compile time lets the common cases vectorise
    // (Relu's gradient is Where(mask, dY, 0): full, full, scalar).
    auto rows = [&](auto kc, auto ka, auto kb) {
      constexpr int64_t C = decltype(kc)::value, A = decltype(ka)::value, B = decltype(kb)::value;
      for_each_row(p, threads_for(ctx, y.numel()), [&](int64_t r, const int64_t* off) {
        const uint8_t* cc = reinterpret_cast<const uint8_t*>(pc + off[0]);
        const T *aa = pa + off[1], *bb = pb + off[2];
        T* o = py + r * inner;
        // Both sides loaded unconditionally and the mask read as bytes: a select, not a branch,
        // so the loop vectorises.
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) {
          const T av = aa[i * A], bv = bb[i * B];
          o[i] = cc[i * C] != 0 ? av : bv;
        }
      });
    };
    using one = std::integral_constant<int64_t, 1>;
    using zero = std::integral_constant<int64_t, 0>;
    if (sc && sa && sb) rows(one{}, one{}, one{});
    else if (sc && sa) rows(one{}, one{}, zero{});
    else if (sc && sb) rows(one{}, zero{}, one{});
    else if (sc) rows(one{}, zero{}, zero{});
    else
      for_each_row(p, threads_for(ctx, y.numel()), [&](int64_t r, const int64_t* off) {
        const T *aa = pa + off[1], *bb = pb + off[2];
        const bool cc = pc[off[0]];
        T* o = py + r * inner;
        for (int64_t i = 0; i < inner; ++i) o[i] = cc ? aa[i * sa] : bb[i * sb];
      });
  });
}

// ---- Cast ----

template <class To, class From> To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else return static_cast<To>(v);
}

template <class From> void cast_from(const KernelContext& ctx, const From* x, Tensor& y, int64_t n) {
  switch (y.dtype()) {
    // One rounding from the source value: float's own bit path, or exactly through long double.
    case DType::F16:
      if constexpr (std::is_same_v<From, float>) unary_map(ctx, x, ptr<uint16_t>(y), n, [](From v) { return float_to_half(v); });
      else unary_map(ctx, x, ptr<uint16_t>(y), n, [](From v) { return wide_to_half(static_cast<long double>(v)); });
      return;
    case DType::BF16:
      if constexpr (std::is_same_v<From, float>) unary_map(ctx, x, ptr<uint16_t>(y), n, [](From v) { return float_to_bf16(v); });
      else unary_map(ctx, x, ptr<uint16_t>(y), n, [](From v) { return wide_to_bf16(static_cast<long double>(v)); });
      return;
    default: break;
  }
  dispatch_numeric_bool(y.dtype(), "Cast", [&](auto tag) {
    using To = decltype(tag);
    unary_map(ctx, x, ptr<To>(y), n, [](From v) { return convert<To, From>(v); });
  });
}

void cast_to(KernelContext& ctx, const Tensor& x, DType to) {
  GR_CHECK(dtype_size(to) > 0, "Cast: cannot cast to element type " << dtype_name(to) << " (code "
                                                                    << static_cast<int>(to) << ")");
  GR_CHECK(dtype_size(x.dtype()) > 0, "Cast: cannot cast from element type " << dtype_name(x.dtype()));
  Tensor& y = ctx.output(0, x.shape(), to);
  const int64_t n = x.numel();
  if (x.dtype() == to) {
    if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return;
  }
  if (x.dtype() == DType::F16 || x.dtype() == DType::BF16) {
    float* tmp = static_cast<float*>(ctx.scratch(sizeof(float) * std::max<int64_t>(n, 1)));
    const uint16_t* src = ptr<uint16_t>(x);
    if (x.dtype() == DType::F16) for (int64_t i = 0; i < n; ++i) tmp[i] = half_to_float(src[i]);
    else for (int64_t i = 0; i < n; ++i) tmp[i] = bf16_to_float(src[i]);
    cast_from<float>(ctx, tmp, y, n);
    return;
  }
  dispatch_numeric_bool(x.dtype(), "Cast", [&](auto tag) {
    using From = decltype(tag);
    cast_from<From>(ctx, ptr<From>(x), y, n);
  });
}

void cast_kernel(KernelContext& ctx) {
  GR_CHECK(ctx.node().has_attr("to"), "Cast: attribute 'to' is required");
  cast_to(ctx, ctx.input(0), static_cast<DType>(ctx.node().attr_i("to", 0)));
}

// CastLike(x, like): Cast to the element type of `like`.
void cast_like_kernel(KernelContext& ctx) { cast_to(ctx, ctx.input(0), ctx.input(1).dtype()); }

}  // namespace

GR_REGISTER_OPS(elementwise) {
  ops.op("Add").cpu(via_f32<arith_kernel<Arith::Add>>).host_shapes();
  ops.op(kGraphrunDomain, "FusedAdd")
      .cpu(fused_add_kernel)
      .schema(OpSchemaSpec("`Relu(Add(A, B))` in one pass, A and B broadcast as Add's (internal: pass fuse_relu_bn_add "
                           "makes it of Add + Relu, e.g. a residual join; exported graphs keep those)")
                  .attr("activation", "the activation: Relu", Attribute::Str("Relu"))
                  .input("A", "as Add", "T")
                  .input("B", "as Add", "T")
                  .output("C", "Relu of A + B", "T")
                  .type("T", {"tensor(float)", "tensor(double)"}, "f32 or f64"));
  ops.op("Sub").cpu(via_f32<arith_kernel<Arith::Sub>>).host_shapes();
  ops.op("Mul").cpu(via_f32<arith_kernel<Arith::Mul>>).host_shapes();
  ops.op("Div").cpu(via_f32<arith_kernel<Arith::Div>>).host_shapes();
  ops.op("Pow").cpu(via_f32<pow_kernel>);
  ops.op("Max").cpu(via_f32<variadic_kernel<Arith::Max, false>>).host_shapes();
  ops.op("Min").cpu(via_f32<variadic_kernel<Arith::Min, false>>).host_shapes();
  ops.op("Sum").cpu(via_f32<variadic_kernel<Arith::Add, false>>);
  ops.op("Mean").cpu(via_f32<variadic_kernel<Arith::Add, true>>);

  ops.op("Neg").cpu(via_f32<unary_kernel<Un::Neg, true>>).host_shapes();
  ops.op("Abs").cpu(via_f32<unary_kernel<Un::Abs, true>>).host_shapes();
  ops.op("Sign").cpu(via_f32<unary_kernel<Un::Sign, true>>);
  ops.op("Relu").cpu(via_f32<unary_kernel<Un::Relu, true>>);
  ops.op("Exp").cpu(via_f32<unary_kernel<Un::Exp, false>>);
  ops.op("Log").cpu(via_f32<unary_kernel<Un::Log, false>>);
  ops.op("Sqrt").cpu(via_f32<unary_kernel<Un::Sqrt, false>>);
  ops.op("Reciprocal").cpu(via_f32<unary_kernel<Un::Reciprocal, false>>);
  ops.op("Sigmoid").cpu(via_f32<unary_kernel<Un::Sigmoid, false>>);
  ops.op("Tanh").cpu(via_f32<unary_kernel<Un::Tanh, false>>);
  ops.op("Floor").cpu(via_f32<unary_kernel<Un::Floor, false>>);
  ops.op("Ceil").cpu(via_f32<unary_kernel<Un::Ceil, false>>);
  ops.op("Erf").cpu(via_f32<unary_kernel<Un::Erf, false>>);
  ops.op("Softplus").cpu(via_f32<unary_kernel<Un::Softplus, false>>);
  ops.op("Round").cpu(via_f32<unary_kernel<Un::Round, false>>);
  ops.op("LeakyRelu").cpu(via_f32<leaky_relu_kernel>);
  ops.op("Elu").cpu(via_f32<elu_kernel>);
  ops.op("Clip").cpu(via_f32<clip_kernel>);
  ops.op("Identity").cpu(identity_kernel).host_shapes();
  ops.op(kGraphrunDomain, "StopGradient")
      .cpu(identity_kernel)
      .schema(OpSchemaSpec("X unchanged, and no gradient through it: torch's `.detach()` (README: \"Exporting a "
                           "PyTorch model to train\"); a saved model has an Identity in its place")
                  .input("X", "any tensor", "T")
                  .output("Y", "X", "T")
                  .type("T", numeric_tensor_types(), "numeric tensors")
                  .output_like(0, 0));
  ops.op("IsNaN").cpu(via_f32<isnan_kernel>);

  ops.op("Where").cpu(via_f32<where_kernel>).host_shapes();
  ops.op("Equal").cpu(via_f32<compare_kernel<Cmp::Eq>>).host_shapes();
  ops.op("Greater").cpu(via_f32<compare_kernel<Cmp::Gt>>).host_shapes();
  ops.op("GreaterOrEqual").cpu(via_f32<compare_kernel<Cmp::Ge>>);
  ops.op("Less").cpu(via_f32<compare_kernel<Cmp::Lt>>).host_shapes();
  ops.op("LessOrEqual").cpu(via_f32<compare_kernel<Cmp::Le>>);
  ops.op("Not").cpu(not_kernel).host_shapes();
  ops.op("And").cpu(logic_kernel<Logic::And>);
  ops.op("Or").cpu(logic_kernel<Logic::Or>);
  ops.op("Xor").cpu(logic_kernel<Logic::Xor>);
  ops.op("Cast").cpu(cast_kernel).host_shapes();
  ops.op("CastLike").cpu(cast_like_kernel);
  ops.op("Sin").cpu(via_f32<unary_kernel<Un::Sin, false>>);
  ops.op("Cos").cpu(via_f32<unary_kernel<Un::Cos, false>>);
  ops.op("Tan").cpu(via_f32<unary_kernel<Un::Tan, false>>);
  ops.op("Asin").cpu(via_f32<unary_kernel<Un::Asin, false>>);
  ops.op("Acos").cpu(via_f32<unary_kernel<Un::Acos, false>>);
  ops.op("Atan").cpu(via_f32<unary_kernel<Un::Atan, false>>);
  ops.op("Sinh").cpu(via_f32<unary_kernel<Un::Sinh, false>>);
  ops.op("Cosh").cpu(via_f32<unary_kernel<Un::Cosh, false>>);
  ops.op("Asinh").cpu(via_f32<unary_kernel<Un::Asinh, false>>);
  ops.op("Acosh").cpu(via_f32<unary_kernel<Un::Acosh, false>>);
  ops.op("Atanh").cpu(via_f32<unary_kernel<Un::Atanh, false>>);
  ops.op("Softsign").cpu(via_f32<unary_kernel<Un::Softsign, false>>);
  ops.op("HardSwish").cpu(via_f32<unary_kernel<Un::HardSwish, false>>);
  ops.op("HardSigmoid").cpu(via_f32<hard_sigmoid_kernel>);
  ops.op("Selu").cpu(via_f32<selu_kernel>);
  ops.op("ThresholdedRelu").cpu(via_f32<thresholded_relu_kernel>);
  ops.op("Celu").cpu(via_f32<celu_kernel>);
  ops.op("Shrink").cpu(via_f32<shrink_kernel>);
  ops.op("IsInf").cpu(via_f32<isinf_kernel>);
  ops.op("PRelu").cpu(via_f32<prelu_kernel>);
  ops.op("Mod").cpu(via_f32<mod_kernel>).host_shapes();
  ops.op("BitShift").cpu(bitshift_kernel);
}

}  // namespace graphrun::runtime::cpu
