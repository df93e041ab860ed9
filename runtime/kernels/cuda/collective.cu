// CUDA kernels: collective family (the CPU's collective.cc op set): ai.graphrun AllReduce over a
// DeviceCommunicator (NCCL, or the device-local reduction of replicas sharing a GPU).
#include "runtime/cuda/nccl_comm.h"
#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime {
namespace cuda {
namespace {

// Not locked: a rank waits here for the others, and they must be able to launch meanwhile.
void allreduce_op(KernelContext& ctx) {
  const int k = ctx.num_inputs();
  GR_CHECK(ctx.num_outputs() == k, "AllReduce has " << k << " inputs but " << ctx.num_outputs() << " outputs");
  GR_CHECK(ctx.node().attr_s("reduction", "sum") == "sum", "AllReduce supports reduction 'sum' only");
  std::vector<DeviceCommunicator::Buffer> bufs;
  for (int i = 0; i < k; ++i) {
    const Tensor& G = ctx.input(i);
    GR_CHECK(G.dtype() == DType::F32, "AllReduce on CUDA takes f32, input " << i << " is " << dtype_name(G.dtype()));
    Tensor& R = ctx.output(i, G.shape(), DType::F32);
    if (G.numel()) bufs.push_back({dptr<float>(G), dptr<float>(R), G.numel()});
  }
  Communicator* comm = ctx.comm();
  if (!comm || comm->size() == 1) {
    // One replica: the sum over replicas is the value itself.
    for (const auto& b : bufs)
      GR_CUDA_CHECK(cudaMemcpyAsync(b.recv, b.send, b.count * sizeof(float), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    return;
  }
  auto* dcomm = dynamic_cast<DeviceCommunicator*>(comm);
  GR_CHECK(dcomm, "AllReduce on " << ctx.device().str() << " needs a CUDA communicator, got '" << comm->name() << "'");
  GR_CHECK(dcomm->device() == ctx.device(), "AllReduce on " << ctx.device().str() << " given the communicator of "
                                                            << dcomm->device().str());
  // With async kernels the reduction overlaps the compute stream until the executor calls the
  // completion before the first reader of the sums (see NcclCommunicator::allreduce_sum_group_async).
  if (ctx.async_allowed()) {
    if (std::function<void()> done = dcomm->allreduce_sum_group_async(bufs)) ctx.defer(std::move(done));
    return;
  }
  dcomm->allreduce_sum_group(bufs);
}

}  // namespace

GR_REGISTER_OPS(collective) {
  ops.op(kGraphrunDomain, "AllReduce").cuda(allreduce_op);
  ops.op(kGraphrunDomain, "ReplicaSum").cuda(allreduce_op);  // the forward-pass sum of --sync-bn
}

}  // namespace cuda
}  // namespace graphrun::runtime
