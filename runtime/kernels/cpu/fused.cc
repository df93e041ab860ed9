// CPU kernels of the fused ops that only the executor's internal graph holds (passes fuse_*):
// ai.graphrun ReluGrad, the Relu gradient in one pass over memory instead of Greater + Where.
#include "runtime/kernels/cpu/math_common.h"

namespace graphrun::runtime::cpu {
namespace {

// ReluGrad(dY, Y) = dY where Y > 0, else 0. A select, not dY * (Y > 0): the result is bit for bit
// Where(Greater(Y, 0), dY, 0), the standard graph it replaces (-0 and NaN in dY included).
void relu_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &y = ctx.input(1);
  GR_CHECK(dy.dtype() == y.dtype(), "ReluGrad: dY is " << dtype_name(dy.dtype()) << ", Y is " << dtype_name(y.dtype()));
  GR_CHECK(dy.shape() == y.shape(),
           "ReluGrad: dY " << shape_str(dy.shape()) << " and Y " << shape_str(y.shape()) << " differ in shape");
  Tensor& dx = ctx.output(0, y.shape(), y.dtype());
  const int64_t n = dx.numel();
  dispatch_float(y.dtype(), "ReluGrad", [&](auto tag) {
    using T = decltype(tag);
    const T *pd = ptr<T>(dy), *py = ptr<T>(y);
    T* px = ptr<T>(dx);
    // Both loaded unconditionally: a select the loop vectorises. One thread opens no OpenMP region, as
    // in the other elementwise kernels.
    auto range = [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {
        const T d = pd[i], v = py[i];
        px[i] = v > T(0) ? d : T(0);
      }
    };
    const int th = threads_for(ctx, n);
    if (th <= 1) return range(0, n);
#pragma omp parallel for num_threads(th) schedule(static)
    for (int t = 0; t < th; ++t) range(n * t / th, n * (t + 1) / th);
  });
}

}  // namespace

GR_REGISTER_OPS(fused) {
  ops.op(kGraphrunDomain, "ReluGrad")
      .cpu(relu_grad_kernel)
      .schema(OpSchemaSpec("the Relu gradient in one pass: dX = dY where Y > 0, else 0 (internal: pass fuse_relu_grad "
                           "makes it of Greater + Where; exported graphs keep those)")
                  .input("dY", "gradient of the Relu's output", "T")
                  .input("Y", "the Relu's output (or its input: the same sign)", "T")
                  .output("dX", "gradient of the Relu's input", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .output_like(0, 1));
}

}  // namespace graphrun::runtime::cpu
