// CUDA kernels: reduce family (the CPU's reduce.cc op set): ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, SumToShape, Softmax,
// LogSoftmax, ArgMax, ArgMin. One generic reduction: each output sums a strided subspace of X.
#include <cfloat>

#include "runtime/kernels/cuda/common.cuh"

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

template <bool kLog>
void softmax_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.dtype() == DType::F32, "Softmax on CUDA takes f32, got " << dtype_name(X.dtype()));
  // Opset 13 normalises along one axis (default -1); earlier opsets over the flattened axes [axis, rank).
  bool v13 = ctx.opset() >= 13;
  int64_t axis = normalize_axis(ctx.node().attr_i("axis", v13 ? -1 : 1), X.rank(), "Softmax axis");
  int64_t outer = 1, len = 1, inner = 1;
  for (int d = 0; d < X.rank(); ++d) {
    if (d < axis) outer *= X.dim(d);
    else if (d == axis || !v13) len *= X.dim(d);
    else inner *= X.dim(d);
  }
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
}

}  // namespace graphrun::runtime::cuda
