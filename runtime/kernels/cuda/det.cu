// CUDA kernels: det family (the CPU's det.cc op set): Det and ai.graphrun DetGrad, f32, with the CPU's math
// (runtime/kernels/det_lu.h) in float: one thread per matrix, its LU factors in scratch memory. Meant for the
// small matrices of flows and geometry; a large matrix is one thread's O(M^3) work.
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/det_lu.h"

namespace graphrun::runtime::cuda {
namespace {

__global__ void det_kernel(const float* x, float* y, int64_t count, int64_t m, float* work, int64_t* piv) {
  GR_GRID_STRIDE(b, count) {
    float* a = work + b * m * m;
    for (int64_t i = 0; i < m * m; ++i) a[i] = x[b * m * m + i];
    y[b] = det::lu_in_place(a, m, piv + b * m);
  }
}

__global__ void det_grad_kernel(const float* dy, const float* x, float* dx, int64_t count, int64_t m, float* work,
                                int64_t* piv) {
  GR_GRID_STRIDE(b, count) {
    float* c = dx + b * m * m;
    det::cofactors(x + b * m * m, m, c, work + b * m * m, piv + b * m);
    for (int64_t i = 0; i < m * m; ++i) c[i] *= dy[b];
  }
}

int64_t square_size(const KernelContext& ctx, const Tensor& x) {
  const Shape& s = x.shape();
  GR_CHECK(x.dtype() == DType::F32 && s.size() >= 2 && s[s.size() - 1] == s[s.size() - 2],
           ctx.node().describe() << ": Det on CUDA takes f32 square matrices [..., M, M], got " << dtype_name(x.dtype())
                                 << shape_str(s));
  return s.back();
}

void det_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t m = square_size(ctx, x);
  Tensor& y = ctx.output(0, Shape(x.shape().begin(), x.shape().end() - 2), DType::F32);
  const int64_t count = y.numel();
  if (count == 0) return;
  // The pivots first: int64 alignment.
  auto* piv = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(count * m) * sizeof(int64_t) +
                                                static_cast<size_t>(count * m * m) * sizeof(float)));
  auto* work = reinterpret_cast<float*>(piv + count * m);
  det_kernel<<<grid_for(count), kThreads, 0, stream_of(ctx)>>>(dptr<float>(x), dptr<float>(y), count, m, work, piv);
  GR_LAUNCH_CHECK("det");
}

// DetGrad(dY, X) -> dX = dY * cofactors(X).
void det_grad_op(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  const int64_t m = square_size(ctx, x);
  const Shape batch(x.shape().begin(), x.shape().end() - 2);
  GR_CHECK(dy.dtype() == DType::F32 && dy.shape() == batch,
           "DetGrad: dY " << dtype_name(dy.dtype()) << shape_str(dy.shape()) << " must be f32" << shape_str(batch));
  Tensor& dx = ctx.output(0, x.shape(), DType::F32);
  const int64_t count = dy.numel();
  if (count == 0 || m == 0) return;
  // The pivots first: int64 alignment.
  auto* piv = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(count * m) * sizeof(int64_t) +
                                                static_cast<size_t>(count * m * m) * sizeof(float)));
  auto* work = reinterpret_cast<float*>(piv + count * m);
  det_grad_kernel<<<grid_for(count), kThreads, 0, stream_of(ctx)>>>(dptr<float>(dy), dptr<float>(x), dptr<float>(dx),
                                                                    count, m, work, piv);
  GR_LAUNCH_CHECK("det_grad");
}

}  // namespace

GR_REGISTER_OPS(det) {
  ops.op("Det").cuda(locked<det_op>);
  ops.op(kGraphrunDomain, "DetGrad").cuda(locked<det_grad_op>);
}

}  // namespace graphrun::runtime::cuda
