// CUDA kernels: random family (the CPU's random.cc op set): RandomNormal, RandomUniform, their *Like forms and
// Bernoulli, drawn on the host from the executor's generator (runtime/kernels/random_fill.h: the CPU's numbers,
// in the same order) and copied to the device: the small tensors of a VAE's reparameterisation, not bulk noise.
#include <vector>

#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/random_fill.h"

namespace graphrun::runtime::cuda {
namespace {

void random_op(KernelContext& ctx) {
  Shape shape;
  const DType dt = random_ops::planned_output(ctx, &shape);
  Tensor& y = ctx.output(0, shape, dt);
  if (y.numel() == 0) return;
  std::vector<double> p;
  if (ctx.node().op_type == "Bernoulli") p = host_doubles(ctx, 0);
  std::vector<char> host(y.nbytes());
  random_ops::fill(ctx, host.data(), dt, y.numel(), p);
  // Pageable memory is staged before the call returns: `host` may go out of scope.
  GR_CUDA_CHECK(cudaMemcpyAsync(y.raw(), host.data(), host.size(), cudaMemcpyHostToDevice, stream_of(ctx)));
}

}  // namespace

GR_REGISTER_OPS(random) {
  for (const char* op : {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli"})
    ops.op(op).cuda(locked<random_op>);
}

}  // namespace graphrun::runtime::cuda
