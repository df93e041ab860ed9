// CUDA kernel of Size (the CPU's in shape.cc): the element count, written into device memory as a kernel
// parameter (no wait). --sync-bn's BatchNorm rewrite counts each replica's batch with it on the device.
#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime::cuda {
namespace {

void size_op(KernelContext& ctx) {
  const int64_t n = ctx.input(0).numel();
  Tensor& Y = ctx.output(0, {}, DType::I64);
  copy_small_to_device(Y.raw(), &n, sizeof n, stream_of(ctx));
}

}  // namespace

GR_REGISTER_OPS(size) {
  ops.op("Size").cuda(locked<size_op>);
}

}  // namespace graphrun::runtime::cuda
