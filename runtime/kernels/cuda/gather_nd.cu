// CUDA kernel of ai.graphrun GatherNDGrad (the CPU's in shape.cc), f32 and f64: the gradient of GatherND
// w.r.t. its data. It gathers: each element of dX walks its batch's index tuples in order and adds dY's
// element of every tuple that selected its slice, so duplicates add up as on the CPU (deterministic, no
// atomics). Tuples out of range are skipped (the device cannot raise; the CPU kernel reports them).
#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime::cuda {
namespace {

struct NdGradShape {
  int m = 0;                  // length of an index tuple
  int64_t dims[kMaxRank];     // dX's dims batch_dims .. batch_dims + m - 1
  int64_t strides[kMaxRank];  // their element strides within one batch entry
  int64_t per_batch = 0;      // tuples per batch entry
  int64_t batch_elems = 1;    // dX elements per batch entry
  int64_t slice = 1;          // elements of a selected slice
};

template <class T, class I>
__global__ void gather_nd_grad_kernel(const T* dy, const I* idx, T* dx, NdGradShape s, int64_t n) {
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
  const std::vector<int64_t> sv = host_int64s(ctx, 2);
  const Shape xs(sv.begin(), sv.end());
  for (int64_t d : xs) GR_CHECK(d >= 0, what << ": bad shape " << shape_str(xs));
  GR_CHECK(ind.dtype() == DType::I64 || ind.dtype() == DType::I32, what << ": indices must be int64 or int32");
  GR_CHECK(dY.dtype() == DType::F32 || dY.dtype() == DType::F64,
           what << " on CUDA takes f32 or f64, got " << dtype_name(dY.dtype()));
  const int r = static_cast<int>(xs.size()), q = ind.rank();
  const int64_t batch_dims = ctx.node().attr_i("batch_dims", 0);
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
  Shape want(ind.shape().begin(), ind.shape().end() - 1);
  want.insert(want.end(), xs.begin() + bd + m, xs.end());
  GR_CHECK(dY.shape() == want, what << ": dY has shape " << shape_str(dY.shape()) << ", expected " << shape_str(want));
  NdGradShape s;
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

}  // namespace

GR_REGISTER_OPS(gather_nd) {
  ops.op(kGraphrunDomain, "GatherNDGrad").cuda(locked<gather_nd_grad_op>);
}

}  // namespace graphrun::runtime::cuda
