// CPU kernels of the random ops: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike and
// Bernoulli, drawn as runtime/kernels/random_fill.h says (shared with the CUDA kernels).
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/random_fill.h"

namespace graphrun::runtime::cpu {
namespace {

void random_kernel(KernelContext& ctx) {
  const bool has_input = ctx.num_inputs() > 0 && ctx.has_input(0);
  const Tensor none;
  const Tensor& in = has_input ? ctx.input(0) : none;
  Shape shape;
  const DType dt = random_ops::output_type(ctx, has_input ? in.shape() : Shape{}, has_input ? in.dtype() : DType::F32,
                                           &shape);
  GR_CHECK(ctx.node().op_type == "RandomNormal" || ctx.node().op_type == "RandomUniform" || has_input,
           ctx.node().describe() << ": input is required");
  Tensor& y = ctx.output(0, shape, dt);
  std::vector<double> p;
  if (ctx.node().op_type == "Bernoulli") p = in.as_doubles();
  random_ops::fill(ctx, y.raw(), dt, y.numel(), p);
}

}  // namespace

GR_REGISTER_OPS(random) {
  for (const char* op : {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli"})
    ops.op(op).cpu(random_kernel);
}

}  // namespace graphrun::runtime::cpu
