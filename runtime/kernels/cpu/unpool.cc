// CPU kernels: unpool family. MaxUnpool (runtime/kernels/max_unpool.h's shapes): Y is zero but where the indices
// (flat into the whole unpooled tensor, as MaxPool's Indices are) put X's values; a repeated index keeps the last.
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/max_unpool.h"

namespace graphrun::runtime::cpu {

namespace {

template <class T>
void max_unpool_typed(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &idx = ctx.input(1);
  GR_CHECK(idx.dtype() == DType::I64 && idx.shape() == x.shape(),
           "MaxUnpool: I must be int64 of X's shape " << shape_str(x.shape()) << ", got " << dtype_name(idx.dtype())
                                                      << shape_str(idx.shape()));
  std::vector<int64_t> out;
  if (ctx.has_input(2)) out = int_list(ctx.input(2), "MaxUnpool output_shape");
  Shape unpooled;
  Tensor& y =
      ctx.output(0, max_unpool_shape(ctx.node(), x.shape(), ctx.has_input(2) ? &out : nullptr, &unpooled), x.dtype());
  if (y.numel()) std::memset(y.raw(), 0, y.nbytes());
  const UnpoolMap map = unpool_map(unpooled, y.shape());
  int64_t range = 1;
  for (int64_t d : unpooled) range *= d;
  const T* px = ptr<T>(x);
  const int64_t* pi = idx.data<int64_t>();
  T* py = ptr<T>(y);
  for (int64_t k = 0; k < x.numel(); ++k) {
    GR_CHECK(pi[k] >= 0 && pi[k] < range,
             "MaxUnpool: index " << pi[k] << " is outside the unpooled " << shape_str(unpooled));
    py[map.at(pi[k])] = px[k];
  }
}

void max_unpool_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "MaxUnpool", [&](auto tag) { max_unpool_typed<decltype(tag)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(unpool) { ops.op("MaxUnpool").cpu(via_f32<max_unpool_kernel>).host_inputs({2}); }

}  // namespace graphrun::runtime::cpu
