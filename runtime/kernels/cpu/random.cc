// CPU kernels of the random ops: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike and
// Bernoulli, drawn as runtime/kernels/random_fill.h says (shared with the CUDA kernels).
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/random_fill.h"

namespace graphrun::runtime::cpu {
namespace {

void random_kernel(KernelContext& ctx) {
  Shape shape;
  const DType dt = random_ops::planned_output(ctx, &shape);
  Tensor& y = ctx.output(0, shape, dt);
  std::vector<double> p;
  if (ctx.node().op_type == "Bernoulli") p = ctx.input(0).as_doubles();
  random_ops::fill(ctx, y.raw(), dt, y.numel(), p);
}

}  // namespace

GR_REGISTER_OPS(random) {
  for (const char* op : {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli"})
    ops.op(op).cpu(random_kernel);
}

}  // namespace graphrun::runtime::cpu
