// CUDA kernel: lrn family (the CPU's lrn.cc): LRN, f32 and f64, one thread per element with the CPU's
// formula (runtime/kernels/lrn_window.h). Its gradient is graph nodes (Pad, Slice, Sum, Pow: CUDA kernels
// of their own).
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/lrn_window.h"

namespace graphrun::runtime::cuda {
namespace {

template <class T>
__global__ void lrn_kernel(const T* x, T* y, int64_t n, lrn::Params p) {
  GR_GRID_STRIDE(i, n) { y[i] = lrn::value(x, i, p); }
}

void lrn_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const lrn::Params p = lrn::params(ctx.node(), x);
  GR_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
           ctx.node().describe() << ": LRN on CUDA takes f32 or f64, got " << dtype_name(x.dtype()));
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dtype() == DType::F32)
    lrn_kernel<float><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(x), dptr<float>(y), n, p);
  else
    lrn_kernel<double><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<double>(x), dptr<double>(y), n, p);
  GR_LAUNCH_CHECK("lrn");
}

}  // namespace

GR_REGISTER_OPS(lrn) { ops.op("LRN").cuda(locked<lrn_op>); }

}  // namespace graphrun::runtime::cuda
