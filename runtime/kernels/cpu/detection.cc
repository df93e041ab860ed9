// CPU kernel: detection family. NonMaxSuppression (runtime/kernels/nms.h, shared with the CUDA kernel); its
// output's length depends on the values, as NonZero's.
#include <cstring>

#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/nms.h"

namespace graphrun::runtime::cpu {

namespace {

void nms_kernel(KernelContext& ctx) {
  auto opt = [&](int i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; };
  const std::vector<int64_t> sel = non_max_suppression(ctx.node(), ctx.input(0), ctx.input(1), opt(2), opt(3), opt(4));
  Tensor& y = ctx.output(0, {static_cast<int64_t>(sel.size() / 3), 3}, DType::I64);
  if (!sel.empty()) std::memcpy(y.raw(), sel.data(), sel.size() * sizeof(int64_t));
}

}  // namespace

GR_REGISTER_OPS(detection) { ops.op("NonMaxSuppression").cpu(nms_kernel); }

}  // namespace graphrun::runtime::cpu
