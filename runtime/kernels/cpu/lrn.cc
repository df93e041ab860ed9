// CPU kernel of LRN (opsets 1 and 13): runtime/kernels/lrn_window.h's formula per element, f32 and f64
// (f16 and bf16 through f32). Its gradient is graph nodes (autodiff/rules/lrn.cc).
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/lrn_window.h"

namespace graphrun::runtime::cpu {

namespace {

template <class T>
void lrn_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const lrn::Params p = lrn::params(ctx.node(), x);
  const T* px = ptr<T>(x);
  T* py = ptr<T>(ctx.output(0, x.shape(), x.dtype()));
  const int64_t n = x.numel();
#pragma omp parallel for num_threads(threads_for(ctx, n * p.size)) schedule(static)
  for (int64_t i = 0; i < n; ++i) py[i] = lrn::value(px, i, p);
}

void lrn_op(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "LRN", [&](auto tag) { lrn_kernel<decltype(tag)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(lrn) { ops.op("LRN").cpu(via_f32<lrn_op>); }

}  // namespace graphrun::runtime::cpu
