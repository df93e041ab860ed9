// CUDA kernel: detection family (the CPU's detection.cc). NonMaxSuppression reads its inputs back and selects
// on the host (runtime/kernels/nms.h, as the CPU): its output's length depends on the values.
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/nms.h"

namespace graphrun::runtime::cuda {
namespace {

void nms_op(KernelContext& ctx) {
  std::vector<std::vector<char>> bytes(5);
  std::vector<Tensor> host(5);
  const Tensor* in[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  for (int i = 0; i < 5; ++i) {
    if (!ctx.has_input(i)) continue;
    const Tensor& t = ctx.input(i);
    bytes[i] = host_bytes(ctx, i);
    host[i] = Tensor::view(t.dtype(), t.shape(), bytes[i].data());
    in[i] = &host[i];
  }
  const std::vector<int64_t> sel = non_max_suppression(ctx.node(), *in[0], *in[1], in[2], in[3], in[4]);
  Tensor& Y = ctx.output(0, {static_cast<int64_t>(sel.size() / 3), 3}, DType::I64);
  if (!sel.empty())
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), sel.data(), sel.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream_of(ctx)));
}

}  // namespace

GR_REGISTER_OPS(detection) { ops.op("NonMaxSuppression").cuda(locked<nms_op>); }

}  // namespace graphrun::runtime::cuda
