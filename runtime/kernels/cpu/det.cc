// CPU kernels of Det (a batch of square matrices [..., M, M] -> their determinants [...]; torch.det and
// torch.logdet export through it) and of graphrun's DetGrad, dY times the cofactor matrix. Computed in double
// (runtime/kernels/det_lu.h, shared with the CUDA kernels): LU with partial pivoting.
#include <vector>

#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/det_lu.h"

namespace graphrun::runtime::cpu {
namespace {

// X [..., M, M]: the batch's shape and M; throws naming the node.
Shape batch_of(const KernelContext& ctx, const Tensor& x, int64_t* m) {
  const Shape& s = x.shape();
  GR_CHECK(s.size() >= 2 && s[s.size() - 1] == s[s.size() - 2],
           ctx.node().describe() << ": X must be square matrices [..., M, M], got " << shape_str(s));
  *m = s.back();
  return Shape(s.begin(), s.end() - 2);
}

template <class T>
void det_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t m = 0;
  const Shape batch = batch_of(ctx, x, &m);
  Tensor& y = ctx.output(0, batch, x.dtype());
  const T* px = ptr<T>(x);
  T* py = ptr<T>(y);
  const int64_t count = y.numel(), mm = m * m;
#pragma omp parallel for num_threads(threads_for(ctx, count * mm * m)) schedule(static)
  for (int64_t b = 0; b < count; ++b) {
    std::vector<double> a(px + b * mm, px + (b + 1) * mm);
    std::vector<int64_t> piv(static_cast<size_t>(m));
    py[b] = static_cast<T>(det::lu_in_place(a.data(), m, piv.data()));
  }
}

// DetGrad(dY, X) -> dX = dY * cofactors(X), matrix by matrix.
template <class T>
void det_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  int64_t m = 0;
  const Shape batch = batch_of(ctx, x, &m);
  GR_CHECK(dy.shape() == batch && dy.dtype() == x.dtype(),
           "DetGrad: dY " << dtype_name(dy.dtype()) << shape_str(dy.shape()) << " must be " << dtype_name(x.dtype())
                          << shape_str(batch));
  Tensor& dx = ctx.output(0, x.shape(), x.dtype());
  const T *px = ptr<T>(x), *pdy = ptr<T>(dy);
  T* pdx = ptr<T>(dx);
  const int64_t count = dy.numel(), mm = m * m;
#pragma omp parallel for num_threads(threads_for(ctx, count * mm * m)) schedule(static)
  for (int64_t b = 0; b < count; ++b) {
    std::vector<double> a(px + b * mm, px + (b + 1) * mm), c(static_cast<size_t>(mm)), work(static_cast<size_t>(mm));
    std::vector<int64_t> piv(static_cast<size_t>(m));
    det::cofactors(a.data(), m, c.data(), work.data(), piv.data());
    for (int64_t i = 0; i < mm; ++i) pdx[b * mm + i] = static_cast<T>(pdy[b] * c[static_cast<size_t>(i)]);
  }
}

void det_op(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "Det", [&](auto t) { det_kernel<decltype(t)>(ctx); });
}

void det_grad_op(KernelContext& ctx) {
  dispatch_float(ctx.input(1).dtype(), "DetGrad", [&](auto t) { det_grad_kernel<decltype(t)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(det) {
  ops.op("Det").cpu(via_f32<det_op>);
  ops.op(kGraphrunDomain, "DetGrad")
      .cpu(via_f32<det_grad_op>)
      .schema(OpSchemaSpec("gradient of `Det` w.r.t. X: dY times the cofactor matrix, det(X) inverse(X)^T where X is "
                           "invertible, else from the minors")
                  .input("dY", "gradient of Y", "T")
                  .input("X", "the forward's X", "T")
                  .output("dX", "gradient of X", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .output_like(0, 1));
}

}  // namespace graphrun::runtime::cpu
