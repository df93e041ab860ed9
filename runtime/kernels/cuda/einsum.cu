// CUDA kernel: einsum family (the CPU's einsum.cc): Einsum, f32 and f64, as one generic loop (the CPU's
// plan, runtime/kernels/einsum_plan.h): a thread per output element walks the summed labels' ranges and
// sums the operands' products in double. Right for every equation; not a MatMul decomposition (slow on
// large contractions).
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/einsum_plan.h"

namespace graphrun::runtime::cuda {
namespace {

constexpr int kMaxOperands = 4;
constexpr int kMaxLabels = 16;

template <class T>
struct EinsumArgs {
  int n = 0, labels = 0, out_labels = 0;
  int64_t inner = 1;  // the summed labels' combined range
  int64_t dims[kMaxLabels];
  int64_t strides[kMaxOperands][kMaxLabels];
  const T* p[kMaxOperands];
};

template <class T>
__global__ void einsum_kernel(EinsumArgs<T> a, T* y, int64_t out_n) {
  GR_GRID_STRIDE(o, out_n) {
    int64_t off[kMaxOperands], c[kMaxLabels];
    for (int i = 0; i < a.n; ++i) off[i] = 0;
    int64_t r = o;
    for (int k = a.out_labels - 1; k >= 0; --k) {
      const int64_t ck = r % a.dims[k];
      r /= a.dims[k];
      for (int i = 0; i < a.n; ++i) off[i] += ck * a.strides[i][k];
    }
    for (int k = a.out_labels; k < a.labels; ++k) c[k] = 0;
    double acc = 0;
    for (int64_t s = 0; s < a.inner; ++s) {
      double prod = 1;
      for (int i = 0; i < a.n; ++i) prod *= static_cast<double>(a.p[i][off[i]]);
      acc += prod;
      // Odometer over the summed labels, the last fastest.
      for (int k = a.labels - 1; k >= a.out_labels; --k) {
        for (int i = 0; i < a.n; ++i) off[i] += a.strides[i][k];
        if (++c[k] < a.dims[k]) break;
        for (int i = 0; i < a.n; ++i) off[i] -= a.strides[i][k] * a.dims[k];
        c[k] = 0;
      }
    }
    y[o] = static_cast<T>(acc);
  }
}

void einsum_op(KernelContext& ctx) {
  const int n = ctx.num_inputs();
  GR_CHECK(n >= 1 && n <= kMaxOperands, "Einsum on CUDA takes 1 to " << kMaxOperands << " operands, got " << n);
  const DType dt = ctx.input(0).dtype();
  GR_CHECK(dt == DType::F32 || dt == DType::F64, "Einsum on CUDA takes f32 or f64, got " << dtype_name(dt));
  std::vector<Shape> shapes;
  for (int i = 0; i < n; ++i) {
    GR_CHECK(ctx.input(i).dtype() == dt, "Einsum: operands differ in element type");
    shapes.push_back(ctx.input(i).shape());
  }
  const EinsumPlan plan = plan_einsum(ctx.node().attr_s("equation", ""), shapes);
  const int labels = static_cast<int>(plan.dims.size());
  GR_CHECK(labels <= kMaxLabels, "Einsum on CUDA takes at most " << kMaxLabels << " labels (with the dims of '...'), got "
                                                                 << labels);
  Tensor& Y = ctx.output(0, plan.out_shape, dt);
  const int64_t out_n = Y.numel();
  if (out_n == 0) return;
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    EinsumArgs<T> a;
    a.n = n;
    a.labels = labels;
    a.out_labels = plan.out_labels;
    for (int k = 0; k < labels; ++k) {
      a.dims[k] = plan.dims[k];
      if (k >= plan.out_labels) a.inner *= plan.dims[k];
      for (int i = 0; i < n; ++i) a.strides[i][k] = plan.strides[i][k];
    }
    for (int i = 0; i < n; ++i) a.p[i] = dptr<T>(ctx.input(i));
    einsum_kernel<T><<<grid_for(out_n), kThreads, 0, stream_of(ctx)>>>(a, dptr<T>(Y), out_n);
  };
  if (dt == DType::F32) launch(float{});
  else launch(double{});
  GR_LAUNCH_CHECK("einsum");
}

}  // namespace

GR_REGISTER_OPS(einsum) { ops.op("Einsum").cuda(locked<einsum_op>); }

}  // namespace graphrun::runtime::cuda
