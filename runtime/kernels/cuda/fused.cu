// CUDA kernels of the fused ops of the executor's internal graph (the CPU's fused.cc op set):
// ai.graphrun ReluGrad, and the bias + Relu epilogue of FusedConv, FusedGemm and FusedMatMul (conv.cu,
// linalg.cu).
#include "runtime/kernels/cuda/fused.cuh"

namespace graphrun::runtime::cuda {
namespace {

// A select, as on the CPU: bit for bit Where(Greater(Y, 0), dY, 0).
template <class T>
__global__ void relu_grad_kernel(const T* dy, const T* y, T* dx, int64_t n) {
  GR_GRID_STRIDE(i, n) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

void relu_grad_op(KernelContext& ctx) {
  const Tensor& dY = ctx.input(0);
  const Tensor& Y = ctx.input(1);
  GR_CHECK(dY.dtype() == Y.dtype(), "ReluGrad: dY is " << dtype_name(dY.dtype()) << ", Y is " << dtype_name(Y.dtype()));
  GR_CHECK(dY.shape() == Y.shape(),
           "ReluGrad: dY " << shape_str(dY.shape()) << " and Y " << shape_str(Y.shape()) << " differ in shape");
  GR_CHECK(Y.dtype() == DType::F32 || Y.dtype() == DType::F64,
           "ReluGrad: element type " << dtype_name(Y.dtype()) << " is not supported (f32, f64)");
  Tensor& dX = ctx.output(0, Y.shape(), Y.dtype());
  const int64_t n = dX.numel();
  if (n == 0) return;
  dispatch_any(Y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    relu_grad_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(dY), dptr<T>(Y), dptr<T>(dX), n);
  });
  GR_LAUNCH_CHECK("relu_grad");
}

__global__ void bias_relu_kernel(float* y, int64_t n, const float* bias, int64_t inner, int64_t channels) {
  GR_GRID_STRIDE(i, n) {
    const float v = bias ? y[i] + bias[(i / inner) % channels] : y[i];
    y[i] = v < 0.f ? 0.f : v;
  }
}

}  // namespace

void bias_relu_in_place(KernelContext& ctx, float* y, int64_t n, const float* bias, int64_t inner, int64_t channels) {
  if (n == 0) return;
  bias_relu_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(y, n, bias, inner, channels);
  GR_LAUNCH_CHECK("bias_relu");
}

GR_REGISTER_OPS(fused) { ops.op(kGraphrunDomain, "ReluGrad").cuda(locked<relu_grad_op>); }

}  // namespace graphrun::runtime::cuda
