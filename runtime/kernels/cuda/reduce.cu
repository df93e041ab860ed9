// CUDA kernels: reduce family (the CPU's reduce.cc op set): ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, SumToShape, Softmax,
// LogSoftmax, ArgMax, ArgMin, CumSum, TopK, Hardmax. One generic reduction: each output sums a strided subspace of X.
#include <cfloat>
#include <type_traits>

#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/nan_order.h"

namespace graphrun::runtime::cuda {
namespace {

struct ReducePlan {
  IndexMap out_map;  // output element -> offset of its first input element
  IndexMap red_map;  // reduced-subspace element -> offset relative to that
  int64_t nout = 0, nred = 0;
};

ReducePlan plan_reduction(const Shape& x, const std::vector<bool>& reduced) {
  GR_CHECK(x.size() <= static_cast<size_t>(kMaxRank), "rank " << x.size() << " exceeds " << kMaxRank << " on CUDA");
  std::vector<int64_t> st(x.size(), 1);
  for (int i = static_cast<int>(x.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * x[i + 1];
  ReducePlan p;
  for (IndexMap* m : {&p.out_map, &p.red_map})
    for (int k = 0; k < 3; ++k)
      for (int d = 0; d < kMaxRank; ++d) m->strides[k][d] = 0;
  p.out_map.rank = p.red_map.rank = static_cast<int>(x.size());
  p.nout = p.nred = 1;
  for (size_t d = 0; d < x.size(); ++d) {
    p.out_map.dims[d] = reduced[d] ? 1 : x[d];
    p.out_map.strides[0][d] = reduced[d] ? 0 : st[d];
    p.red_map.dims[d] = reduced[d] ? x[d] : 1;
    p.red_map.strides[0][d] = reduced[d] ? st[d] : 0;
    (reduced[d] ? p.nred : p.nout) *= x[d];
  }
  return p;
}

__global__ void reduce_thread_per_output(const float* x, float* y, ReducePlan p, float scale) {
  GR_GRID_STRIDE(o, p.nout) {
    int64_t off[3];
    map_offsets(p.out_map, o, 1, off);
    const float* base = x + off[0];
    float acc = 0.f;
    for (int64_t r = 0; r < p.nred; ++r) {
      int64_t ro[3];
      map_offsets(p.red_map, r, 1, ro);
      acc += base[ro[0]];
    }
    y[o] = acc * scale;
  }
}

__global__ void reduce_block_per_output(const float* x, float* y, ReducePlan p, float scale) {
  __shared__ float part[kThreads];
  for (int64_t o = blockIdx.x; o < p.nout; o += gridDim.x) {
    int64_t off[3];
    map_offsets(p.out_map, o, 1, off);
    const float* base = x + off[0];
    float acc = 0.f;
    for (int64_t r = threadIdx.x; r < p.nred; r += blockDim.x) {
      int64_t ro[3];
      map_offsets(p.red_map, r, 1, ro);
      acc += base[ro[0]];
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) y[o] = part[0] * scale;
    __syncthreads();
  }
}

// Y (nout elements, any shape of that size) = scale * sum of X over the `reduced` axes.
void reduce_sum(KernelContext& ctx, const Tensor& X, Tensor& Y, const std::vector<bool>& reduced, bool mean) {
  GR_CHECK(X.dtype() == DType::F32, ctx.node().op_type << " on CUDA takes f32, got " << dtype_name(X.dtype()));
  ReducePlan p = plan_reduction(X.shape(), reduced);
  if (p.nout == 0) return;
  float scale = mean ? (p.nred ? 1.f / static_cast<float>(p.nred) : NAN) : 1.f;
  cudaStream_t s = stream_of(ctx);
  // Few long reductions (bias gradients over a batch): a block each; many short ones: a thread each.
  if (p.nred >= 1024 && p.nout < 65536)
    reduce_block_per_output<<<static_cast<unsigned>(p.nout), kThreads, 0, s>>>(dptr<float>(X), dptr<float>(Y), p, scale);
  else
    reduce_thread_per_output<<<grid_for(p.nout), kThreads, 0, s>>>(dptr<float>(X), dptr<float>(Y), p, scale);
  GR_LAUNCH_CHECK("reduce");
}

// The reduced axes of a Reduce* node on X and its output shape. Axes moved from an attribute to an input:
// ReduceSum in opset 13, the others in opset 18.
std::vector<bool> reduced_axes(KernelContext& ctx, const Tensor& X, Shape* out_shape) {
  const Node& n = ctx.node();
  bool axes_input = n.op_type == "ReduceSum" ? ctx.opset() >= 13 : ctx.opset() >= 18;
  std::vector<int64_t> axes;
  if (axes_input) {
    if (ctx.has_input(1)) axes = host_int64s(ctx, 1);
  } else {
    axes = n.attr_ints("axes");
  }
  bool keepdims = n.attr_i("keepdims", 1) != 0;
  bool noop = n.attr_i("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(X.rank(), axes.empty() && !noop);
  for (int64_t a : axes) reduced[normalize_axis(a, X.rank(), "reduce axis")] = true;
  Shape& out = *out_shape;
  out.clear();
  for (int d = 0; d < X.rank(); ++d) {
    if (!reduced[d]) out.push_back(X.dim(d));
    else if (keepdims) out.push_back(1);
  }
  return reduced;
}

template <bool kMean>
void reduce_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  Shape out;
  const std::vector<bool> reduced = reduced_axes(ctx, X, &out);
  Tensor& Y = ctx.output(0, out, X.dtype());
  reduce_sum(ctx, X, Y, reduced, kMean);
}

// ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp on f32:
// a thread per output folds its subspace in double, in order, as the CPU's reduce.cc does (NaN wins Max and
// Min; LogSumExp subtracts the output's maximum first, rounded to f32 as the CPU keeps it).
enum class Red { Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp };

template <Red K>
__global__ void reduce_general_kernel(const float* x, float* y, ReducePlan p) {
  GR_GRID_STRIDE(o, p.nout) {
    int64_t off[3];
    map_offsets(p.out_map, o, 1, off);
    const float* base = x + off[0];
    auto at = [&](int64_t r) {
      int64_t ro[3];
      map_offsets(p.red_map, r, 1, ro);
      return base[ro[0]];
    };
    float shift = 0.f;
    if (K == Red::LogSumExp) {
      double mx = -INFINITY;
      for (int64_t r = 0; r < p.nred; ++r) {
        const double v = at(r);
        mx = mx < v ? v : mx;
      }
      shift = isfinite(mx) ? static_cast<float>(mx) : 0.f;
    }
    double a = K == Red::Max ? -INFINITY : K == Red::Min ? INFINITY : K == Red::Prod ? 1.0 : 0.0;
    for (int64_t r = 0; r < p.nred; ++r) {
      const float v = at(r);
      const double d = v;
      if (K == Red::Max) a = d > a || isnan(v) ? d : a;
      else if (K == Red::Min) a = d < a || isnan(v) ? d : a;
      else if (K == Red::Prod) a = a * d;
      else if (K == Red::SumSquare || K == Red::L2) a = a + d * d;
      else if (K == Red::L1) a = a + (v < 0.f ? -d : d);
      else if (K == Red::LogSumExp) a = a + exp(static_cast<double>(static_cast<float>(v - shift)));
      else a = a + d;
    }
    if (K == Red::LogSumExp) a = log(a) + static_cast<double>(shift);
    else if (K == Red::L2) a = sqrt(a);
    else if (K == Red::LogSum) a = log(a);
    y[o] = static_cast<float>(a);
  }
}

template <Red K>
void reduce_general_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.dtype() == DType::F32, ctx.node().op_type << " on CUDA takes f32, got " << dtype_name(X.dtype()));
  Shape out;
  const std::vector<bool> reduced = reduced_axes(ctx, X, &out);
  Tensor& Y = ctx.output(0, out, X.dtype());
  const ReducePlan p = plan_reduction(X.shape(), reduced);
  if (p.nout == 0) return;
  reduce_general_kernel<K><<<grid_for(p.nout), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), p);
  GR_LAUNCH_CHECK("reduce_general");
}

void sum_to_shape_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  Shape target = host_int64s(ctx, 1);
  GR_CHECK(target.size() <= static_cast<size_t>(X.rank()),
           "SumToShape: cannot sum " << shape_str(X.shape()) << " to the longer shape " << shape_str(target));
  size_t lead = X.rank() - target.size();
  std::vector<bool> reduced(X.rank(), false);
  for (int d = 0; d < X.rank(); ++d) {
    if (static_cast<size_t>(d) < lead) { reduced[d] = true; continue; }
    int64_t t = target[d - lead];
    GR_CHECK(t == X.dim(d) || t == 1, "SumToShape: " << shape_str(X.shape()) << " does not broadcast from " << shape_str(target));
    reduced[d] = t == 1 && X.dim(d) != 1;
  }
  Tensor& Y = ctx.output(0, target, X.dtype());
  reduce_sum(ctx, X, Y, reduced, false);
}

// One thread per (outer, inner) row of length len, stride `inner` between its elements.
template <bool kLog>
__global__ void softmax_kernel(const float* x, float* y, int64_t outer, int64_t len, int64_t inner) {
  GR_GRID_STRIDE(row, outer * inner) {
    int64_t o = row / inner, in = row % inner;
    const float* xr = x + o * len * inner + in;
    float* yr = y + o * len * inner + in;
    float m = -FLT_MAX;
    for (int64_t k = 0; k < len; ++k) m = fmaxf(m, xr[k * inner]);
    float sum = 0.f;
    for (int64_t k = 0; k < len; ++k) sum += expf(xr[k * inner] - m);
    if (kLog) {
      float lse = logf(sum);
      for (int64_t k = 0; k < len; ++k) yr[k * inner] = xr[k * inner] - m - lse;
    } else {
      float inv = 1.f / sum;
      for (int64_t k = 0; k < len; ++k) yr[k * inner] = expf(xr[k * inner] - m) * inv;
    }
  }
}

// (outer, len, inner) of a softmax-like op over X at `axis` (normalized): opset 13 along that one axis, earlier
// opsets over the flattened axes [axis, rank).
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
};
Lines softmax_lines(const Tensor& X, int64_t axis, bool v13) {
  Lines l;
  for (int d = 0; d < X.rank(); ++d) {
    if (d < axis) l.outer *= X.dim(d);
    else if (d == axis || !v13) l.len *= X.dim(d);
    else l.inner *= X.dim(d);
  }
  return l;
}

template <bool kLog>
void softmax_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.dtype() == DType::F32, "Softmax on CUDA takes f32, got " << dtype_name(X.dtype()));
  // Opset 13 normalises along one axis (default -1); earlier opsets over the flattened axes [axis, rank).
  bool v13 = ctx.opset() >= 13;
  int64_t axis = normalize_axis(ctx.node().attr_i("axis", v13 ? -1 : 1), X.rank(), "Softmax axis");
  const auto [outer, len, inner] = softmax_lines(X, axis, v13);
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  if (outer * inner == 0 || len == 0) return;
  softmax_kernel<kLog><<<grid_for(outer * inner), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), outer, len, inner);
  GR_LAUNCH_CHECK("softmax");
}

// ArgMax/ArgMin as the CPU kernel: the first extreme (the last with select_last_index), NaN never
// wins a comparison. One thread per (outer, inner) line; the trainer's accuracy reads [N,classes].
template <class T, bool kMax>
__global__ void arg_kernel(const T* x, int64_t* y, int64_t outer, int64_t len, int64_t inner, bool last) {
  GR_GRID_STRIDE(row, outer * inner) {
    const T* s = x + (row / inner) * len * inner + row % inner;
    int64_t best = 0;
    for (int64_t j = 1; j < len; ++j) {
      const T v = s[j * inner], b = s[best * inner];
      const bool better = kMax ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
      if (better) best = j;
    }
    y[row] = best;
  }
}

template <bool kMax>
void arg_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const char* what = kMax ? "ArgMax" : "ArgMin";
  GR_CHECK(X.rank() >= 1, what << ": input must have rank >= 1");
  const int64_t axis = normalize_axis(ctx.node().attr_i("axis", 0), X.rank(), what);
  const bool keepdims = ctx.node().attr_i("keepdims", 1) != 0;
  const bool last = ctx.node().attr_i("select_last_index", 0) != 0;
  Shape out = X.shape();
  if (keepdims) out[axis] = 1;
  else out.erase(out.begin() + axis);
  int64_t outer = 1, inner = 1;
  const int64_t len = X.dim(static_cast<int>(axis));
  for (int d = 0; d < axis; ++d) outer *= X.dim(d);
  for (int d = static_cast<int>(axis) + 1; d < X.rank(); ++d) inner *= X.dim(d);
  GR_CHECK(len > 0 || outer * inner == 0, what << ": cannot reduce the empty axis " << axis << " of " << shape_str(X.shape()));
  Tensor& Y = ctx.output(0, out, DType::I64);
  if (outer * inner == 0) return;
  dispatch_any(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    arg_kernel<T, kMax><<<grid_for(outer * inner), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<int64_t>(Y), outer,
                                                                                  len, inner, last);
  });
  GR_LAUNCH_CHECK("argmax");
}

// ---- CumSum, TopK, Hardmax ----

// CumSum: one thread per (outer, inner) line adds along the axis in the CPU's order (bit for bit).
template <class T>
__global__ void cumsum_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  GR_GRID_STRIDE(line, outer * inner) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    T acc = T(0);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t at = base + (reverse ? n - 1 - s : s) * inner;
      const T v = x[at];
      if (exclusive) {
        y[at] = acc;
        acc = static_cast<T>(acc + v);
      } else {
        acc = static_cast<T>(acc + v);
        y[at] = acc;
      }
    }
  }
}

void cumsum_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const std::vector<int64_t> axis_v = host_int64s(ctx, 1);
  GR_CHECK(axis_v.size() == 1, "CumSum: axis must be a scalar");
  GR_CHECK(X.rank() >= 1, "CumSum: the input must have rank 1 or more, got a scalar");
  const int axis = static_cast<int>(normalize_axis(axis_v[0], X.rank(), "CumSum axis"));
  const bool exclusive = ctx.node().attr_i("exclusive", 0) != 0, reverse = ctx.node().attr_i("reverse", 0) != 0;
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  int64_t outer = 1, inner = 1;
  const int64_t n = X.dim(axis);
  for (int d = 0; d < axis; ++d) outer *= X.dim(d);
  for (int d = axis + 1; d < X.rank(); ++d) inner *= X.dim(d);
  if (X.numel() == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    cumsum_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<T>(Y), outer, n, inner,
                                                                               exclusive, reverse);
  };
  dispatch_arith(X.dtype(), "CumSum", go);
  GR_LAUNCH_CHECK("cumsum");
}

// TopK and Hardmax order as the CPU (runtime/kernels/nan_order.h).
// True when element (va, a) comes before (vb, b) in TopK's output.
template <class T> __device__ bool comes_first(T va, int64_t a, T vb, int64_t b, bool largest) {
  const bool ab = largest ? nan_above(va, vb) : nan_above(vb, va), ba = largest ? nan_above(vb, va) : nan_above(va, vb);
  return ab || (!ba && a < b);
}

constexpr int64_t kTopKInsert = 64;  // up to this k, a thread keeps its line's best k in order

// Small k: one thread per line keeps the k first elements seen so far, sorted (insertion).
template <class T>
__global__ void topk_insert_kernel(const T* x, T* vals, int64_t* idx, int64_t lines, int64_t n, int64_t inner, int64_t k,
                                   bool largest) {
  GR_GRID_STRIDE(line, lines) {
    const int64_t o = line / inner, i = line % inner;
    const T* s = x + o * n * inner + i;
    T* v = vals + o * k * inner + i;
    int64_t* ix = idx + o * k * inner + i;
    int64_t have = 0;
    for (int64_t j = 0; j < n; ++j) {
      const T val = s[j * inner];
      if (have == k && !comes_first(val, j, v[(k - 1) * inner], ix[(k - 1) * inner], largest)) continue;
      int64_t p = have < k ? have++ : k - 1;
      while (p > 0 && comes_first(val, j, v[(p - 1) * inner], ix[(p - 1) * inner], largest)) {
        v[p * inner] = v[(p - 1) * inner];
        ix[p * inner] = ix[(p - 1) * inner];
        --p;
      }
      v[p * inner] = val;
      ix[p * inner] = j;
    }
  }
}

// Large k: one thread per element counts the elements of its line that come first; rank < k is written.
template <class T>
__global__ void topk_rank_kernel(const T* x, T* vals, int64_t* idx, int64_t lines, int64_t n, int64_t inner, int64_t k,
                                 bool largest) {
  GR_GRID_STRIDE(e, lines * n) {
    const int64_t line = e / n, j = e % n, o = line / inner, i = line % inner;
    const T* s = x + o * n * inner + i;
    const T val = s[j * inner];
    int64_t rank = 0;
    for (int64_t q = 0; q < n && rank < k; ++q) rank += comes_first(s[q * inner], q, val, j, largest);
    if (rank < k) {
      vals[(o * k + rank) * inner + i] = val;
      idx[(o * k + rank) * inner + i] = j;
    }
  }
}

void topk_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.rank() >= 1, "TopK: input must have rank >= 1");
  const int axis = static_cast<int>(normalize_axis(ctx.node().attr_i("axis", -1), X.rank(), "TopK axis"));
  int64_t k = 0;
  if (ctx.opset() < 10) {
    k = ctx.node().attr_i("k", 0);
  } else {
    const std::vector<int64_t> kv = host_int64s(ctx, 1);
    GR_CHECK(kv.size() == 1, "TopK: K must hold one value");
    k = kv[0];
  }
  const bool largest = ctx.node().attr_i("largest", 1) != 0;
  const int64_t n = X.dim(axis);
  GR_CHECK(k >= 0 && k <= n, "TopK: k = " << k << " is out of range for axis " << axis << " of size " << n);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= X.dim(d);
  for (int d = axis + 1; d < X.rank(); ++d) inner *= X.dim(d);
  Shape out = X.shape();
  out[axis] = k;
  Tensor& V = ctx.output(0, out, X.dtype());
  Tensor& I = ctx.output(1, out, DType::I64);
  const int64_t lines = outer * inner;
  if (lines == 0 || k == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    if (k <= kTopKInsert)
      topk_insert_kernel<T><<<grid_for(lines), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<T>(V), dptr<int64_t>(I),
                                                                              lines, n, inner, k, largest);
    else
      topk_rank_kernel<T><<<grid_for(lines * n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<T>(V), dptr<int64_t>(I),
                                                                                 lines, n, inner, k, largest);
  };
  dispatch_arith(X.dtype(), "TopK", go);
  GR_LAUNCH_CHECK("topk");
}

template <class T>
__global__ void hardmax_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  GR_GRID_STRIDE(line, outer * inner) {
    const int64_t at = (line / inner) * n * inner + line % inner;
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (nan_above(x[at + j * inner], x[at + best * inner])) best = j;
    for (int64_t j = 0; j < n; ++j) y[at + j * inner] = j == best ? T(1) : T(0);
  }
}

void hardmax_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.dtype() == DType::F32 || X.dtype() == DType::F64,
           "Hardmax on CUDA takes f32 or f64, got " << dtype_name(X.dtype()));
  // As Softmax: opset 13 along one axis (default -1); earlier opsets over the flattened axes [axis, rank).
  const bool v13 = ctx.opset() >= 13;
  const int r = X.rank();
  int64_t axis = ctx.node().attr_i("axis", v13 ? -1 : 1);
  GR_CHECK(axis >= -r && (v13 ? axis < std::max(r, 1) : axis <= r), "Hardmax: axis " << axis << " is out of range for rank " << r);
  if (axis < 0) axis += r;
  const auto [outer, len, inner] = softmax_lines(X, axis, v13);
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  if (X.numel() == 0) return;
  if (X.dtype() == DType::F32)
    hardmax_kernel<float><<<grid_for(outer * inner), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Y), outer, len, inner);
  else
    hardmax_kernel<double><<<grid_for(outer * inner), kThreads, 0, stream_of(ctx)>>>(dptr<double>(X), dptr<double>(Y), outer, len,
                                                                                     inner);
  GR_LAUNCH_CHECK("hardmax");
}

}  // namespace

GR_REGISTER_OPS(reduce) {
  ops.op("ArgMax").cuda(locked<arg_op<true>>);
  ops.op("ArgMin").cuda(locked<arg_op<false>>);
  ops.op("ReduceSum").cuda(locked<reduce_op<false>>);
  ops.op("ReduceMean").cuda(locked<reduce_op<true>>);
  ops.op("ReduceMax").cuda(locked<reduce_general_op<Red::Max>>);
  ops.op("ReduceMin").cuda(locked<reduce_general_op<Red::Min>>);
  ops.op("ReduceProd").cuda(locked<reduce_general_op<Red::Prod>>);
  ops.op("ReduceSumSquare").cuda(locked<reduce_general_op<Red::SumSquare>>);
  ops.op("ReduceL1").cuda(locked<reduce_general_op<Red::L1>>);
  ops.op("ReduceL2").cuda(locked<reduce_general_op<Red::L2>>);
  ops.op("ReduceLogSum").cuda(locked<reduce_general_op<Red::LogSum>>);
  ops.op("ReduceLogSumExp").cuda(locked<reduce_general_op<Red::LogSumExp>>);
  ops.op(kGraphrunDomain, "SumToShape").cuda(locked<sum_to_shape_op>);
  ops.op("Softmax").cuda(locked<softmax_op<false>>);
  ops.op("LogSoftmax").cuda(locked<softmax_op<true>>);
  ops.op("CumSum").cuda(locked<cumsum_op>);
  ops.op("TopK").cuda(locked<topk_op>);
  ops.op("Hardmax").cuda(locked<hardmax_op>);
}

}  // namespace graphrun::runtime::cuda
