// CUDA kernels: indexing family. GatherND and its gradient GatherNDGrad, NonZero, Compress and Unique (their
// output shapes depend on values: read on the host), ReverseSequence, OneHot, Trilu, EyeLike and Range;
// the CPU's kernels are in shape.cc.
//
// GatherNDGrad (f32 and f64) gathers: each element of dX walks its batch's index tuples in order and adds
// dY's element of every tuple that selected its slice, so duplicates add up as on the CPU (deterministic,
// no atomics). Out-of-range indices read as zero or are skipped (the device cannot raise; the CPU kernel
// reports them).
#include <cmath>
#include <cstring>
#include <type_traits>

#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/unique_plan.h"

namespace graphrun::runtime::cuda {
namespace {

// The geometry of GatherND over data of shape xs, and of its gradient (the CPU's nd_index, checked the same).
struct NdShape {
  int m = 0;                  // length of an index tuple
  int64_t dims[kMaxRank];     // data's dims batch_dims .. batch_dims + m - 1
  int64_t strides[kMaxRank];  // their element strides within one batch entry
  int64_t per_batch = 0;      // tuples per batch entry
  int64_t batch_elems = 1;    // data elements per batch entry
  int64_t slice = 1;          // elements of a selected slice
};

// The geometry, and GatherND's output shape (dY's of the gradient) in *out.
NdShape plan_nd(const char* what, const Shape& xs, const Tensor& ind, int64_t batch_dims, Shape* out) {
  GR_CHECK(ind.dtype() == DType::I64 || ind.dtype() == DType::I32, what << ": indices must be int64 or int32");
  const int r = static_cast<int>(xs.size()), q = ind.rank();
  GR_CHECK(q >= 1 && batch_dims >= 0 && batch_dims < std::min(r, q),
           what << ": batch_dims " << batch_dims << " is out of range for data " << shape_str(xs) << " and indices "
                << shape_str(ind.shape()));
  const int bd = static_cast<int>(batch_dims);
  const int64_t m = ind.dim(q - 1);
  GR_CHECK(m >= 1 && bd + m <= r && m <= kMaxRank,
           what << ": index tuples of length " << m << " do not fit data " << shape_str(xs));
  for (int k = 0; k < bd; ++k)
    GR_CHECK(ind.dim(k) == xs[k], what << ": batch dims of data " << shape_str(xs) << " and indices "
                                       << shape_str(ind.shape()) << " differ");
  NdShape s;
  out->assign(ind.shape().begin(), ind.shape().end() - 1);
  out->insert(out->end(), xs.begin() + bd + m, xs.end());
  s.m = static_cast<int>(m);
  for (int a = bd + s.m; a < r; ++a) s.slice *= xs[a];
  int64_t stride = s.slice;
  for (int a = s.m - 1; a >= 0; --a) {
    s.dims[a] = xs[bd + a];
    s.strides[a] = stride;
    stride *= s.dims[a];
  }
  s.batch_elems = stride;
  s.per_batch = 1;
  for (int k = bd; k < q - 1; ++k) s.per_batch *= ind.dim(k);
  return s;
}

template <class T, class I>
__global__ void gather_nd_grad_kernel(const T* dy, const I* idx, T* dx, NdShape s, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t b = i / s.batch_elems, within = i % s.batch_elems, j = within % s.slice;
    int64_t at[kMaxRank];
    for (int a = 0; a < s.m; ++a) at[a] = within / s.strides[a] % s.dims[a];
    T v = T(0);
    for (int64_t k = 0; k < s.per_batch; ++k) {
      const I* tuple = idx + (b * s.per_batch + k) * s.m;
      bool hit = true;
      for (int a = 0; a < s.m && hit; ++a) {
        int64_t c = static_cast<int64_t>(tuple[a]);
        if (c < 0) c += s.dims[a];
        hit = c == at[a];
      }
      if (hit) v += dy[(b * s.per_batch + k) * s.slice + j];
    }
    dx[i] = v;
  }
}

// GatherNDGrad(dY, indices, shape): zeros of `shape` with dY added at every gathered slice.
void gather_nd_grad_op(KernelContext& ctx) {
  const char* what = "GatherNDGrad";
  const Tensor &dY = ctx.input(0), &ind = ctx.input(1);
  const Shape xs = host_shape(ctx, 2, what);
  GR_CHECK(dY.dtype() == DType::F32 || dY.dtype() == DType::F64,
           what << " on CUDA takes f32 or f64, got " << dtype_name(dY.dtype()));
  Shape want;
  const NdShape s = plan_nd(what, xs, ind, ctx.node().attr_i("batch_dims", 0), &want);
  GR_CHECK(dY.shape() == want, what << ": dY has shape " << shape_str(dY.shape()) << ", expected " << shape_str(want));
  Tensor& dX = ctx.output(0, xs, dY.dtype());
  const int64_t n = dX.numel();
  if (n == 0) return;
  cudaStream_t st = stream_of(ctx);
  auto launch = [&](auto tag, auto itag) {
    using T = decltype(tag);
    using I = decltype(itag);
    gather_nd_grad_kernel<T, I><<<grid_for(n), kThreads, 0, st>>>(dptr<T>(dY), dptr<I>(ind), dptr<T>(dX), s, n);
  };
  auto with_index = [&](auto tag) {
    if (ind.dtype() == DType::I64) launch(tag, int64_t{});
    else launch(tag, int32_t{});
  };
  if (dY.dtype() == DType::F32) with_index(float{});
  else with_index(double{});
  GR_LAUNCH_CHECK("gather_nd_grad");
}

// ---- GatherND ----

template <class T, class I>
__global__ void gather_nd_kernel(const T* x, const I* idx, T* y, NdShape s, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t t = i / s.slice, j = i % s.slice, b = t / s.per_batch;
    const I* tuple = idx + t * s.m;
    int64_t off = b * s.batch_elems;
    bool ok = true;
    for (int a = 0; a < s.m; ++a) {
      int64_t c = static_cast<int64_t>(tuple[a]);
      if (c < 0) c += s.dims[a];
      ok = ok && c >= 0 && c < s.dims[a];
      off += c * s.strides[a];
    }
    y[i] = ok ? x[off + j] : T(0);
  }
}

void gather_nd_op(KernelContext& ctx) {
  const char* what = "GatherND";
  const Tensor &X = ctx.input(0), &ind = ctx.input(1);
  Shape out;
  const NdShape s = plan_nd(what, X.shape(), ind, ctx.node().attr_i("batch_dims", 0), &out);
  Tensor& Y = ctx.output(0, out, X.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_any(X.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    if (ind.dtype() == DType::I64)
      gather_nd_kernel<T, int64_t><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<int64_t>(ind), dptr<T>(Y), s, n);
    else
      gather_nd_kernel<T, int32_t><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<int32_t>(ind), dptr<T>(Y), s, n);
  });
  GR_LAUNCH_CHECK("gather_nd");
}

// ---- NonZero and Compress: the output's shape depends on the values, read on the host ----

// NonZero on the host (runtime/kernels/unique_plan.h, as the CPU kernel), its output copied up.
void nonzero_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const DType dt = X.dtype();
  GR_CHECK(dt == DType::F32 || dt == DType::F64 || dt == DType::I64 || dt == DType::I32 || dt == DType::I8 ||
               dt == DType::U8 || dt == DType::Bool,
           "NonZero on " << dtype_name(dt) << " is not supported on CUDA");
  int64_t nnz = 0;
  const std::vector<int64_t> at = nonzero_indices(host_input(ctx, 0).t, &nnz);
  Tensor& Y = ctx.output(0, {X.rank(), nnz}, DType::I64);
  if (!at.empty())
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), at.data(), at.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream_of(ctx)));
}

// Unique on the host (runtime/kernels/unique_plan.h, as the CPU kernel), its outputs copied up.
void unique_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const HostInput host = host_input(ctx, 0);
  const Tensor& hx = host.t;
  const UniquePlan p = plan_unique(ctx.node(), hx);
  Tensor& Y = ctx.output(0, p.y_shape, X.dtype());
  std::vector<char> y(Y.nbytes());
  gather_unique(p, hx, y.data());
  cudaStream_t st = stream_of(ctx);
  if (!y.empty()) GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), y.data(), y.size(), cudaMemcpyHostToDevice, st));
  const std::vector<int64_t>* lists[] = {&p.first, &p.inverse, &p.counts};
  for (int i = 1; i <= 3; ++i)
    if (ctx.has_output(i)) {
      const std::vector<int64_t>& v = *lists[i - 1];
      Tensor& t = ctx.output(i, {static_cast<int64_t>(v.size())}, DType::I64);
      if (!v.empty()) GR_CUDA_CHECK(cudaMemcpyAsync(t.raw(), v.data(), v.size() * sizeof(int64_t), cudaMemcpyHostToDevice, st));
    }
}

template <class E>
__global__ void compress_kernel(const E* x, E* y, const int64_t* keep, int64_t kept, int64_t dim, int64_t inner, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t k = i % inner, j = (i / inner) % kept, o = i / (inner * kept);
    y[i] = x[(o * dim + keep[j]) * inner + k];
  }
}

void compress_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &C = ctx.input(1);
  GR_CHECK(C.dtype() == DType::Bool, "Compress condition must be bool, got " << dtype_name(C.dtype()));
  GR_CHECK(C.rank() == 1, "Compress: condition must be 1-D, got " << shape_str(C.shape()));
  const bool has_axis = ctx.node().has_attr("axis");
  const Shape xs = has_axis ? X.shape() : Shape{X.numel()};
  const int axis = has_axis ? static_cast<int>(normalize_axis(ctx.node().attr_i("axis", 0), X.rank(), "Compress axis")) : 0;
  const int64_t dim = xs[axis];
  GR_CHECK(C.numel() <= dim, "Compress: condition has " << C.numel() << " entries for an axis of size " << dim);
  const std::vector<char> cond = host_bytes(ctx, 1);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < C.numel(); ++i)
    if (cond[i]) keep.push_back(i);
  Shape out = xs;
  out[axis] = static_cast<int64_t>(keep.size());
  Tensor& Y = ctx.output(0, out, X.dtype());
  // The scratch holds as many entries as the axis has, whatever the condition keeps: its size is planned.
  auto* dkeep = static_cast<int64_t*>(ctx.scratch(std::max<int64_t>(dim, 1) * sizeof(int64_t)));
  const int64_t n = Y.numel();
  if (n == 0) return;
  GR_CUDA_CHECK(cudaMemcpyAsync(dkeep, keep.data(), keep.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream_of(ctx)));
  int64_t inner = 1;
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  dispatch_any(X.dtype(), "Compress", [&](auto tag) {
    using E = decltype(tag);
    compress_kernel<E><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<E>(X), dptr<E>(Y), dkeep,
                                                                     static_cast<int64_t>(keep.size()), dim, inner, n);
  });
  GR_LAUNCH_CHECK("compress");
}

// ---- ReverseSequence: the first lens[b] steps of each batch entry reversed (lengths outside [0, time]
// leave the entry as it is: the device cannot raise; the CPU kernel reports them) ----

template <class E, class L>
__global__ void reverse_sequence_kernel(const E* x, E* y, const L* lens, int64_t sb, int64_t stt, int batch_axis,
                                        int64_t batch, int64_t time, int64_t inner, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t k = i % inner, first = i / inner;  // (axis 0, axis 1) position
    const int64_t a0 = first / (batch_axis == 0 ? time : batch), a1 = first % (batch_axis == 0 ? time : batch);
    const int64_t b = batch_axis == 0 ? a0 : a1, t = batch_axis == 0 ? a1 : a0;
    int64_t len = static_cast<int64_t>(lens[b]);
    if (len < 0 || len > time) len = 0;
    const int64_t from = t < len ? len - 1 - t : t;
    y[i] = x[b * sb + from * stt + k];
  }
}

void reverse_sequence_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &L = ctx.input(1);
  GR_CHECK(X.rank() >= 2, "ReverseSequence: input must have rank >= 2");
  const int batch_axis = static_cast<int>(normalize_axis(ctx.node().attr_i("batch_axis", 1), X.rank(), "ReverseSequence batch_axis"));
  const int time_axis = static_cast<int>(normalize_axis(ctx.node().attr_i("time_axis", 0), X.rank(), "ReverseSequence time_axis"));
  GR_CHECK(batch_axis != time_axis && std::max(batch_axis, time_axis) <= 1,
           "ReverseSequence: batch_axis and time_axis must be 0 and 1 in some order");
  const int64_t batch = X.dim(batch_axis), time = X.dim(time_axis);
  GR_CHECK(L.numel() == batch, "ReverseSequence: " << L.numel() << " lengths for batch " << batch);
  GR_CHECK(L.dtype() == DType::I64 || L.dtype() == DType::I32, "ReverseSequence: sequence_lens must be int64 or int32");
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  int64_t inner = 1;
  for (int d = 2; d < X.rank(); ++d) inner *= X.dim(d);
  const int64_t s1 = inner, s0 = X.dim(1) * inner;
  const int64_t sb = batch_axis == 0 ? s0 : s1, stt = time_axis == 0 ? s0 : s1;
  dispatch_any(X.dtype(), "ReverseSequence", [&](auto tag) {
    using E = decltype(tag);
    if (L.dtype() == DType::I64)
      reverse_sequence_kernel<E, int64_t><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
          dptr<E>(X), dptr<E>(Y), dptr<int64_t>(L), sb, stt, batch_axis, batch, time, inner, n);
    else
      reverse_sequence_kernel<E, int32_t><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
          dptr<E>(X), dptr<E>(Y), dptr<int32_t>(L), sb, stt, batch_axis, batch, time, inner, n);
  });
  GR_LAUNCH_CHECK("reverse_sequence");
}

// ---- OneHot(indices, depth, values): values[1] at each index along `axis` (negative indices count from
// depth; others outside [0, depth) give a row of values[0]) ----

template <class I, class E>
__global__ void onehot_kernel(const I* ind, const E* vals, E* y, int64_t depth, int64_t inner, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t k = i % inner, d = (i / inner) % depth, o = i / (inner * depth);
    int64_t v = static_cast<int64_t>(static_cast<double>(ind[o * inner + k]));
    if (v < 0) v += depth;
    y[i] = v == d ? vals[1] : vals[0];
  }
}

void onehot_op(KernelContext& ctx) {
  const Tensor &ind = ctx.input(0), &vals = ctx.input(2);
  const std::vector<double> dv = host_doubles(ctx, 1);
  GR_CHECK(dv.size() == 1, "OneHot: depth must be a scalar");
  GR_CHECK(vals.numel() == 2, "OneHot: values must hold [off_value, on_value]");
  const int64_t depth = static_cast<int64_t>(dv[0]);
  GR_CHECK(depth > 0, "OneHot: depth must be positive, got " << depth);
  const int r = ind.rank() + 1;
  const int axis = static_cast<int>(normalize_axis(ctx.node().attr_i("axis", -1), r, "OneHot axis"));
  Shape out(ind.shape().begin(), ind.shape().begin() + axis);
  out.push_back(depth);
  out.insert(out.end(), ind.shape().begin() + axis, ind.shape().end());
  int64_t inner = 1;
  for (int d = axis; d < ind.rank(); ++d) inner *= ind.dim(d);
  Tensor& Y = ctx.output(0, out, vals.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_any(ind.dtype(), "OneHot indices", [&](auto itag) {
    using I = decltype(itag);
    dispatch_any(vals.dtype(), "OneHot values", [&](auto vtag) {
      using E = decltype(vtag);
      onehot_kernel<I, E><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<I>(ind), dptr<E>(vals), dptr<E>(Y), depth,
                                                                         inner, n);
    });
  });
  GR_LAUNCH_CHECK("onehot");
}

// ---- Trilu, EyeLike, Range ----

template <class E>
__global__ void trilu_kernel(const E* x, E* y, int64_t rows, int64_t cols, int64_t k, bool upper, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t j = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? j - r >= k : j - r <= k;
    y[i] = keep ? x[i] : E(0);
  }
}

void trilu_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.rank() >= 2, "Trilu: input must have rank >= 2, got " << shape_str(X.shape()));
  int64_t k = 0;
  if (ctx.has_input(1)) {
    const std::vector<int64_t> kv = host_int64s(ctx, 1);
    GR_CHECK(kv.size() == 1, "Trilu: k must be a scalar");
    k = kv[0];
  }
  const bool upper = ctx.node().attr_i("upper", 1) != 0;
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_any(X.dtype(), "Trilu", [&](auto tag) {
    using E = decltype(tag);
    trilu_kernel<E><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<E>(X), dptr<E>(Y), X.dim(-2), X.dim(-1), k, upper, n);
  });
  GR_LAUNCH_CHECK("trilu");
}

template <class E>
__global__ void eye_kernel(E* y, int64_t cols, int64_t k, int64_t n) {
  GR_GRID_STRIDE(i, n) y[i] = (i % cols) - (i / cols) == k ? E(1) : E(0);
}

void eye_like_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.rank() == 2, "EyeLike: input must be 2-D, got " << shape_str(X.shape()));
  const DType dt = ctx.node().has_attr("dtype") ? static_cast<DType>(ctx.node().attr_i("dtype", 1)) : X.dtype();
  const int64_t k = ctx.node().attr_i("k", 0);
  Tensor& Y = ctx.output(0, X.shape(), dt);
  const int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_any(dt, "EyeLike", [&](auto tag) {
    using E = decltype(tag);
    eye_kernel<E><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<E>(Y), X.dim(1), k, n);
  });
  GR_LAUNCH_CHECK("eye_like");
}

// Range: start + i * delta in the element type, the product rounded on its own as on the CPU (no fused
// multiply-add).
template <class T> __device__ T mul_rn(T a, T b) {
  if constexpr (std::is_same_v<T, float>) return __fmul_rn(a, b);
  else if constexpr (std::is_same_v<T, double>) return __dmul_rn(a, b);
  else return static_cast<T>(a * b);
}
template <class T>
__global__ void range_kernel(T* y, T start, T delta, int64_t n) {
  GR_GRID_STRIDE(i, n) y[i] = static_cast<T>(start + mul_rn(static_cast<T>(i), delta));
}

void range_op(KernelContext& ctx) {
  const Tensor& S = ctx.input(0);
  for (int i = 0; i < 3; ++i) {
    GR_CHECK(ctx.input(i).numel() == 1, "Range: start, limit and delta must be scalars, got shape "
                                            << shape_str(ctx.input(i).shape()));
    GR_CHECK(ctx.input(i).dtype() == S.dtype(), "Range: start, limit and delta must have one element type");
  }
  const double start = host_scalar(ctx, 0), limit = host_scalar(ctx, 1), delta = host_scalar(ctx, 2);
  GR_CHECK(delta != 0, "Range: delta is 0");
  const int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((limit - start) / delta)), 0);
  Tensor& Y = ctx.output(0, {n}, S.dtype());
  if (n == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    range_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(Y), static_cast<T>(start), static_cast<T>(delta), n);
  };
  dispatch_arith(S.dtype(), "Range", go);
  GR_LAUNCH_CHECK("range");
}

}  // namespace

GR_REGISTER_OPS(indexing) {
  ops.op("GatherND").cuda(locked<gather_nd_op>);
  ops.op(kGraphrunDomain, "GatherNDGrad").cuda(locked<gather_nd_grad_op>);
  ops.op("NonZero").cuda(locked<nonzero_op>);
  ops.op("Compress").cuda(locked<compress_op>);
  ops.op("Unique").cuda(locked<unique_op>);
  ops.op("ReverseSequence").cuda(locked<reverse_sequence_op>);
  ops.op("OneHot").cuda(locked<onehot_op>);
  ops.op("Trilu").cuda(locked<trilu_op>);
  ops.op("EyeLike").cuda(locked<eye_like_op>);
  ops.op("Range").cuda(locked<range_op>);
}

}  // namespace graphrun::runtime::cuda
