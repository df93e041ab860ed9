// CPU kernel of Einsum (opset 12+): one loop over every label's range (runtime/kernels/einsum_plan.h: any
// number of operands, "...", repeated labels) with each operand's stride per label; sums in double.
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/einsum_plan.h"

namespace graphrun::runtime::cpu {
namespace {

template <class T>
void einsum_typed(KernelContext& ctx) {
  std::vector<Shape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    GR_CHECK(ctx.input(i).dtype() == ctx.input(0).dtype(), "Einsum: operands differ in element type");
    shapes.push_back(ctx.input(i).shape());
  }
  const EinsumPlan plan = plan_einsum(ctx.node().attr_s("equation", ""), shapes);
  const int n = ctx.num_inputs(), L = static_cast<int>(plan.dims.size());
  const std::vector<int64_t>& dims = plan.dims;
  const std::vector<std::vector<int64_t>>& strides = plan.strides;
  Tensor& y = ctx.output(0, plan.out_shape, ctx.input(0).dtype());
  const int64_t out_n = y.numel();
  int64_t inner = 1;
  for (int k = plan.out_labels; k < L; ++k) inner *= dims[k];
  std::vector<const T*> p(n);
  for (int i = 0; i < n; ++i) p[i] = ptr<T>(ctx.input(i));
  T* py = ptr<T>(y);
  std::vector<int64_t> c(L, 0), off(n, 0);
  for (int64_t o = 0; o < out_n; ++o) {
    double acc = 0;
    for (int64_t s = 0; s < inner; ++s) {
      double prod = 1;
      for (int i = 0; i < n; ++i) prod *= static_cast<double>(p[i][off[i]]);
      acc += prod;
      // Advance the odometer (the output's labels too, when the summed ones wrap).
      for (int k = L; k-- > 0;) {
        for (int i = 0; i < n; ++i) off[i] += strides[i][k];
        if (++c[k] < dims[k]) break;
        for (int i = 0; i < n; ++i) off[i] -= strides[i][k] * dims[k];
        c[k] = 0;
      }
    }
    py[o] = static_cast<T>(acc);
    if (inner == 0)  // an empty summed range: the output labels still advance
      for (int k = plan.out_labels; k-- > 0;) {
        for (int i = 0; i < n; ++i) off[i] += strides[i][k];
        if (++c[k] < dims[k]) break;
        for (int i = 0; i < n; ++i) off[i] -= strides[i][k] * dims[k];
        c[k] = 0;
      }
  }
}

void einsum_kernel(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() >= 1, "Einsum: needs at least one operand");
  dispatch_float(ctx.input(0).dtype(), "Einsum", [&](auto tag) { einsum_typed<decltype(tag)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(einsum) {
  ops.op("Einsum").cpu(einsum_kernel);
}

}  // namespace graphrun::runtime::cpu
