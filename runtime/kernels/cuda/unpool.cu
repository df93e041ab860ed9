// CUDA kernels: unpool family. MaxUnpool: Y zeroed, then a thread per element of X writes it at its index. The
// indices are read back first and checked as the CPU checks them (the device cannot raise); MaxPool's indices
// repeat only where windows overlap on one maximum, whose value every writer shares.
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/max_unpool.h"

namespace graphrun::runtime::cuda {
namespace {

template <class T>
__global__ void max_unpool_kernel(const T* x, const int64_t* idx, T* y, UnpoolMap map, int64_t n) {
  GR_GRID_STRIDE(k, n) { y[map.at(idx[k])] = x[k]; }
}

void max_unpool_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &I = ctx.input(1);
  GR_CHECK(I.dtype() == DType::I64 && I.shape() == X.shape(),
           "MaxUnpool: I must be int64 of X's shape " << shape_str(X.shape()) << ", got " << dtype_name(I.dtype())
                                                      << shape_str(I.shape()));
  GR_CHECK(X.dtype() == DType::F32 || X.dtype() == DType::F64, "MaxUnpool on CUDA takes f32 or f64 X");
  std::vector<int64_t> out;
  if (ctx.has_input(2)) out = host_int64s(ctx, 2);
  Shape unpooled;
  Tensor& Y =
      ctx.output(0, max_unpool_shape(ctx.node(), X.shape(), ctx.has_input(2) ? &out : nullptr, &unpooled), X.dtype());
  int64_t range = 1;
  for (int64_t d : unpooled) range *= d;
  for (int64_t i : host_int64s(ctx, 1))
    GR_CHECK(i >= 0 && i < range, "MaxUnpool: index " << i << " is outside the unpooled " << shape_str(unpooled));
  const UnpoolMap map = unpool_map(unpooled, Y.shape());
  cudaStream_t st = stream_of(ctx);
  if (Y.nbytes()) GR_CUDA_CHECK(cudaMemsetAsync(Y.raw(), 0, Y.nbytes(), st));
  const int64_t n = X.numel();
  if (n == 0) return;
  if (X.dtype() == DType::F32)
    max_unpool_kernel<float><<<grid_for(n), kThreads, 0, st>>>(dptr<float>(X), dptr<int64_t>(I), dptr<float>(Y), map, n);
  else
    max_unpool_kernel<double><<<grid_for(n), kThreads, 0, st>>>(dptr<double>(X), dptr<int64_t>(I), dptr<double>(Y), map, n);
  GR_LAUNCH_CHECK("max_unpool");
}

}  // namespace

GR_REGISTER_OPS(unpool) { ops.op("MaxUnpool").cuda(locked<max_unpool_op>); }

}  // namespace graphrun::runtime::cuda
