// CPU kernels: reduce family — Reduce* over any set of axes, ArgMax/ArgMin, and the numerically
// stable Softmax/LogSoftmax under both ONNX axis conventions (2-D coercion before opset 13).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/kernels/cpu/exp_f32.h"
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/nan_order.h"

namespace graphrun::runtime::cpu {
namespace {

enum class Red { Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp };

// Accumulate floats in double (a mean over a large batch keeps its digits), integers as themselves.
template <class T> using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;

template <class T, Red K> Acc<T> red_init() {
  if constexpr (K == Red::Max) {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<double>::infinity();
    else return std::numeric_limits<T>::lowest();
  } else if constexpr (K == Red::Min) {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<double>::infinity();
    else return std::numeric_limits<T>::max();
  } else if constexpr (K == Red::Prod) {
    return Acc<T>(1);
  } else {
    return Acc<T>(0);
  }
}

// Folds one element (already shifted by the row maximum for LogSumExp) into an accumulator.
template <class T, Red K> inline Acc<T> red_step(Acc<T> a, T v) {
  using A = Acc<T>;
  if constexpr (K == Red::Max) return static_cast<A>(v) > a || (std::is_floating_point_v<T> && std::isnan(static_cast<double>(v))) ? static_cast<A>(v) : a;
  else if constexpr (K == Red::Min) return static_cast<A>(v) < a || (std::is_floating_point_v<T> && std::isnan(static_cast<double>(v))) ? static_cast<A>(v) : a;
  else if constexpr (K == Red::Prod) return a * static_cast<A>(v);
  else if constexpr (K == Red::SumSquare || K == Red::L2) return a + static_cast<A>(v) * static_cast<A>(v);
  else if constexpr (K == Red::L1) {
    if constexpr (std::is_unsigned_v<T>) return a + static_cast<A>(v);
    else return a + (v < T(0) ? -static_cast<A>(v) : static_cast<A>(v));
  } else if constexpr (K == Red::LogSumExp) return a + std::exp(static_cast<double>(v));
  else return a + static_cast<A>(v);
}

struct ReduceAxes {
  std::vector<bool> reduced;  // per input axis
  Shape keep;                 // input shape with reduced axes set to 1
  Shape out;                  // the output shape (keep, or with reduced axes removed)
  int64_t count = 1;          // elements folded into each output
  bool noop = false;          // identity (empty axes with noop_with_empty_axes)
};

ReduceAxes reduce_axes(const KernelContext& ctx, const Tensor& x) {
  const Node& n = ctx.node();
  const int r = x.rank();
  std::vector<int64_t> axes;
  bool from_input = n.op_type == "ReduceSum" ? ctx.opset() >= 13 : ctx.opset() >= 18;
  if (from_input) {
    if (ctx.has_input(1)) axes = int_list(ctx.input(1), "axes");
  } else {
    axes = n.attr_ints("axes");
  }
  const bool keepdims = n.attr_i("keepdims", 1) != 0;
  ReduceAxes ra;
  ra.reduced.assign(r, axes.empty());
  if (axes.empty() && n.attr_i("noop_with_empty_axes", 0) != 0) {
    ra.reduced.assign(r, false);
    ra.noop = true;
  }
  for (int64_t a : axes) {
    int k = norm_axis(a, r, n.op_type.c_str());
    GR_CHECK(!ra.reduced[k] || axes.empty(), n.op_type << ": axis " << a << " is given twice");
    ra.reduced[k] = true;
  }
  for (int k = 0; k < r; ++k) {
    const int64_t d = x.shape()[k];
    ra.keep.push_back(ra.reduced[k] ? 1 : d);
    if (ra.reduced[k]) ra.count *= d;
    if (!ra.reduced[k] || keepdims) ra.out.push_back(ra.reduced[k] ? 1 : d);
  }
  return ra;
}

template <class T, Red K> void reduce_typed(KernelContext& ctx, const Tensor& x, const ReduceAxes& ra, Tensor& y) {
  using A = Acc<T>;
  const T* px = ptr<T>(x);
  T* py = ptr<T>(y);
  const int64_t m = y.numel();
  if (ra.noop) {
    std::copy(px, px + x.numel(), py);
    return;
  }
  // One scratch request per kernel call: the planned arena hands out the same block each time.
  const size_t slots = static_cast<size_t>(std::max<int64_t>(m, 1));
  A* acc = static_cast<A*>(ctx.scratch(sizeof(A) * slots + (K == Red::LogSumExp ? sizeof(T) * slots : 0)));
  std::fill(acc, acc + m, red_init<T, K>());
  if (x.numel() > 0) {
    // LogSumExp subtracts each output's maximum first so exp never overflows.
    T* shift = nullptr;
    if constexpr (K == Red::LogSumExp) {
      shift = reinterpret_cast<T*>(acc + slots);
      std::vector<A> mx(m, -std::numeric_limits<double>::infinity());
      BroadcastPlan p = make_broadcast_plan({&x.shape(), &ra.keep}, x.shape());
      const int64_t inner = p.inner(), sy = p.strides[1].back();
      for_each_row(p, 1, [&](int64_t r, const int64_t* o) {
        for (int64_t i = 0; i < inner; ++i) mx[o[1] + i * sy] = std::max<A>(mx[o[1] + i * sy], px[r * inner + i]);
      });
      for (int64_t j = 0; j < m; ++j) shift[j] = std::isfinite(mx[j]) ? static_cast<T>(mx[j]) : T(0);
    }
    BroadcastPlan p = make_broadcast_plan({&x.shape(), &ra.keep}, x.shape());
    const int64_t inner = p.inner(), sy = p.strides[1].back();
    for_each_row(p, 1, [&](int64_t r, const int64_t* o) {
      const T* xr = px + r * inner;
      if constexpr (K == Red::LogSumExp) {
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t j = o[1] + i * sy;
          acc[j] = red_step<T, K>(acc[j], static_cast<T>(xr[i] - shift[j]));
        }
      } else if (sy) {
        A* ar = acc + o[1];
        for (int64_t i = 0; i < inner; ++i) ar[i] = red_step<T, K>(ar[i], xr[i]);
      } else if constexpr ((K == Red::Sum || K == Red::Mean) && std::is_floating_point_v<T>) {
        // Along the innermost axis: the row's sum in lanes (lane_sum), then added to what earlier rows left.
        acc[o[1]] += lane_sum<A>(inner, [&](int64_t i) { return static_cast<A>(xr[i]); });
      } else {
        A a = acc[o[1]];
        for (int64_t i = 0; i < inner; ++i) a = red_step<T, K>(a, xr[i]);
        acc[o[1]] = a;
      }
    });
    for (int64_t j = 0; j < m; ++j) {
      A v = acc[j];
      if constexpr (K == Red::LogSumExp) v = std::log(v) + static_cast<A>(shift[j]);
      acc[j] = v;
    }
  } else if constexpr (K == Red::LogSumExp) {
    for (int64_t j = 0; j < m; ++j) acc[j] = -std::numeric_limits<double>::infinity();
  }
  for (int64_t j = 0; j < m; ++j) {
    A v = acc[j];
    if constexpr (K == Red::Mean) v = v / static_cast<A>(ra.count);
    else if constexpr (K == Red::L2) v = static_cast<A>(std::sqrt(static_cast<double>(v)));
    else if constexpr (K == Red::LogSum) v = static_cast<A>(std::log(static_cast<double>(v)));
    py[j] = static_cast<T>(v);
  }
}

template <Red K> void reduce_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ReduceAxes ra = reduce_axes(ctx, x);
  Tensor& y = ctx.output(0, ra.noop ? x.shape() : ra.out, x.dtype());
  constexpr bool kFloatOnly = K == Red::L2 || K == Red::LogSum || K == Red::LogSumExp;
  auto body = [&](auto tag) { reduce_typed<decltype(tag), K>(ctx, x, ra, y); };
  if constexpr (kFloatOnly) dispatch_float(x.dtype(), ctx.node().op_type.c_str(), body);
  else dispatch_numeric(x.dtype(), ctx.node().op_type.c_str(), body);
}

template <bool kMax> void arg_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const char* what = kMax ? "ArgMax" : "ArgMin";
  const int r = x.rank();
  GR_CHECK(r >= 1, what << ": input must have rank >= 1");
  const int axis = norm_axis(ctx.node().attr_i("axis", 0), r, what);
  const bool keepdims = ctx.node().attr_i("keepdims", 1) != 0;
  const bool last = ctx.node().attr_i("select_last_index", 0) != 0;
  Shape out = x.shape();
  if (keepdims) out[axis] = 1;
  else out.erase(out.begin() + axis);
  const int64_t n = x.shape()[axis], outer = prod(x.shape(), 0, axis), inner = prod(x.shape(), axis + 1, r);
  GR_CHECK(n > 0 || outer * inner == 0, what << ": cannot reduce the empty axis " << axis << " of "
                                             << shape_str(x.shape()));
  Tensor& y = ctx.output(0, out, DType::I64);
  int64_t* py = ptr<int64_t>(y);
  dispatch_numeric(x.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<T>(x);
    // The best value so far stays in a register (reloading it through its index made every step wait
    // on the last: 8 ns an element on a language model's [N, T, 512] scores).
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* s = px + o * n * inner + i;
        int64_t best = 0;
        T b = s[0];
        for (int64_t j = 1; j < n; ++j) {
          const T v = s[j * inner];
          const bool better = kMax ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
          if (better) {
            best = j;
            b = v;
          }
        }
        py[o * inner + i] = best;
      }
  });
}

// A contiguous line's maximum in kSumLanes independent chains, as lane_sum adds (math_common.h), which the
// compiler maps onto vector registers: any order's maximum (std::max skips a NaN the same way in every order,
// and the sign of a zero maximum changes no x - max).
template <class T>
T line_max(const T* x, int64_t n) {
  T m[kSumLanes];
  for (int64_t l = 0; l < kSumLanes; ++l) m[l] = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (int64_t l = 0; l < kSumLanes; ++l) m[l] = m[l] < x[j + l] ? x[j + l] : m[l];  // std::max, by value
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t l = 0; l < kSumLanes; ++l) mx = std::max(mx, m[l]);
  for (; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

// Softmax over `n` elements spaced `inner` apart; log=true gives LogSoftmax. kUnit: inner is 1, a contiguous
// line, whose loops the compiler vectorizes (its stride a constant) and whose maximum and f32 sum go in lanes.
template <class T, bool kLog, bool kUnit> void softmax_line(const T* x, T* y, int64_t n, int64_t inner) {
  const int64_t st = kUnit ? 1 : inner;
  T mx = -std::numeric_limits<T>::infinity();
  if constexpr (kUnit) mx = line_max(x, n);
  else for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[j * st]);
  if (!std::isfinite(mx)) mx = std::isnan(mx) ? mx : T(0);
  T sum = 0;
  if constexpr (kLog) {
    for (int64_t j = 0; j < n; ++j) sum += std::exp(x[j * st] - mx);
    // (x - max) - log(sum), not x - (max + log(sum)): large logits keep their low digits.
    const T ls = std::log(sum);
    for (int64_t j = 0; j < n; ++j) y[j * st] = (x[j * st] - mx) - ls;
  } else {
    if constexpr (std::is_same_v<T, float>) {
      // Attention scores: the exponentials in one vectorized pass (exp_f32), then their sum.
      for (int64_t j = 0; j < n; ++j) y[j * st] = exp_f32(x[j * st] - mx);
      if constexpr (kUnit) sum = lane_sum<T>(n, [&](int64_t j) { return y[j]; });
      else for (int64_t j = 0; j < n; ++j) sum += y[j * st];
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const T e = std::exp(x[j * st] - mx);
        y[j * st] = e;
        sum += e;
      }
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j < n; ++j) y[j * st] *= inv;
  }
}

// (outer, n, inner) of a softmax-like op: 2-D coercion at axis before opset 13, one axis from 13.
void softmax_layout(const KernelContext& ctx, const Tensor& x, const char* what, int64_t* outer, int64_t* n,
                    int64_t* inner) {
  const int r = x.rank();
  if (ctx.opset() < 13) {
    int64_t axis = ctx.node().attr_i("axis", 1);
    GR_CHECK(axis >= -r && axis <= r, what << ": axis " << axis << " is out of range for rank " << r);
    if (axis < 0) axis += r;
    *outer = prod(x.shape(), 0, axis);
    *n = prod(x.shape(), axis, r);
    *inner = 1;
  } else {
    const int axis = norm_axis(ctx.node().attr_i("axis", -1), r, what);
    *outer = prod(x.shape(), 0, axis);
    *n = r == 0 ? 1 : x.shape()[axis];
    *inner = prod(x.shape(), axis + 1, r);
  }
}

template <bool kLog> void softmax_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const char* what = kLog ? "LogSoftmax" : "Softmax";
  int64_t outer, n, inner;
  softmax_layout(ctx, x, what, &outer, &n, &inner);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  if (x.numel() == 0) return;
  dispatch_float(x.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<T>(x);
    T* py = ptr<T>(y);
    const int64_t lines = outer * inner;
    const int th = threads_for(ctx, x.numel());
#pragma omp parallel for num_threads(th) schedule(static) if (th > 1)
    for (int64_t l = 0; l < lines; ++l) {
      const int64_t o = l / inner, i = l % inner, at = o * n * inner + i;
      if (inner == 1) softmax_line<T, kLog, true>(px + at, py + at, n, inner);
      else softmax_line<T, kLog, false>(px + at, py + at, n, inner);
    }
  });
}

void cumsum_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  GR_CHECK(ctx.input(1).numel() == 1, "CumSum: axis must be a scalar");
  GR_CHECK(x.rank() >= 1, "CumSum: the input must have rank 1 or more, got a scalar");
  const int axis = norm_axis(ctx.input(1).as_int64s()[0], x.rank(), "CumSum");
  const bool exclusive = ctx.node().attr_i("exclusive", 0) != 0, reverse = ctx.node().attr_i("reverse", 0) != 0;
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const int64_t n = x.shape()[axis], outer = prod(x.shape(), 0, axis), inner = prod(x.shape(), axis + 1, x.rank());
  dispatch_numeric(x.dtype(), "CumSum", [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<T>(x);
    T* py = ptr<T>(y);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        T acc = T(0);
        for (int64_t s = 0; s < n; ++s) {
          const int64_t j = reverse ? n - 1 - s : s;
          const int64_t at = (o * n + j) * inner + i;
          const T v = px[at];
          if (exclusive) {
            py[at] = acc;
            acc = static_cast<T>(acc + v);
          } else {
            acc = static_cast<T>(acc + v);
            py[at] = acc;
          }
        }
      }
  });
}

// TopK: the k largest (or smallest) along axis, in runtime/kernels/nan_order.h's order; equal values keep the
// lower index first.
void topk_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  GR_CHECK(x.rank() >= 1, "TopK: input must have rank >= 1");
  const int axis = norm_axis(ctx.node().attr_i("axis", -1), x.rank(), "TopK");
  int64_t k = 0;
  if (ctx.opset() < 10) {
    k = ctx.node().attr_i("k", 0);
  } else {
    GR_CHECK(ctx.input(1).numel() == 1, "TopK: K must hold one value");
    k = ctx.input(1).as_int64s()[0];
  }
  const bool largest = ctx.node().attr_i("largest", 1) != 0;
  const int64_t n = x.shape()[axis], outer = prod(x.shape(), 0, axis), inner = prod(x.shape(), axis + 1, x.rank());
  GR_CHECK(k >= 0 && k <= n, "TopK: k = " << k << " is out of range for axis " << axis << " of size " << n);
  Shape out = x.shape();
  out[axis] = k;
  Tensor& vals = ctx.output(0, out, x.dtype());
  Tensor& idx = ctx.output(1, out, DType::I64);
  dispatch_numeric(x.dtype(), "TopK", [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<T>(x);
    T* pv = ptr<T>(vals);
    int64_t* pi = ptr<int64_t>(idx);
    std::vector<int64_t> order(n);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* line = px + o * n * inner + i;
        for (int64_t j = 0; j < n; ++j) order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? nan_above(line[a * inner], line[b * inner]) : nan_above(line[b * inner], line[a * inner]);
        });
        for (int64_t j = 0; j < k; ++j) {
          pv[(o * k + j) * inner + i] = line[order[j] * inner];
          pi[(o * k + j) * inner + i] = order[j];
        }
      }
  });
}

// Hardmax: 1 at the first largest value along the axis (a NaN, if any, is the largest), 0 elsewhere;
// before opset 13 over the flattened axes [axis, rank), as Softmax.
void hardmax_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t outer, n, inner;
  softmax_layout(ctx, x, "Hardmax", &outer, &n, &inner);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  if (x.numel() == 0) return;
  dispatch_float(x.dtype(), "Hardmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<T>(x);
    T* py = ptr<T>(y);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = o * n * inner + i;
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j)
          if (nan_above(px[at + j * inner], px[at + best * inner])) best = j;
        for (int64_t j = 0; j < n; ++j) py[at + j * inner] = j == best ? T(1) : T(0);
      }
  });
}

}  // namespace

GR_REGISTER_OPS(reduce) {
  ops.op("ReduceSum").cpu(reduce_kernel<Red::Sum>).host_inputs({1}).host_shapes();
  ops.op("ReduceMean").cpu(reduce_kernel<Red::Mean>).host_inputs({1});
  ops.op("ReduceMax").cpu(reduce_kernel<Red::Max>).host_inputs({1}).host_shapes();
  ops.op("ReduceMin").cpu(reduce_kernel<Red::Min>).host_inputs({1}).host_shapes();
  ops.op("ReduceProd").cpu(reduce_kernel<Red::Prod>).host_inputs({1}).host_shapes();
  ops.op("ReduceSumSquare").cpu(reduce_kernel<Red::SumSquare>).host_inputs({1});
  ops.op("ReduceL1").cpu(reduce_kernel<Red::L1>).host_inputs({1});
  ops.op("ReduceL2").cpu(reduce_kernel<Red::L2>).host_inputs({1});
  ops.op("ReduceLogSum").cpu(reduce_kernel<Red::LogSum>).host_inputs({1});
  ops.op("ReduceLogSumExp").cpu(reduce_kernel<Red::LogSumExp>).host_inputs({1});
  ops.op("ArgMax").cpu(arg_kernel<true>);
  ops.op("ArgMin").cpu(arg_kernel<false>);
  ops.op("Softmax").cpu(via_f32<softmax_kernel<false>>);
  ops.op("LogSoftmax").cpu(via_f32<softmax_kernel<true>>);
  ops.op("CumSum").cpu(cumsum_kernel).host_inputs({1});
  ops.op("TopK").cpu(topk_kernel).host_inputs({1});
  ops.op("Hardmax").cpu(via_f32<hardmax_kernel>);
}

}  // namespace graphrun::runtime::cpu
